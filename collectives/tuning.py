"""Tuning files: the default choices that ``python -m bench tune`` measured on a
machine, loaded with ``COLLECTIVES_TUNING=FILE`` or ``cc.init(tuning=FILE)``.

A file is JSON (docs/performance.md, "Tuning a new machine")::

    {"format": "collectives-tuning", "version": 1,
     "ranks": 4, "ranks_per_host": [4], "transport": "shm", "adapt": true,
     "rules": {"all_reduce": {"plain": [[32768, "direct"], [null, "ring"]], ...}},
     "library": ..., "created": ..., "machine": {...}, "measured": {...}}

``rules[call][kind]`` lists ``[up_to, algorithm]`` by size: a call of
``nbytes <= up_to`` takes the first such rule's algorithm (``null``: no
bound, the last rule only).  Where a call or kind has no rule, the built-in
table (selection.py) decides.  ``adapt`` false fixes every choice (as
``COLLECTIVES_ADAPT=0``).  A file made for another number of ranks, layout
of hosts or transport is not used: one warning, and the built-in table.  A
malformed file is a TuningError naming what is wrong.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Optional

from .families import FAMILIES
from .selection import KINDS

FORMAT = "collectives-tuning"
VERSION = 1
ENV = "COLLECTIVES_TUNING"


class TuningError(ValueError):
    """A tuning file that cannot be read or does not follow the format."""


class TuningWarning(UserWarning):
    """A tuning file made for another job shape: the built-in table is used."""


@dataclasses.dataclass(frozen=True)
class Tuning:
    """A checked tuning file."""

    path: str
    ranks: int
    ranks_per_host: tuple[int, ...]
    transport: str
    adapt: bool
    rules: dict  # call -> kind -> tuple of (up_to or None, algorithm)

    def misfit(self, size: int, layout: tuple[int, ...], transport: str) -> Optional[str]:
        """Why this file does not fit a communicator of ``size`` ranks, hosts
        of ``layout`` ranks and ``transport`` (None: it fits)."""
        if self.ranks != size:
            return f"it was made for {self.ranks} ranks, this job has {size}"
        if self.ranks_per_host != tuple(layout):
            return (f"it was made for ranks per host {list(self.ranks_per_host)}, this job "
                    f"has {list(layout)}")
        if self.transport != transport:
            return f"it was made for transport {self.transport!r}, this job runs {transport!r}"
        return None

    def rule(self, call: str, kind: str, nbytes: int) -> Optional[str]:
        """The algorithm the file names for ``call`` on ``kind`` arrays of
        ``nbytes`` (None: no rule)."""
        for up_to, alg in self.rules.get(call, {}).get(kind, ()):
            if up_to is None or nbytes <= up_to:
                return alg
        return None


def _fail(path: str, what: str) -> None:
    raise TuningError(f"tuning file {path}: {what}")


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check(doc, path: str = "<document>") -> Tuning:
    """``doc`` (a parsed tuning file) as a Tuning; TuningError naming the
    first thing wrong."""
    from transports import KINDS as TRANSPORTS
    if not isinstance(doc, dict):
        _fail(path, f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        _fail(path, f"'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        _fail(path, f"'version' must be {VERSION}, got {doc.get('version')!r}")
    for key in ("ranks", "ranks_per_host", "transport", "rules"):
        if key not in doc:
            _fail(path, f"missing {key!r}")
    ranks, per_host = doc["ranks"], doc["ranks_per_host"]
    if not _int(ranks) or ranks < 1:
        _fail(path, f"'ranks' must be a positive integer, got {ranks!r}")
    if not isinstance(per_host, list) or not per_host or \
            not all(_int(x) and x > 0 for x in per_host):
        _fail(path, f"'ranks_per_host' must be a list of positive integers, got {per_host!r}")
    if sum(per_host) != ranks:
        _fail(path, f"'ranks_per_host' {per_host} adds up to {sum(per_host)}, not 'ranks' "
                    f"{ranks}")
    if doc["transport"] not in TRANSPORTS:
        _fail(path, f"'transport' must be one of {list(TRANSPORTS)}, got {doc['transport']!r}")
    adapt = doc.get("adapt", True)
    if not isinstance(adapt, bool):
        _fail(path, f"'adapt' must be true or false, got {adapt!r}")
    for key in ("machine", "measured"):
        if key in doc and not isinstance(doc[key], dict):
            _fail(path, f"{key!r} must be an object")
    rules = doc["rules"]
    if not isinstance(rules, dict):
        _fail(path, "'rules' must be an object of collectives")
    out: dict = {}
    for call, kinds in rules.items():
        if call not in FAMILIES:
            _fail(path, f"rules: unknown collective {call!r} (expected one of {sorted(FAMILIES)})")
        if not isinstance(kinds, dict):
            _fail(path, f"rules.{call} must be an object of array kinds")
        names = FAMILIES[call].names()
        out[call] = {}
        for kind, rows in kinds.items():
            where = f"rules.{call}.{kind}"
            if kind not in KINDS:
                _fail(path, f"{where}: unknown array kind {kind!r} (expected one of "
                            f"{list(KINDS)})")
            if not isinstance(rows, list) or not rows:
                _fail(path, f"{where} must be a non-empty list of [up_to, algorithm]")
            last = -1
            for i, r in enumerate(rows):
                if not (isinstance(r, list) and len(r) == 2):
                    _fail(path, f"{where}[{i}] must be [up_to, algorithm], got {r!r}")
                up_to, alg = r
                if up_to is None:
                    if i != len(rows) - 1:
                        _fail(path, f"{where}[{i}]: only the last rule may have no bound "
                                    "(null)")
                elif not _int(up_to) or up_to <= last:
                    _fail(path, f"{where}[{i}]: up_to must be an integer of bytes above the "
                                f"previous rule's ({last}), got {up_to!r}")
                else:
                    last = up_to
                if alg not in names:
                    _fail(path, f"{where}[{i}]: {call} has no algorithm {alg!r} (it has "
                                f"{', '.join(names)})")
            out[call][kind] = tuple((up_to, alg) for up_to, alg in rows)
    return Tuning(path, ranks, tuple(per_host), doc["transport"], adapt, out)


def load(path) -> Tuning:
    """Read and check the tuning file at ``path``."""
    path = str(path)
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise TuningError(f"tuning file {path}: cannot be read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise TuningError(f"tuning file {path}: not JSON ({e})") from None
    return check(doc, path)


def fitting(tuning: Optional[Tuning], size: int, layout, transport: str,
            warn: bool) -> Optional[Tuning]:
    """``tuning`` where it fits this communicator; else None, with one
    warning where ``warn``."""
    if tuning is None:
        return None
    why = tuning.misfit(size, tuple(layout), transport)
    if why is None:
        return tuning
    if warn:
        warnings.warn(f"tuning file {tuning.path} not used: {why}; the built-in selection "
                      "table decides (run `python -m bench tune` for this job)",
                      TuningWarning, stacklevel=3)
    return None
