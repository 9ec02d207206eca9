"""Linux futex wait/wake on a 32-bit word in shared memory, through ctypes.

ctypes releases the GIL for the duration of the call, so a rank that sleeps
here lets its own other threads run, and gives its core to other ranks.
The futexes are shared (no FUTEX_PRIVATE_FLAG): waiter and waker live in
different processes that map the same file.
"""
from __future__ import annotations

import ctypes
import errno
import platform

_SYS_FUTEX = {"x86_64": 202}.get(platform.machine())  # the shm transport runs on x86-64 only
_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_INT_MAX = 0x7FFFFFFF

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


available = _SYS_FUTEX is not None


def wait(addr: int, expected: int, timeout_s: float) -> None:
    """Sleep while the u32 at ``addr`` equals ``expected``, at most ``timeout_s``.

    Returns on a wake, a change of value, a signal or the timeout: callers
    re-check their condition in a loop, so every return is safe.
    """
    sec = int(timeout_s)
    ts = _Timespec(sec, int((timeout_s - sec) * 1e9))
    r = _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT,
                 ctypes.c_uint32(expected & 0xFFFFFFFF), ctypes.byref(ts), None, 0)
    if r == -1:
        e = ctypes.get_errno()
        if e not in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR):
            raise OSError(e, "futex wait failed")


def wake(addr: int) -> None:
    """Wake every thread sleeping on the u32 at ``addr``."""
    _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, _INT_MAX, None, None, 0)
