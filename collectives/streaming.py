"""Copies into outputs too large for the caches, with streaming stores.

A plain copy into memory that is not cached reads every destination line in
before it overwrites it; a streaming (non-temporal) store writes the line
without reading it.  Measured on the 2-core development VM (docs/
performance.md): 64 MiB copied at 10.5 GB/s with ``np.copyto`` and 20 GB/s
streamed, while 1 MiB, which stays in the caches, copies at 40 GB/s plainly
and only 24 GB/s streamed.  So the staged algorithms stream the copies into
``out`` only when the outputs of all the ranks on the host together reach
``COLLECTIVES_STREAM_BYTES`` (32 MiB by default, the L3 here; 0 never
streams).  The
streaming copy is the library's one compiled copy, ``transports.copy``
(the C extension ``transports._native``); without it (no compiler at
install time) every copy is ``np.copyto``.
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

from transports.copy import available, stream_copy


def _threshold() -> int:
    env = os.environ.get("COLLECTIVES_STREAM_BYTES") or str(32 << 20)
    try:
        v = int(env)
    except ValueError:
        raise ValueError(f"COLLECTIVES_STREAM_BYTES must be a number of bytes, got {env!r}") from None
    return v if v > 0 else 0


STREAM_BYTES = _threshold()


def copier(out, ranks: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """How to copy pieces into ``out`` when ``ranks`` ranks each write an output
    of its size: streamed where that adds up to ``STREAM_BYTES``, else
    ``np.copyto``."""
    if (not available or not STREAM_BYTES or not isinstance(out, np.ndarray)
            or out.nbytes * ranks < STREAM_BYTES):
        return np.copyto
    return stream_copy


__all__ = ["STREAM_BYTES", "available", "copier", "stream_copy"]
