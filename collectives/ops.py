"""Reduction operators and the dtypes every call accepts."""
from __future__ import annotations

import enum

import numpy as np


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

DTYPES = tuple(np.dtype(t) for t in (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "complex64", "complex128"))


_BY_NAME = {o.value: o for o in Op}


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
    if dtype.kind not in "fc" and o is not Op.AVG:
        return o
    if o in (Op.MAX, Op.MIN) and dtype.kind == "c":
        raise TypeError(f"op={o.value!r} is not defined for complex dtype {dtype}")
    if o is Op.AVG and dtype.kind not in "fc":
        raise TypeError(f"op='avg' needs a floating or complex dtype, got {dtype}")
    return o
