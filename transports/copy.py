"""The library's compiled helpers: the streaming copy, and an array's address.

A plain copy into memory that is not cached reads every destination line
in before it overwrites it; a streaming store writes the line without
reading it, which halves the memory traffic of a copy into an output
larger than the caches, and costs where the output would have stayed in
them (docs/performance.md).  Whoever copies decides when to stream: the
shm transport's roots (transports/shm/copy.py) and the collectives'
large outputs (collectives/streaming.py) both call ``stream_copy`` from
here.  The routine is the C extension ``transports._native``; without it
(no compiler at install time) ``available`` is false and ``stream_copy``
is ``np.copyto``.

``address(a)`` is where a numpy array's first element lies: one compiled
call (the buffer protocol) where ``a.__array_interface__`` or
``a.ctypes.data`` build Python objects for 1-2 us, which every one-copy
call would pay several times over.
"""
from __future__ import annotations

import numpy as np

try:
    from . import _native
except ImportError:  # not built: plain copies
    _native = None

available = _native is not None



def _interface_address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


address = _native.address if _native is not None else _interface_address

MIN_BYTES = 4096  # smaller copies go to numpy: the call would cost more than it saves


def stream_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src)`` with streaming stores, for two C-contiguous
    arrays of one dtype and size that do not overlap (anything else, small
    copies, and every copy where the extension is not built, go to numpy)."""
    if (_native is None or dst.nbytes < MIN_BYTES or dst.dtype != src.dtype
            or dst.shape != src.shape or not dst.flags.c_contiguous
            or not src.flags.c_contiguous or not dst.flags.writeable
            or np.may_share_memory(dst, src)):
        np.copyto(dst, src)
        return
    _native.stream_copy(address(dst), address(src), dst.nbytes)


__all__ = ["available", "stream_copy"]
