"""The dtypes every call accepts, and the questions the library asks of them.

bfloat16 is ``ml_dtypes.bfloat16``, the dtype JAX and friends use.  numpy
sees it as a user-defined type of kind ``'V'``, not ``'f'``, so that
``dtype.kind in "fc"`` says nothing about it: ask ``is_inexact`` instead.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = ml_dtypes.bfloat16  # the scalar type, as np.float16 is (also cc.bfloat16)
BFLOAT16 = np.dtype(bfloat16)

# debug signatures send a dtype as its index here: new dtypes go at the end
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "complex64", "complex128")) + (BFLOAT16,)

# the half-precision types: reduced in float32 and rounded once (kernels.py)
HALF = frozenset((np.dtype(np.float16), BFLOAT16))

# CuPy's ufuncs have no bfloat16: CuPy arrays of it are refused (validate.py)
DEVICE_DTYPES = tuple(d for d in DTYPES if d != BFLOAT16)


def is_inexact(dtype: np.dtype) -> bool:
    """Floating (bfloat16 included) or complex: ``avg`` applies, and a
    reduction's overflow to inf is a result, not a warning."""
    return dtype.kind in "fc" or dtype == BFLOAT16
