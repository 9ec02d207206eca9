"""Errors raised while bytes move.  Re-exported by ``collectives``.

Two kinds of ``CollectiveError`` have one wording on every transport, so
they are built here: ``mismatched`` (ranks whose calls move different
numbers of bytes) and ``peer_notice`` (another rank of the call detected an
error and said so); ``describe`` puts any error in the words that a notice
or a later error quotes.
"""
from __future__ import annotations

import re


class CollectiveError(RuntimeError):
    """A collective or point-to-point call could not complete.

    ``call`` names the call ("all_reduce", "recv", ...) once the
    communicator knows it; ``ranks`` lists the ranks concerned.  ``relayed``
    is true for an error that another rank detected and told this one about
    (``peer_notice``): this rank does not pass it on.
    """

    relayed = False

    def __init__(self, message: str, *, call: str | None = None,
                 ranks: list[int] | tuple[int, ...] = ()):
        super().__init__(message)
        self.detail = message
        self.call = call
        self.ranks = list(ranks)

    def __str__(self) -> str:
        return f"{self.call}: {self.detail}" if self.call else self.detail


class CollectiveTimeout(CollectiveError, TimeoutError):
    """A peer did not arrive within the communicator's timeout."""


class PeerFailure(CollectiveError):
    """A peer process died (or its endpoint broke) while we depended on it."""


def describe(e: BaseException) -> str:
    """Error ``e`` in words, without the call a CollectiveError names: its
    detail, else "Type: text", or the type alone where the text is empty (a
    KeyboardInterrupt, say), never "Type: " with nothing after it."""
    if isinstance(e, CollectiveError):
        return e.detail
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# How two call keys read in words: ``(theirs, mine, modulus, rank) -> text``
# or None; ``rank`` holds ``mine``, and ``theirs`` is known only modulo
# ``modulus`` where that is not 0 (MPI's tags carry a residue).  Set by the
# layer that makes the keys (collectives' callkey.py, which folds the call,
# dtype, op, root and counts into them); a key it did not make (a plain
# byte count) reads as bytes.
key_words = None


def mismatched(peer: int, seq: int, theirs: int | None, rank: int, mine: int,
               modulus: int = 0) -> CollectiveError:
    """Rank ``peer``'s collective #seq has call key ``theirs`` where this
    rank's has ``mine`` (``modulus``: theirs is a residue modulo it; None:
    unknown): by default the bytes the calls move."""
    said = key_words(theirs, mine, modulus, rank) if key_words is not None and theirs is not None \
        else None
    if said is None:
        moves = "a different number of bytes" if theirs is None or modulus else f"{theirs} bytes"
        said = (f"moves {moves} where rank {rank}'s moves {mine} (shapes, dtypes or counts "
                "differ between ranks)")
    return CollectiveError(f"mismatched collectives: rank {peer}'s call #{seq} {said}",
                           ranks=[peer])


# a message of a call at most this many calls before the current one, still
# unreceived, is a stray: collectives receive all their messages in the call
STRAY_CALLS = 1 << 14


def stray(peer: int, call: int) -> CollectiveError:
    """The error for rank ``peer``'s message of collective ``call``, an
    earlier one, that this rank's call never received: the calls differed
    (a root, say, so that the peer sent where this rank did not receive).
    ``seq``: the call it concerns, whose ranks its notice must reach."""
    e = CollectiveError(f"mismatched collectives: rank {peer}'s call #{call} sent this rank a "
                        f"message that its own call #{call} did not take (the calls differ "
                        "between ranks: their root, dtype, op, counts or size)", ranks=[peer])
    e.seq = call
    return e


def peer_notice(peer: int, text: str) -> CollectiveError:
    """The error of a rank that rank ``peer`` told (``text``: its words, "rank p
    detected an error in <call> #k: ..."): a PeerFailure naming the dead
    ranks where rank ``peer`` found them dead ("... rank(s) [d, ...] died
    during ..."), a CollectiveTimeout naming the ranks it waited for where
    it timed out ("... no progress from rank(s) [d, ...]"), else a
    CollectiveError naming ``peer``."""
    dead, late = _DIED.search(text), _LATE.search(text)
    if dead or late:
        kind = PeerFailure if dead else CollectiveTimeout
        e: CollectiveError = kind(text, ranks=[int(r) for r in (dead or late).group(1).split(",")])
        e.told_ranks = True  # ranks in the teller's numbering, as its text
    else:
        e = CollectiveError(text, ranks=[peer])
    e.relayed = True
    return e


def renumber(e: CollectiveError, world, host_of, names) -> CollectiveError:
    """Put error ``e``, raised inside a part of a communicator whose rank r
    is rank ``world[r]`` of the whole one, in the whole one's ranks, each
    group of them with its host: ``e.ranks`` mapped, and in its words every
    "rank(s) [r, ...]" (then "... on host X") and "rank r" (then "(host
    X)").  ``host_of``:
    each whole rank's host index, ``names`` the hosts' names.  A notice
    relayed from another rank is in that rank's words (the whole
    communicator's ranks) and keeps them.  Once per error: a renumbered
    error passing through an outer part stays as it is."""
    if getattr(e, "renumbered", False):
        return e
    e.renumbered = True
    if not (e.relayed and getattr(e, "told_ranks", False)):
        e.ranks = [world[r] for r in e.ranks]
    if e.relayed:
        return e

    def hosts(ranks: list[int]) -> str:
        got = sorted({host_of[r] for r in ranks})
        label = ", ".join(names[h] if h < len(names) else str(h) for h in got)
        return f"host{'s' if len(got) > 1 else ''} {label}"

    def many(m: re.Match) -> str:
        ranks = [world[int(r)] for r in m.group(1).split(",")]
        return f"rank(s) {ranks} on {hosts(ranks)}"

    def one(m: re.Match) -> str:
        r = world[int(m.group(1))]
        return f"rank {r} ({hosts([r])})"

    e.detail = _ONE.sub(one, _MANY.sub(many, e.detail))
    return e


_RANKS = r"rank\(s\) \[(\d+(?:, \d+)*)\]"  # "rank(s) [2, 3]", the ranks a group
_MANY = re.compile(_RANKS)
_ONE = re.compile(r"\brank (\d+)\b")
_TOLD = r"detected an error in \S+ #\d+: "
_LATE = re.compile(_TOLD + r"timed out after \S+ in \S+: no progress from " + _RANKS)
_DIED = re.compile(_TOLD + _RANKS + r"(?: on hosts? .+?)? died during ")
