"""The compiled send-receive of the mpi transport (``MpiEndpoint.sendrecv``).

A round of recursive doubling, Bruck or recursive halving is one send and
one receive with a partner.  Written in Python on mpi4py, the two posts,
the request objects and the polls cost more than MPI's own message at a
few bytes (docs/hosts.md, "Small messages"); ``transports._native.mpi_swap``
posts and polls both in one C call, through the MPI library that mpi4py
has loaded (its calls found here by address, so that the extension is
built against no mpi.h and serves MPICH and Open MPI alike).  A peer that is
late past the polls hands its requests back to the transport's own wait,
with its deadline, liveness and notices; a send that MPI refuses under the
bound (``_bounded``) is posted later, as ``isend`` does.

Off where the extension is not built, where no MPI library is found among
the process's mappings, or with ``COLLECTIVES_MPI_NATIVE=0``.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np
from mpi4py import MPI

from . import _bounded

try:
    from . import _native
except ImportError:  # not built: Python's posts and waits
    _native = None

# mpi_swap's states (transports/_native.c) for a call that did not finish
LATE, REFUSED, FAILED = 1, 2, 3
_LIMIT = 1 << 31  # MPI's int count of bytes

_state: list = []  # once bound: [mpi_swap, mpi_steps, lane_new] or [None, None, None]


def _address(lib, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0


def _bind():
    """Bind ``mpi_swap`` and ``mpi_steps`` to the MPI library mapped into
    this process."""
    if (_native is None or not hasattr(_native, "mpi_swap")
            or os.environ.get("COLLECTIVES_MPI_NATIVE", "1").strip() == "0"):
        return None, None, None
    write = cvar = bound = old = 0
    found = _bounded._lookup()
    if found is not None and found[0] is not _bounded._none:  # the bound is ours to write
        c = found[2]
        write, cvar = _address(c.lib, "MPI_T_cvar_write"), c.handle.value or 0
        bound, old = found[3].value, found[4].value
    world = MPI.COMM_WORLD
    for path in _bounded._libraries():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL | _bounded._RTLD_NOLOAD)
            calls = [_address(lib, n) for n in ("MPI_Isend", "MPI_Irecv", "MPI_Test",
                                                "MPI_Get_count")]
            # the library mpi4py calls: it knows mpi4py's COMM_WORLD handle
            size = ctypes.c_int(-1)
            if (lib.MPI_Comm_size(ctypes.c_void_p(MPI._handleof(world)), ctypes.byref(size))
                    or size.value != world.Get_size()):
                continue
        except (OSError, AttributeError):
            continue
        _native.mpi_bind(*calls, MPI._handleof(MPI.BYTE) & (2 ** 64 - 1),
                         MPI._sizeof(MPI.Request), write, cvar, bound, old)
        return _native.mpi_swap, getattr(_native, "mpi_steps", None), \
            getattr(_native, "lane_new", None)
    return None, None, None


def _bound():
    if not _state:
        _state.extend(_bind())
    return _state


def swap(sbuf, rbuf):
    """``mpi_swap`` where it takes these two buffers (contiguous numpy
    arrays, the receiving one writable, each under 2 GiB); else None."""
    f = (_state or _bound())[0]
    if (f is None or type(sbuf) is not np.ndarray or type(rbuf) is not np.ndarray
            or not sbuf.flags.c_contiguous or not rbuf.flags.c_contiguous
            or not rbuf.flags.writeable or sbuf.nbytes >= _LIMIT or rbuf.nbytes >= _LIMIT):
        return None
    return f
