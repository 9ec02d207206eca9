"""Reduction operators, and which of them apply to which dtype (the dtypes
themselves are collectives/dtypes.py; ``DTYPES`` is kept here for the
modules that import it from ops, and imports ml_dtypes on first use as
there)."""
from __future__ import annotations

import enum
from typing import Any, Callable, Sequence

import numpy as np

from . import kernels
from . import dtypes as _dtypes
from .dtypes import is_half, is_inexact

__all__ = ["Op", "SUM", "PROD", "MAX", "MIN", "AVG", "UFUNCS", "REDUCERS", "Reducer", "DTYPES",
           "divide", "resolve", "in_rank_order", "quietly"]


class Op(str, enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AVG = "avg"

    def __str__(self) -> str:
        return self.value


SUM, PROD, MAX, MIN, AVG = Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.AVG

# avg reduces with a sum and divides by the number of ranks at the end.
UFUNCS = {Op.SUM: np.add, Op.PROD: np.multiply, Op.MAX: np.maximum,
          Op.MIN: np.minimum, Op.AVG: np.add}

# Below this many bytes of output a reduction of several inputs stays with
# numpy's pairwise ufuncs: the compiled kernel's call costs about 1 us more,
# and in the caches re-reading the output is cheap.
KERNEL_MIN_BYTES = 32 * 1024


class Reducer:
    """A reduction operator as the algorithms and transports call it:
    ``op(a, b, out)`` like the numpy ufunc it stands for (``__name__`` too,
    which the cuda transport maps to CuPy's), with half precision through
    the compiled kernel (collectives/kernels.py: float32 arithmetic, one
    rounding; numpy's float16 loop runs at about 0.6 GB/s).  Same bits as the
    ufunc: a binary half-precision operation rounds once either way."""

    def __init__(self, name: str, ufunc):
        self.name, self.ufunc, self.__name__ = name, ufunc, ufunc.__name__

    def __call__(self, a, b, out=None):
        if out is None:
            return self.ufunc(a, b)
        if type(out) is np.ndarray and is_half(out.dtype) and out.size:
            return kernels.reduce_into(out, (a, b), self.name)
        return self.ufunc(a, b, out=out)

    def __repr__(self) -> str:
        return f"<Reducer {self.name}>"


REDUCERS = {o: Reducer("sum" if o is Op.AVG else o.value, uf) for o, uf in UFUNCS.items()}


def divide(out, n: int) -> None:
    """avg's last step: ``out /= n`` in place.  Half precision divides in
    float32 in one compiled pass and rounds once (numpy's float16 and
    ml_dtypes' bfloat16 loops round once too, but took 480 and 14 times as
    long on 4M elements here)."""
    if not out.size:
        return
    if type(out) is np.ndarray and is_half(out.dtype):
        kernels.reduce_into(out, (out,), "sum", divisor=n)
    else:
        np.true_divide(out, n, out=out)


_BY_NAME = {o.value: o for o in Op}

# numpy 2 keeps its floating-point error state in a context variable: setting
# it directly costs 0.14 us where `with np.errstate(all="ignore")` costs 0.9 us
# (a fifth of a small all-reduce); np.errstate where that variable is not there
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    with np.errstate(all="ignore"):
        _IGNORE_ALL = _ERRSTATE.get()
except (ImportError, AttributeError):
    _ERRSTATE = None


_RESOLVED: dict = {}  # (op, dtype) -> Op, for the valid pairs seen so far


def resolve(op, dtype: np.dtype) -> Op:
    """The Op for ``op`` on ``dtype``, or a ValueError/TypeError saying why not."""
    try:
        return _RESOLVED[op, dtype]
    except (KeyError, TypeError):  # not seen yet, or op is not even hashable
        pass
    o = _resolve(op, dtype)
    _RESOLVED[op, dtype] = o
    return o


def _resolve(op, dtype: np.dtype) -> Op:
    o = _BY_NAME.get(op) if isinstance(op, str) else None
    if o is None:
        raise ValueError(f"op must be one of {[o.value for o in Op]}, got {op!r}")
    inexact = is_inexact(dtype)
    if not inexact and o is not Op.AVG:
        return o
    if o in (Op.MAX, Op.MIN) and dtype.kind == "c":
        raise TypeError(f"op={o.value!r} is not defined for complex dtype {dtype}")
    if o is Op.AVG and not inexact:
        raise TypeError(f"op='avg' needs a floating or complex dtype, got {dtype}")
    return o


def in_rank_order(parts: Sequence[np.ndarray], op, out: np.ndarray) -> None:
    """``out = ((parts[0] op parts[1]) op parts[2]) op ...``: the N ranks'
    contributions (N >= 2) reduced in rank order, so that every rank that
    reduces the same parts gets the same bits, those of numpy's reduction over
    the ranks.  ``out`` must not overlap any part but the first two.
    Numpy arrays of ``KERNEL_MIN_BYTES`` and more go through the compiled
    kernel in one pass: each part read once, ``out`` written once.  Half
    precision always goes through ``kernels.reduce_into``, compiled or not:
    float32 arithmetic and one rounding, the same bits either way."""
    if isinstance(op, Reducer) and type(out) is np.ndarray and (is_half(out.dtype) or (
            kernels.compiled() and len(parts) > 2 and out.nbytes >= KERNEL_MIN_BYTES)):
        kernels.reduce_into(out, parts, op.name)
        return
    op(parts[0], parts[1], out)
    for p in parts[2:]:
        op(out, p, out)


if _ERRSTATE is not None:
    def quietly(fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` with numpy's floating-point warnings off: in a floating
        reduction an overflow to inf is a result (as in MPI and NCCL), not a
        warning that numpy should print on some rank's worker thread."""
        token = _ERRSTATE.set(_IGNORE_ALL)
        try:
            return fn(arg)
        finally:
            _ERRSTATE.reset(token)
else:
    def quietly(fn: Callable[[Any], Any], arg: Any) -> Any:
        """The same, where numpy has no such context variable."""
        with np.errstate(all="ignore"):
            return fn(arg)


def __getattr__(name: str):
    if name == "DTYPES":  # imports ml_dtypes (collectives/dtypes.py)
        return _dtypes.DTYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
