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

from transports.copy import address as _host_address


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
        return _host_address(a)
    return a.data.ptr


_DL_CPU, _DL_CUDA = 1, 2  # DLPack's device types (dlpack.h, DLDeviceType)


def adopt(a):
    """An array from the rest of the ecosystem as a numpy (or CuPy) array over
    the same memory, without a copy: an object with ``__dlpack__`` (torch
    and JAX CPU tensors; CUDA ones as CuPy arrays where CuPy is imported),
    ``__array_interface__``, ``__cuda_array_interface__`` (CuPy imported) or
    the buffer protocol (``memoryview``, ``array.array``, ``bytearray``: the
    buffer's format gives the dtype).  numpy and CuPy arrays, None, and
    anything else come back as they are (the argument checks refuse what
    is not an array)."""
    if a is None or isinstance(a, (np.ndarray, np.generic)) or is_device(a):
        return a  # a numpy scalar is not an array (refused as one)
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        kind = a.__dlpack_device__()[0]
        if kind == _DL_CPU:
            return np.from_dlpack(a)
        cp = sys.modules.get("cupy")
        if kind == _DL_CUDA and cp is not None:
            return cp.from_dlpack(a)
        return a
    if hasattr(a, "__array_interface__"):
        return np.asarray(a)
    if hasattr(a, "__cuda_array_interface__"):
        cp = sys.modules.get("cupy")
        return a if cp is None else cp.asarray(a)
    try:
        view = memoryview(a)
    except TypeError:
        return a
    return np.asarray(view)
