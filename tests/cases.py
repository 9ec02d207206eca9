"""Deterministic inputs and numpy references shared by the conformance runner."""
from __future__ import annotations

import numpy as np

from collectives.ops import DTYPES

FLOAT_TOL = {np.dtype("float16"): 2e-3, np.dtype("float32"): 1e-6, np.dtype("float64"): 1e-12,
             np.dtype("complex64"): 1e-6, np.dtype("complex128"): 1e-12}

PROD_VALUES = {"i": [1, -1, 2, 3, -2], "u": [1, 2, 3, 1], "f": [0.5, 1.0, 2.0, -1.0],
               "c": [1, -1, 1j, -1j, 2]}


def ops_for(dt: np.dtype) -> list[str]:
    ops = ["sum", "prod"]
    if dt.kind != "c":
        ops += ["max", "min"]
    if dt.kind in "fc":
        ops.append("avg")
    return ops


def make(dtype, shape, rank: int, seed: int, op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s input: cheap, deterministic, and exact under any summation order.

    Floats are quarter-integers in [-5, 5] (sums of a few of them are exact
    even in float16); products draw from values whose products are exact.
    """
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    h = (np.arange(n, dtype=np.int64) * 2654435761 + (rank + 1) * 40503 + seed * 9176) % 1000003
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
    return v.astype(dt).reshape(shape)


def reduce_ref(stack: np.ndarray, op: str, n: int) -> np.ndarray:
    """numpy's reduction over axis 0 (the ranks), in rank order, in the dtype."""
    dt = stack.dtype
    if op == "sum":
        return np.add.reduce(stack, axis=0, dtype=dt)
    if op == "prod":
        return np.multiply.reduce(stack, axis=0, dtype=dt)
    if op == "max":
        return np.maximum.reduce(stack, axis=0)
    if op == "min":
        return np.minimum.reduce(stack, axis=0)
    wide = np.complex128 if dt.kind == "c" else np.float64
    return (np.add.reduce(stack.astype(wide), axis=0) / n).astype(dt)


def expect(got, want: np.ndarray, what: str = "result") -> None:
    assert isinstance(got, np.ndarray), f"{what} is {type(got).__name__}, not an ndarray"
    assert got.shape == want.shape, f"{what} shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what} dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "fc":
        tol = FLOAT_TOL[want.dtype]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


__all__ = ["DTYPES", "ops_for", "make", "reduce_ref", "expect"]
