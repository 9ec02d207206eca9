"""A collective's call key: what every rank's call must agree on, in one int64.

The transports carry the key of the call in progress on every message and
exchange and compare it with their own (transports/base.py, ``call_bytes``;
on mpi a residue of it in the tag), so that ranks whose calls differ raise
``CollectiveError`` instead of mixing their data.  The key holds the bytes
every rank's call moves alike and, beside them, the call, the dtype, the op,
the root and a hash of the counts of a variable-count call, so that ranks
that pass the same number of bytes but disagree on any of those are caught
too, at no cost on the fast path (no extra round: the word is sent anyway).

Layout (bit 62 marks a key made here; a transport's own tests use plain
byte counts, which read as bytes):

  bits  0-3   dtype: its index in DTYPES + 1 (0: none)
  bits  4-6   op: its index in Op + 1 (0: none)
  bits  7-17  root + 1, modulo 2047 (0: none)
  bits 18-22  call: its index in ``CALLS`` + 1
  bits 23-28  counts: a hash of a variable-count call's counts (0: none)
  bits 29-61  bytes, modulo 2^33
"""
from __future__ import annotations

from transports import errors

from . import dtypes
from .families import CALLS as _FIXED, MORE
from .ops import Op

FLAG = 1 << 62
# every call that carries a key, in a fixed order (the same on every rank)
CALLS: tuple[str, ...] = _FIXED + tuple(MORE)
_CALL = {c: i + 1 for i, c in enumerate(CALLS)}
_OPS = list(Op)
_OP = {o: i + 1 for i, o in enumerate(_OPS)}
_ROOTS = 2047
_BYTES = (1 << 33) - 1
_FIELDS = (("dtype", 0, 4), ("op", 4, 3), ("root", 7, 11), ("call", 18, 5),
           ("counts", 23, 6))


def low(call: str, dtype=None, op: Op | None = None, root: int | None = None) -> int:
    """The key's fields but the bytes and counts (what ``key`` and
    ``counted`` add)."""
    d = 0 if dtype is None else (dtypes.index(dtype) + 1)
    o = 0 if op is None else _OP[op]
    r = 0 if root is None else root % _ROOTS + 1
    return FLAG | d | o << 4 | r << 7 | _CALL[call] << 18


def counted(low_bits: int, counts: tuple) -> int:
    """``low_bits`` with a hash of a variable-count call's counts."""
    return low_bits | (hash(tuple(counts)) % 63 + 1) << 23


BYTES_AT = 29  # the bit where the bytes start (up to 2^33 - 1: key() wraps them)


def key(nbytes: int, low_bits: int) -> int:
    """The call key of a call of ``nbytes`` bytes whose other fields are ``low_bits``."""
    return low_bits | (nbytes & _BYTES) << BYTES_AT


def fields(k: int) -> dict:
    """A key's fields, as numbers."""
    f = {name: (k >> at) & ((1 << width) - 1) for name, at, width in _FIELDS}
    f["bytes"] = (k >> 29) & _BYTES
    return f


def _says(f: dict, names: list[str]) -> str:
    """Fields ``names`` of a decoded key in words."""
    out = []
    for n in names:
        v = f[n]
        if n == "call":
            out.append(CALLS[v - 1] if 0 < v <= len(CALLS) else "an unknown call")
        elif n == "bytes":
            out.append(f"{v} bytes")
        elif n == "dtype":
            out.append(f"dtype {dtypes.at(v - 1)}" if v else "no dtype")
        elif n == "op":
            out.append(f"op {_OPS[v - 1].value}" if 0 < v <= len(_OPS) else "no op")
        elif n == "root":
            out.append(f"root {v - 1}" if v else "no root")
    return ", ".join(out)


_ORDER = ("call", "bytes", "dtype", "op", "root", "counts")


def _differ(a: dict, b: dict) -> list[str]:
    return [n for n in _ORDER if a[n] != b[n]]


def words(theirs: int, mine: int, modulus: int, rank: int) -> str | None:
    """How rank p's call (key ``theirs``, a residue modulo ``modulus`` where
    that is not 0) differs from rank ``rank``'s (``mine``), for
    transports.errors.mismatched; None where ``mine`` is not a key made here."""
    if not mine & FLAG or mine < 0:
        return None
    me = fields(mine)
    if modulus:
        guess = _residue_match(theirs, mine, modulus)
        if guess is None:
            return (f"differs from rank {rank}'s ({_says(me, list(_ORDER[:2]))}) in its "
                    "size, dtype, op, root or counts")
        theirs = guess
    if not theirs & FLAG:
        return None
    them = fields(theirs)
    diff = _differ(them, me)
    if diff == ["bytes"]:
        return (f"moves {them['bytes']} bytes where rank {rank}'s moves {me['bytes']} "
                "(shapes, dtypes or counts differ between ranks)")
    shown = [d for d in diff if d != "counts"]
    shown = shown if "call" in shown else ["call"] + shown
    likely = " (as its tag's residue reads)" if modulus else ""
    return (f"is {_says(them, shown)} where rank {rank}'s is {_says(me, shown)}{likely} "
            f"({', '.join(diff)} differ{'s' if len(diff) == 1 else ''} between ranks)")


_GUESS_ROOTS = 64


def _residue_match(residue: int, mine: int, modulus: int) -> int | None:
    """The key that differs from ``mine`` in its call, dtype, op or root
    (below ``_GUESS_ROOTS``) alone and has ``residue`` modulo ``modulus``,
    where exactly one does: about 120 candidates, so that a residue of a
    call that differs in more (its size) names a wrong field about once in
    130 (with MPICH's modulus, 16381)."""
    found = []
    for name, at, width in _FIELDS:
        if name == "counts":
            continue
        clear = mine & ~(((1 << width) - 1) << at)
        for v in range(_GUESS_ROOTS + 1 if name == "root" else 1 << width):
            k = clear | v << at
            if k != mine and k % modulus == residue:
                found.append(k)
    return found[0] if len(found) == 1 else None


errors.key_words = words  # mismatched() reads the keys made here in words
