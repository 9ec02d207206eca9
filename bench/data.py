"""Deterministic inputs, their numpy references and the tolerance.

One data policy for the benchmark's ``--check`` and for the test suite
(``tests/conformance.py``, ``tests/soak.py``), which import it from here.

Inputs: ``make(dtype, shape, rank, seed, op)`` is rank ``rank``'s input.
Element i is drawn by a hash of ``(i mod PERIOD, rank, seed)``, so the values
are cheap, differ between ranks and between seeds, and repeat with a prime
period (misplaced blocks and chunks, whose offsets are multiples of powers of
two, never line up with a copy of themselves).

- Floating inputs have random mantissas (every bit of the dtype's mantissa
  drawn), so that sums and products round, differently in every order of
  combination: a reduction that combines the ranks in another order than it
  promises gives other bits.  Their magnitudes are bounded so that results
  stay finite (``RANGES``): in [0.5, 2) with a random sign (complex: both
  parts); for ``prod`` in [0.75, 1.25) (complex parts in [0.5, 0.9)), so
  that products of a few dozen ranks neither overflow nor underflow, even
  in float16.
- Integers are small (-10..10 signed, 0..20 unsigned; for ``prod`` from
  small sets); integer sums and products that wrap do so modulo 2^bits in
  every order, like numpy's: integer results are exact in any order.

References: ``reduced`` is numpy's reduction over the ranks in rank order,
``((x_0 op x_1) op x_2) op ...`` in the dtype, ``avg`` then dividing by the
number of ranks in the dtype: bit for bit what the algorithms that promise
rank order compute (``direct``, ``two_shot``; docs/algorithms.md), but for
complex ``prod`` (numpy's complex multiplication gives other bits in other
memory layouts: docs/testing.md, "Bits").
``stacked`` is the ranks' inputs one above the other.  Since every input has
period PERIOD, so has every reduction: a reference is computed on one period
at most and tiled, which keeps ``--check`` cheap at any size.

Tolerance: a reference from ``reduced`` carries the tolerance that its
results are compared under (``Reference.tol``, from ``tolerance``): any
other order of combination may differ from rank order by rounding, within
the bound that reassociation allows for these inputs (for ``sum``, ``(N-1)``
units of roundoff of the sum of the magnitudes, twice: the reference's and
the result's; for ``prod``, relative; ``max``, ``min`` and integers are
exact).  Every other reference (inputs moved, not combined) must be matched
exactly.  ``expect_bits`` compares bit for bit.

The op table and the dtypes are the library's own (``collectives.ops``); the
suite checks the references against hand-computed values
(``tests/test_data.py``), so a wrong table cannot hide behind itself.
"""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from collectives.dtypes import BFLOAT16
from collectives.ops import DTYPES, UFUNCS, Op, resolve

PERIOD = 1_000_003  # a prime
COMPARE_BLOCK = 1 << 22  # elements compared at a time when counting mismatches

_MULT = 2654435761  # Knuth's multiplicative hash; not a multiple of PERIOD
PROD_VALUES = {"i": [1, -1, 2, 3, -2], "u": [1, 2, 3, 1]}
# the magnitudes of floating inputs (complex: of each part), by (for prod?, kind):
# products of a few dozen stay finite and normal, even in float16
RANGES = {(False, "f"): (0.5, 2.0), (False, "c"): (0.5, 2.0),
          (True, "f"): (0.75, 1.25), (True, "c"): (0.5, 0.9)}
MAX_ABS = 2.0  # the largest part of an input that is summed
SLACK = 1.1  # on the first-order rounding bounds of ``tolerance``

Tol = Tuple[float, float]  # (rtol, atol): |got - want| <= atol + rtol * |want|
EXACT: Tol = (0.0, 0.0)

Shape = Union[int, tuple]


def _kind(dt: np.dtype) -> str:
    """numpy's kind letter, with bfloat16 (an ml_dtypes type, kind 'V') a float."""
    return "f" if dt == BFLOAT16 else dt.kind


def _eps(dt: np.dtype) -> float:
    if dt == BFLOAT16:
        import ml_dtypes
        return float(ml_dtypes.finfo(dt).eps)
    return float(np.finfo(dt).eps)


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


def _mix(k: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: 64 well-mixed bits from each uint64 of ``k``."""
    k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return k ^ (k >> np.uint64(31))


def _floats(bits: np.ndarray, low: float, high: float) -> np.ndarray:
    """float64 values of magnitude in [low, high), with 52 random mantissa
    bits and a random sign drawn from ``bits``."""
    one_two = ((bits >> np.uint64(12)) | np.uint64(0x3FF0 << 48)).view(np.float64)  # [1, 2)
    mag = low + (high - low) * (one_two - 1.0)
    return (mag.view(np.uint64) | (bits << np.uint64(63))).view(np.float64)


def make(dtype, shape: Shape, rank: int, seed: int = 0, op: str = "sum",
         offset: int = 0) -> np.ndarray:
    """Rank ``rank``'s input of ``shape``: its elements ``offset`` .. ``offset + size``."""
    dt, shape = np.dtype(dtype), _shape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    idx = (np.arange(min(count, PERIOD), dtype=np.int64) + offset) % PERIOD
    if _kind(dt) in "fc":
        key = (idx.astype(np.uint64) << np.uint64(32)) ^ np.uint64(
            ((rank + 1) * 40503 + seed * 9176) & 0xFFFFFFFF)
        bits = _mix(key)
        low, high = RANGES[op == "prod", _kind(dt)]
        v = _floats(bits, low, high)
        if dt.kind == "c":
            v = v + 1j * _floats(_mix(bits), low, high)
        return _tile(v.astype(dt), count).reshape(shape)
    h = (idx * _MULT + (rank + 1) * 40503 + seed * 9176) % PERIOD
    if op == "prod":
        table = np.array(PROD_VALUES[dt.kind])
        v = table[h % len(table)]
    elif dt.kind == "u":
        v = h % 21
    else:
        v = h % 21 - 10
    return _tile(v.astype(dt), count).reshape(shape)


def stacked(n: int, dtype, shape: Shape, seed: int = 0, op: str = "sum") -> np.ndarray:
    """Ranks 0..n-1's inputs, shape ``(n, *shape)``: what a gather collects."""
    return np.stack([make(dtype, shape, r, seed, op) for r in range(n)])


class Reference(np.ndarray):
    """A reference result that carries the tolerance it is compared under
    (``tol``: (rtol, atol)); its slices and reshapes keep it."""

    tol: Tol = EXACT

    def __array_finalize__(self, obj) -> None:
        self.tol = getattr(obj, "tol", EXACT)


def tolerance(n: int, dtype, op: str) -> Tol:
    """(rtol, atol) between two results of the reduction by ``op`` of ``n``
    ranks' inputs (``make``) combined in different orders.

    Any order of ``n - 1`` additions is within ``(n-1) u S`` of the exact sum
    (u = eps/2 the unit roundoff, S the sum of the magnitudes, at most ``n *
    MAX_ABS``; complex parts add separately, so sqrt(2) more in modulus): two
    orders within twice that.  ``avg`` divides both in the dtype (one more
    rounding of each).  Products: within ``(n-1) u`` relative each, or
    ``sqrt(5) u`` per complex multiplication.  ``SLACK`` covers the terms
    of second order.  Integers, ``max`` and ``min``: exact."""
    dt = np.dtype(dtype)
    o = resolve(op, dt)
    if _kind(dt) not in "fc" or n <= 1 or o in (Op.MAX, Op.MIN):
        return EXACT
    eps = _eps(dt)
    if o is Op.PROD:
        return SLACK * (n - 1) * eps * (5 ** 0.5 if dt.kind == "c" else 1.0), 0.0
    atol = SLACK * (n - 1) * n * MAX_ABS * eps * (2 ** 0.5 if dt.kind == "c" else 1.0)
    if o is Op.AVG:
        return SLACK * eps, atol / n
    return 0.0, atol


def reduced(n: int, dtype, shape: Shape, op: str = "sum", seed: int = 0,
            offset: int = 0) -> Reference:
    """The reduction by ``op`` of ranks 0..n-1's ``make(..., offset)``, in rank
    order and in the dtype (``avg``: then divided by n), with its tolerance;
    half precision accumulates in float32 and rounds once, as the library's
    reductions of N contributions do (docs/api.md)."""
    dt, shape = np.dtype(dtype), _shape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    m = min(count, PERIOD)
    o = resolve(op, dt)
    uf = UFUNCS[o]
    parts = (make(dt, m, r, seed, op, offset) for r in range(n))
    if dt.itemsize == 2 and dt.kind not in "iu":  # half precision: float32, one rounding
        wide = next(parts).astype(np.float32)
        for p in parts:
            uf(wide, p.astype(np.float32), out=wide)
        acc = wide.astype(dt)
    else:
        acc = next(parts)
        for p in parts:
            uf(acc, p, out=acc)
    if o is Op.AVG:
        np.true_divide(acc, n, out=acc)  # as the library divides: in the dtype
    ref = _tile(acc, count).reshape(shape).view(Reference)
    ref.tol = tolerance(n, dt, op)
    return ref


def poison(want: np.ndarray) -> np.ndarray:
    """An array that differs from ``want`` in every element: NaN for floating
    types, ``want + 1`` (wrapping) for integers.  Outputs are filled with it
    before a checked call, so that an element the call fails to write is wrong."""
    if _kind(want.dtype) in "fc":
        return np.full(want.shape, np.nan, want.dtype)
    return want + want.dtype.type(1)


def host(a) -> np.ndarray:
    """``a`` as a numpy array (a copy from the GPU for a CuPy array)."""
    return a if isinstance(a, np.ndarray) else a.get()


def _close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: ``got`` matches ``want`` under ``want``'s tolerance (floats
    compared in 64 bits)."""
    rt, at = getattr(want, "tol", EXACT)
    if _kind(want.dtype) not in "fc" or (rt, at) == EXACT:
        return np.asarray(got == want)
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    g, w = np.asarray(got, wide), np.asarray(want, wide)
    return np.abs(g - w) <= at + rt * np.abs(w)


def mismatches(got, want: np.ndarray) -> int:
    """Elements of ``got`` (numpy or CuPy) that do not match ``want`` (under
    its tolerance, exactly for a plain array); every element when the sizes
    differ."""
    got, want = host(got).reshape(-1), want.reshape(-1)
    if got.shape != want.shape:
        return max(got.size, want.size)
    bad = 0
    for lo in range(0, got.size, COMPARE_BLOCK):
        ok = _close(got[lo:lo + COMPARE_BLOCK], want[lo:lo + COMPARE_BLOCK])
        bad += int(ok.size - np.count_nonzero(ok))
    return bad


def _same_kind(got, want: np.ndarray, what: str) -> None:
    assert isinstance(got, np.ndarray), f"{what} is {type(got).__name__}, not an ndarray"
    assert got.shape == want.shape, f"{what} shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what} dtype {got.dtype} != {want.dtype}"


def expect(got, want: np.ndarray, what: str = "result") -> None:
    """Assert that numpy array ``got`` has ``want``'s shape and dtype and
    matches it (under its tolerance)."""
    _same_kind(got, want, what)
    bad = mismatches(got, want)
    if bad:
        ok = _close(got.reshape(-1), want.reshape(-1))
        first = np.flatnonzero(~ok)[:5]
        rt, at = getattr(want, "tol", EXACT)
        raise AssertionError(
            f"{what}: {bad} of {want.size} elements differ (dtype {want.dtype}, rtol "
            f"{rt:g}, atol {at:g}); first at flat index {first.tolist()}: got "
            f"{got.reshape(-1)[first].tolist()}, want "
            f"{np.asarray(want).reshape(-1)[first].tolist()}")


def expect_bits(got, want: np.ndarray, what: str = "result") -> None:
    """Assert that numpy array ``got`` is ``want`` bit for bit (no tolerance)."""
    _same_kind(got, want, what)
    g, w = got.reshape(-1).view(np.uint8), np.asarray(want).reshape(-1).view(np.uint8)
    if not np.array_equal(g, w):
        isz = want.dtype.itemsize
        first = np.flatnonzero(np.any((g != w).reshape(-1, isz), axis=1))
        raise AssertionError(
            f"{what}: {first.size} of {want.size} elements are not the reference's bits "
            f"(dtype {want.dtype}); first at flat index {first[:5].tolist()}: got "
            f"{got.reshape(-1)[first[:5]].tolist()}, want "
            f"{np.asarray(want).reshape(-1)[first[:5]].tolist()}")


__all__ = ["DTYPES", "PERIOD", "Reference", "ops_for", "make", "stacked", "reduced",
           "tolerance", "poison", "host", "mismatches", "expect", "expect_bits"]
