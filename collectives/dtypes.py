"""The dtypes every call accepts, and the questions the library asks of them.

bfloat16 is ``ml_dtypes.bfloat16``, the dtype JAX and friends use.  numpy
sees it as a user-defined type of kind ``'V'``, not ``'f'``, so that
``dtype.kind in "fc"`` says nothing about it: ask ``is_inexact`` instead.

ml_dtypes is imported only when it is needed: its import registers a dozen
types with numpy and took 0.55-0.65 s here, more than the rest of
``import collectives``.  Until some module has imported it, no array can be
of its bfloat16, so the checks below need not know that dtype; once it is
imported (by the caller, to make such an array), they find it in
``sys.modules``.  ``bfloat16``, ``BFLOAT16``, ``DTYPES`` and ``HALF`` are
attributes that import it on first use (module ``__getattr__``).
"""
from __future__ import annotations

import sys

import numpy as np

# debug signatures send a dtype as its index in DTYPES: new dtypes go at the
# end (bfloat16, index 13, is DTYPES' last)
_NAMES = ("float16", "float32", "float64",
          "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64",
          "complex64", "complex128")
NUMPY_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in _NAMES)
_NUMPY_SET = frozenset(NUMPY_DTYPES)
_INDEX = {d: i for i, d in enumerate(NUMPY_DTYPES)}
BFLOAT16_INDEX = len(NUMPY_DTYPES)
# every accepted dtype's name, for messages (no import needed)
NAMES = ", ".join((*_NAMES, "bfloat16"))

# CuPy's ufuncs have no bfloat16: CuPy arrays of it are refused (validate.py)
DEVICE_DTYPES = NUMPY_DTYPES
_FLOAT16 = np.dtype(np.float16)

_bf16: np.dtype | None = None


def bfloat16_dtype() -> np.dtype | None:
    """ml_dtypes' bfloat16 dtype where ml_dtypes is imported; else None (no
    array can be of it yet)."""
    global _bf16
    if _bf16 is None:
        m = sys.modules.get("ml_dtypes")
        t = getattr(m, "bfloat16", None) if m is not None else None
        if t is not None:
            _bf16 = np.dtype(t)
    return _bf16


def load_bfloat16() -> np.dtype:
    """bfloat16's dtype, importing ml_dtypes if nothing has yet."""
    import ml_dtypes  # noqa: F401  (the import is the point)
    return bfloat16_dtype()


def is_bfloat16(dtype: np.dtype) -> bool:
    if dtype.kind != "V":
        return False
    b = bfloat16_dtype()
    return b is not None and dtype == b


def supported(dtype: np.dtype) -> bool:
    """One of DTYPES."""
    return dtype in _NUMPY_SET or is_bfloat16(dtype)


def is_half(dtype: np.dtype) -> bool:
    """float16 or bfloat16: reduced in float32 and rounded once (kernels.py)."""
    return dtype == _FLOAT16 or is_bfloat16(dtype)


def is_inexact(dtype: np.dtype) -> bool:
    """Floating (bfloat16 included) or complex: ``avg`` applies, and a
    reduction's overflow to inf is a result, not a warning."""
    return dtype.kind in "fc" or is_bfloat16(dtype)


def index(dtype: np.dtype) -> int | None:
    """``dtype``'s index in DTYPES (None: not one of them), without importing
    ml_dtypes."""
    i = _INDEX.get(dtype)
    if i is None and is_bfloat16(dtype):
        return BFLOAT16_INDEX
    return i


def at(i: int) -> np.dtype:
    """DTYPES[i] (bfloat16's index imports ml_dtypes)."""
    return load_bfloat16() if i == BFLOAT16_INDEX else NUMPY_DTYPES[i]


def __getattr__(name: str):
    if name in ("bfloat16", "BFLOAT16", "DTYPES", "HALF"):
        bf = load_bfloat16()
        return {"bfloat16": bf.type, "BFLOAT16": bf, "DTYPES": NUMPY_DTYPES + (bf,),
                "HALF": frozenset((_FLOAT16, bf))}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
