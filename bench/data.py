"""Deterministic inputs and their exact references, for ``--check``.

Rank r's input element i is ``pattern(r)[(i + offset) % PERIOD]``: small
integers (1..13, or 1 and 2 for ``prod``), so that every reduction of them
is exact in every dtype (or wraps the same way in numpy and in the library,
for narrow integers).  Because every input has the same period, so does
every reduction: the reference is the numpy reduction, in rank order, of
the ranks' PERIOD-element patterns, tiled out to the needed length.  A
prime period keeps misplaced blocks and chunks (offsets that are multiples
of powers of two) from matching by accident.
"""
from __future__ import annotations

import numpy as np

PERIOD = 61
_UFUNCS = {"sum": np.add, "avg": np.add, "prod": np.multiply,
           "max": np.maximum, "min": np.minimum}
_COMPARE_BLOCK = 1 << 22  # elements per block when counting mismatches


def pattern(rank: int, dtype: np.dtype, op: str = "sum") -> np.ndarray:
    """The PERIOD values that rank ``rank``'s inputs repeat."""
    k = np.arange(PERIOD)
    if op == "prod":
        re = 1 + ((k + rank) % 3 == 0)
        im = np.zeros(PERIOD)
    else:
        re = (k * 5 + rank * 11) % 13 + 1
        im = (k * 7 + rank * 3) % 13 + 1
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (re + 1j * im).astype(dtype)
    return re.astype(dtype)


def periodic(pat: np.ndarray, count: int, offset: int = 0) -> np.ndarray:
    """``count`` elements whose element i is ``pat[(i + offset) % len(pat)]``."""
    p = len(pat)
    out = np.empty(count, pat.dtype)
    head = np.roll(pat, -(offset % p))[:count]
    out[:len(head)] = head
    filled = len(head)
    while filled < count:  # doubling copies keep the period: filled is a multiple of p
        k = min(filled, count - filled)
        out[filled:filled + k] = out[:k]
        filled += k
    return out


def inputs(rank: int, count: int, dtype: np.dtype, op: str = "sum",
           offset: int = 0) -> np.ndarray:
    """Rank ``rank``'s deterministic input (elements offset..offset+count)."""
    return periodic(pattern(rank, dtype, op), count, offset)


def reduced(size: int, count: int, dtype: np.dtype, op: str, offset: int = 0) -> np.ndarray:
    """The reduction over ranks 0..size-1 of their ``inputs``, as numpy computes it."""
    uf = _UFUNCS[op]
    acc = pattern(0, dtype, op)
    for r in range(1, size):
        uf(acc, pattern(r, dtype, op), out=acc)
    if op == "avg":
        np.true_divide(acc, size, out=acc)
    return periodic(acc, count, offset)


def mismatches(got: np.ndarray, want: np.ndarray, nranks: int) -> int:
    """Elements of ``got`` that differ from ``want``.

    Integers must match exactly; floating and complex values within a
    relative error of a few ulps per rank (the reassociation error bound).
    """
    if not isinstance(got, np.ndarray):  # a CuPy result
        got = got.get()
    got, want = got.reshape(-1), want.reshape(-1)
    if got.shape != want.shape:
        return max(got.size, want.size)
    kind = got.dtype.kind
    rtol = 4 * nranks * float(np.finfo(got.dtype).eps) if kind in "fc" else 0.0
    bad = 0
    for lo in range(0, got.size, _COMPARE_BLOCK):
        g, w = got[lo:lo + _COMPARE_BLOCK], want[lo:lo + _COMPARE_BLOCK]
        if kind in "fc":
            bad += int(np.count_nonzero(~np.isclose(g, w, rtol=rtol, atol=0.0)))
        else:
            bad += int(np.count_nonzero(g != w))
    return bad
