"""The library's one compiled copy: streaming (non-temporal) stores.

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
"""
from __future__ import annotations

import numpy as np

try:
    from . import _native
except ImportError:  # not built: plain copies
    _native = None

available = _native is not None

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
    _native.stream_copy(dst.ctypes.data, src.ctypes.data, dst.nbytes)


__all__ = ["available", "stream_copy"]
