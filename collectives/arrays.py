"""numpy or CuPy: the few places where the kind of array matters.

The algorithms call numpy's functions (``np.copyto``, ``np.empty_like``,
ufuncs with ``out=``), which a CuPy array takes over through numpy's
dispatch protocols (``__array_function__``, ``__array_ufunc__``), so the
same code runs on host and on device arrays, and a numpy call pays nothing
for it.  What is left is here: telling a CuPy array apart without importing
CuPy, allocating an array of the same kind, and an array's address.
"""
from __future__ import annotations

import sys

import numpy as np


def is_device(a) -> bool:
    """Whether ``a`` is a CuPy array (CuPy is looked at only if already imported)."""
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(a, cp.ndarray)


def empty(shape, like):
    """A new C-contiguous array of ``shape`` with ``like``'s dtype, on ``like``'s side."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, like.dtype)
    return np.empty_like(like, shape=shape)


def address(a) -> int:
    """The address of ``a``'s first element (host or device)."""
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return a.data.ptr
