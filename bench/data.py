"""Deterministic inputs, their numpy references and the tolerance.

One data policy for the benchmark's ``--check`` and for the test suite
(``tests/conformance.py``, ``tests/soak.py``), which import it from here.

Inputs: ``make(dtype, shape, rank, seed, op)`` is rank ``rank``'s input.
Element i is drawn by a hash of ``(i mod PERIOD, rank, seed)``, so the values
are cheap, differ between ranks and between seeds, and repeat with a prime
period (misplaced blocks and chunks, whose offsets are multiples of powers of
two, never line up with a copy of themselves).  The values make every
reduction exact in every order of combination:

- floats are quarter-integers in [-5, 5] (complex: both parts): a sum over
  a few dozen ranks is exact even in float16;
- for ``prod``, values come from small sets whose products are exact
  (0.5, 1, 2, -1 for floats; 1, -1, 1j, -1j, 2 for complex);
- integers are small (-10..10 signed, 0..20 unsigned); integer sums and
  products that wrap do so modulo 2^bits in every order, like numpy's.

References: ``reduced`` is numpy's reduction over the ranks in rank order
(``avg``: the sum in float64 or complex128, divided by the number of ranks,
cast back), ``stacked`` the ranks' inputs one above the other.  Since every
input has period PERIOD, so has every reduction: a reference is computed on
one period at most and tiled, which keeps ``--check`` cheap at any size.

Tolerance: integers must match exactly.  Floating results may differ from
the reference only by ``avg``'s one division (the reference rounds a float64
quotient, the library divides in the dtype): within ``ULPS`` units of the
dtype's epsilon, relative, and no absolute slack.

The op table and the dtypes are the library's own (``collectives.ops``); the
suite checks the references against hand-computed values
(``tests/test_data.py``), so a wrong table cannot hide behind itself.
"""
from __future__ import annotations

from typing import Union

import numpy as np

from collectives.ops import DTYPES, UFUNCS, Op, resolve

PERIOD = 1_000_003  # a prime
ULPS = 2
COMPARE_BLOCK = 1 << 22  # elements compared at a time when counting mismatches

_MULT = 2654435761  # Knuth's multiplicative hash; not a multiple of PERIOD
PROD_VALUES = {"i": [1, -1, 2, 3, -2], "u": [1, 2, 3, 1], "f": [0.5, 1.0, 2.0, -1.0],
               "c": [1, -1, 1j, -1j, 2]}

Shape = Union[int, tuple]


def ops_for(dtype) -> list[str]:
    """The ops that the library takes for ``dtype``, in ``Op`` order."""
    dt = np.dtype(dtype)
    ok = []
    for o in Op:
        try:
            resolve(o.value, dt)
        except (TypeError, ValueError):
            continue
        ok.append(o.value)
    return ok


def _shape(shape: Shape) -> tuple:
    return shape if isinstance(shape, tuple) else (int(shape),)


def _tile(period: np.ndarray, count: int) -> np.ndarray:
    """``count`` elements that repeat ``period`` (doubling copies: fast at any size);
    ``period`` itself when it has ``count`` elements."""
    if count == len(period):
        return period
    if count < len(period):
        return period[:count].copy()
    out = np.empty(count, period.dtype)
    out[:len(period)] = period
    filled = len(period)
    while filled < count:  # filled stays a multiple of the period
        k = min(filled, count - filled)
        out[filled:filled + k] = out[:k]
        filled += k
    return out


def make(dtype, shape: Shape, rank: int, seed: int = 0, op: str = "sum",
         offset: int = 0) -> np.ndarray:
    """Rank ``rank``'s input of ``shape``: its elements ``offset`` .. ``offset + size``."""
    dt, shape = np.dtype(dtype), _shape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    idx = (np.arange(min(count, PERIOD), dtype=np.int64) + offset) % PERIOD
    h = (idx * _MULT + (rank + 1) * 40503 + seed * 9176) % PERIOD
    if op == "prod":
        table = np.array(PROD_VALUES[dt.kind])
        v = table[h % len(table)]
    elif dt.kind == "u":
        v = h % 21
    elif dt.kind == "i":
        v = h % 21 - 10
    else:
        v = (h % 41 - 20) / 4
        if dt.kind == "c":
            v = v + 1j * ((h // 41) % 41 - 20) / 4
    return _tile(v.astype(dt), count).reshape(shape)


def stacked(n: int, dtype, shape: Shape, seed: int = 0, op: str = "sum") -> np.ndarray:
    """Ranks 0..n-1's inputs, shape ``(n, *shape)``: what a gather collects."""
    return np.stack([make(dtype, shape, r, seed, op) for r in range(n)])


def reduced(n: int, dtype, shape: Shape, op: str = "sum", seed: int = 0,
            offset: int = 0) -> np.ndarray:
    """The reduction by ``op`` of ranks 0..n-1's ``make(..., offset)``, in rank order."""
    dt, shape = np.dtype(dtype), _shape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    m = min(count, PERIOD)
    o = resolve(op, dt)
    parts = (make(dt, m, r, seed, op, offset) for r in range(n))
    if o is Op.AVG:
        wide = np.complex128 if dt.kind == "c" else np.float64
        acc = np.zeros(m, wide)
        for p in parts:
            acc += p
        acc = (acc / n).astype(dt)
    else:
        uf = UFUNCS[o]
        acc = next(parts)
        for p in parts:
            uf(acc, p, out=acc)
    return _tile(acc, count).reshape(shape)


def poison(want: np.ndarray) -> np.ndarray:
    """An array that differs from ``want`` in every element: NaN for floating
    types, ``want + 1`` (wrapping) for integers.  Outputs are filled with it
    before a checked call, so that an element the call fails to write is wrong."""
    if want.dtype.kind in "fc":
        return np.full(want.shape, np.nan, want.dtype)
    return want + want.dtype.type(1)


def rtol(dtype) -> float:
    """The relative tolerance for ``dtype``: 0 for integers, ULPS epsilons for floats."""
    dt = np.dtype(dtype)
    return ULPS * float(np.finfo(dt).eps) if dt.kind in "fc" else 0.0


def host(a) -> np.ndarray:
    """``a`` as a numpy array (a copy from the GPU for a CuPy array)."""
    return a if isinstance(a, np.ndarray) else a.get()


def _close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: ``got`` matches ``want`` under the tolerance (compared in 64 bits)."""
    if want.dtype.kind not in "fc":
        return got == want
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    g, w = got.astype(wide), want.astype(wide)
    return np.abs(g - w) <= rtol(want.dtype) * np.abs(w)


def mismatches(got, want: np.ndarray) -> int:
    """Elements of ``got`` (numpy or CuPy) that do not match ``want``; every
    element when the sizes differ."""
    got, want = host(got).reshape(-1), want.reshape(-1)
    if got.shape != want.shape:
        return max(got.size, want.size)
    bad = 0
    for lo in range(0, got.size, COMPARE_BLOCK):
        ok = _close(got[lo:lo + COMPARE_BLOCK], want[lo:lo + COMPARE_BLOCK])
        bad += int(ok.size - np.count_nonzero(ok))
    return bad


def expect(got, want: np.ndarray, what: str = "result") -> None:
    """Assert that numpy array ``got`` has ``want``'s shape and dtype and matches it."""
    assert isinstance(got, np.ndarray), f"{what} is {type(got).__name__}, not an ndarray"
    assert got.shape == want.shape, f"{what} shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what} dtype {got.dtype} != {want.dtype}"
    bad = mismatches(got, want)
    if bad:
        ok = _close(got.reshape(-1), want.reshape(-1))
        first = np.flatnonzero(~ok)[:5]
        raise AssertionError(
            f"{what}: {bad} of {want.size} elements differ (dtype {want.dtype}, rtol "
            f"{rtol(want.dtype):g}); first at flat index {first.tolist()}: got "
            f"{got.reshape(-1)[first].tolist()}, want {want.reshape(-1)[first].tolist()}")


__all__ = ["DTYPES", "PERIOD", "ULPS", "ops_for", "make", "stacked", "reduced", "poison",
           "rtol", "host", "mismatches", "expect"]
