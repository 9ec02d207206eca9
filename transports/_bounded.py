"""Sends that give up instead of spinning: MPICH's bound on its retries.

MPICH's ofi netmod retries a send that libfabric refuses with FI_EAGAIN
(its queue to that peer is full) in a loop that drives progress, without
end by default.  A peer on another host that has died leaves its queue
full for good (libfabric's tcp provider: a send of 1 MiB to the dead rank
stays queued once progress has seen the connection go), so the next
``MPI_Isend`` to it spins forever, and a survivor hangs inside MPI where
no timeout of this library can reach it.

The control variable ``MPIR_CVAR_CH4_OFI_MAX_EAGAIN_RETRY`` bounds that
loop: past so many retries the call fails with ``MPIX_ERR_EAGAIN`` and
posts nothing.  It is one value for the whole process, so this module sets
it (through the MPI tool interface, ``MPI_T_cvar_write``) around this
library's own sends to ranks on other machines alone (a rank of this
machine, emulated host or not, MPI reaches through shared memory) and puts
the previous value back at once: the user's own MPI calls keep MPI's
behaviour.  Where the user set the variable, their bound stands and
nothing is written; where the MPI has no such variable (Open MPI, an MPICH
without ofi) sends are posted as before.

``post(MPI_Isend, ...)`` posts one send so, and returns None for a send
that MPI refused, which the caller posts later (``mpi.py``).
"""
from __future__ import annotations

import ctypes
import os
from functools import partial

from mpi4py import MPI

CVAR = "MPIR_CVAR_CH4_OFI_MAX_EAGAIN_RETRY"
# retries of a refused send before it fails: about 0.2 s of MPI's progress
# here (2.2 s for 100,000 with a dead peer on another host, cluster/cluster)
RETRIES = 10_000
_RTLD_NOLOAD = 4


class _Cvar:
    """An int control variable of the MPI library this process has loaded."""

    def __init__(self, lib, name: str):
        self.lib = lib
        idx, count = ctypes.c_int(), ctypes.c_int()
        if lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(idx)):
            raise LookupError(name)
        self.handle = ctypes.c_void_p()
        if lib.MPI_T_cvar_handle_alloc(idx, None, ctypes.byref(self.handle),
                                       ctypes.byref(count)) or count.value != 1:
            raise LookupError(name)

    def read(self) -> int:
        v = ctypes.c_int()
        if self.lib.MPI_T_cvar_read(self.handle, ctypes.byref(v)):
            raise LookupError("read")
        return v.value

    def write(self, value: int) -> bool:
        return not self.lib.MPI_T_cvar_write(self.handle, ctypes.byref(ctypes.c_int(value)))


def _libraries() -> list[str]:
    """The MPI libraries mapped into this process (libmpi*.so*)."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                base = os.path.basename(path)
                if base.startswith("libmpi") and ".so" in base and path not in out:
                    out.append(path)
    except OSError:
        pass
    return out


def _find() -> tuple[_Cvar, int] | None:
    """The variable and its value, where it can be bounded here."""
    if os.environ.get("COLLECTIVES_MPI_BOUNDED", "1") == "0":
        return None
    for path in _libraries():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL | _RTLD_NOLOAD)
            provided = ctypes.c_int()
            # the level MPI runs at: Open MPI's MPI_T_init_thread sets the level
            # that MPI_Query_thread reports from then on
            if lib.MPI_T_init_thread(MPI.Query_thread(), ctypes.byref(provided)):
                continue
            try:
                cvar = _Cvar(lib, CVAR)
                old = cvar.read()
            except LookupError:
                lib.MPI_T_finalize()
                continue
        except (OSError, AttributeError):
            continue
        if old > 0 or cvar.write(old):  # set by the user (then theirs stands), or writable
            return cvar, old
    return None


def _none() -> int:
    return 0


# once looked up: [None], nothing bounded here; else [(set the bound, put
# the old value back, the two ints those calls point to)], each write's
# arguments made once (no write where the user's own bound stands)
_state: list = []


def _lookup():
    if not _state:
        found = _find()
        if found is not None:
            cvar, old = found
            bound, back = ctypes.c_int(RETRIES), ctypes.c_int(old)
            write = cvar.lib.MPI_T_cvar_write
            found = ((_none, _none) if old > 0 else
                     (partial(write, cvar.handle, ctypes.byref(bound)),
                      partial(write, cvar.handle, ctypes.byref(back)))) + (cvar, bound, back)
        _state.append(found)
    return _state[0]


def post(start, *args):
    """``start(*args)`` (an ``MPI_Isend``) with MPICH's retries of a refused
    send bounded (``RETRIES``): its request, or None where MPI refused it
    (nothing was posted); as is where nothing is bounded here."""
    found = _state[0] if _state else _lookup()
    if found is None:
        return start(*args)
    found[0]()
    try:
        return start(*args)
    except MPI.Exception as e:
        if refused(e):
            return None
        raise
    finally:
        found[1]()


def active() -> bool:
    """Whether this process's sends are bounded."""
    return _lookup() is not None


def refused(e: Exception) -> bool:
    """Whether MPI error ``e`` is a send that was refused and not posted
    (MPIX_ERR_EAGAIN: "Operation could not be issued (EAGAIN)")."""
    try:
        return "(EAGAIN)" in MPI.Get_error_string(e.Get_error_class())
    except (AttributeError, MPI.Exception):
        return False
