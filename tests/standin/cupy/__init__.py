"""A host stand-in for the part of CuPy that the cuda transport and its tests use.

Put ``tests/standin`` first on ``PYTHONPATH`` to run the cuda transport on a
machine without a GPU.  "Device" memory is host memory: ``runtime.malloc``
maps a file in /dev/shm, so that the IPC calls (``ipcGetMemHandle`` gives its
name, ``ipcOpenMemHandle`` maps it in another process) work between
processes; copies are immediate (``memmove``), so events and streams only
check that they are used as CUDA requires (an event waited on must exist in
this process, created or opened, and not yet destroyed).  Arrays wrap numpy
arrays and are not numpy arrays, so the library takes the device path for
them.  This checks the transport's protocol (slots, offsets, handles,
chunking, counters, errors), not GPU ordering: that needs a GPU.

A process's "device memory" files are named after its pid.  A process
killed before it freed them (a job stopped at its time limit) leaves them
behind, and pids are reused: so the stand-in removes, when imported, the
files named after its own pid, which can only be a dead process's.

Environment (the rank is the launcher's: MPICH's ``PMI_RANK``, Open MPI's
``OMPI_COMM_WORLD_RANK``):

* ``STANDIN_CUPY_FAIL=CALL:RANK[,CALL:RANK...]``: ``runtime.CALL`` (or
  ``Stream``) raises ``CUDARuntimeError`` on rank RANK, to test set-up
  failures;
* ``STANDIN_CUPY_DEVICES=K``: K devices, rank r's current one r mod K (all
  "device" memory is host memory either way);
* ``STANDIN_CUPY_PEER_ACCESS=0``: no device can access another as a peer.
"""
from __future__ import annotations

import ctypes
import glob
import itertools
import mmap
import os
import types

import numpy as np

uint8 = np.uint8
_PREFIX = "standin-cuda-"
_RANK = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK", "0")
_FAIL = {c for c, _, r in (f.partition(":") for f in
                           os.environ.get("STANDIN_CUPY_FAIL", "").split(",")) if r == _RANK}
_DEVICES = int(os.environ.get("STANDIN_CUPY_DEVICES") or 1)


def _remove_stale() -> None:
    for path in glob.glob(f"/dev/shm/{_PREFIX}{os.getpid()}-*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


_remove_stale()


class CUDARuntimeError(RuntimeError):
    pass


def _may_fail(call: str) -> None:
    if call in _FAIL:
        raise CUDARuntimeError(f"{call} failed on rank {_RANK} (stand-in: STANDIN_CUPY_FAIL)")


def _unwrap(v):
    if isinstance(v, ndarray):
        return v._a
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    return v


def _wrap(v):
    return ndarray._of(v) if isinstance(v, np.ndarray) else v


class _Flags:
    def __init__(self, a):
        self.c_contiguous = a.flags.c_contiguous


class _Ptr:
    def __init__(self, a):
        self.ptr = a.__array_interface__["data"][0] if a.size else 0


class ndarray:
    """A "device" array: a numpy array that numpy code reaches only through
    the dispatch protocols, as it reaches a CuPy array."""

    def __init__(self, shape, dtype=float, memptr=None):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        if memptr is None:
            a = np.empty(shape, dtype)
        else:
            raw = (ctypes.c_uint8 * n).from_address(memptr.ptr) if n else bytearray()
            a = np.frombuffer(raw, np.uint8).view(dtype).reshape(shape)
        self._a, self.base = a, None

    @classmethod
    def _of(cls, a, base=None):
        self = cls.__new__(cls)
        self._a, self.base = a, base
        return self

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)
    itemsize = property(lambda self: self._a.itemsize)
    flags = property(lambda self: _Flags(self._a))
    data = property(lambda self: _Ptr(self._a))
    device = property(lambda self: Device(runtime.getDevice()))

    def _view(self, a):
        return ndarray._of(a, self.base if self.base is not None else self)

    def __getitem__(self, i):
        return self._view(self._a[_unwrap(i)])

    def __setitem__(self, i, v):
        self._a[_unwrap(i)] = _unwrap(v)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def reshape(self, *shape):
        return self._view(self._a.reshape(*shape))

    def view(self, dtype):
        return self._view(self._a.view(dtype))

    def copy(self):
        return ndarray._of(self._a.copy())

    def fill(self, v):
        self._a.fill(v)

    def get(self):
        return self._a.copy()

    def set(self, arr):  # host to device, as cupy.ndarray.set
        self._a[...] = np.asarray(arr).reshape(self._a.shape)

    def __array_function__(self, func, types, args, kwargs):
        return _wrap(func(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        if out is not None:
            getattr(ufunc, method)(*_unwrap(inputs), out=_unwrap(out), **kw)
            return out[0] if len(out) == 1 else out
        return _wrap(getattr(ufunc, method)(*_unwrap(inputs), **kw))

    def __mul__(self, o):
        return np.multiply(self, o)

    def __add__(self, o):
        return np.add(self, o)

    def __eq__(self, o):
        return np.equal(self, o)

    __rmul__, __radd__ = __mul__, __add__
    __hash__ = None

    def __bool__(self):
        return bool(self._a)

    def __array__(self, *a, **k):
        raise TypeError("implicit conversion to a numpy array is not allowed (as in CuPy)")

    def __repr__(self):
        return f"standin.ndarray({self._a!r})"


def asarray(a, dtype=None):
    return a if isinstance(a, ndarray) and dtype is None else ndarray._of(np.array(a, dtype))


def asnumpy(a):
    return a._a.copy() if isinstance(a, ndarray) else np.asarray(a)


def _maker(f):
    return lambda *a, **k: _wrap(f(*_unwrap(a), **k))


empty, zeros, ones, full = (_maker(f) for f in (np.empty, np.zeros, np.ones, np.full))
empty_like, zeros_like, full_like = (_maker(f) for f in (np.empty_like, np.zeros_like,
                                                          np.full_like))
array_equal, arange, all = (_maker(f) for f in (np.array_equal, np.arange, np.all))
ascontiguousarray = _maker(np.ascontiguousarray)


def _ufunc(f):
    def call(*inputs, out=None):
        f(*_unwrap(inputs), out=_unwrap(out))
        return out
    call.__name__ = f.__name__
    return call


add, multiply, maximum, minimum = (_ufunc(f) for f in (np.add, np.multiply, np.maximum,
                                                        np.minimum))


# -- cuda ------------------------------------------------------------------------

class Device:
    """As in CuPy, entering makes the device current and keeps, per object,
    the device to restore on exit."""

    def __init__(self, i=None):
        self.id = runtime.getDevice() if i is None else i
        self.pci_bus_id = runtime.deviceGetPCIBusId(self.id)
        self._stack: list = []

    def use(self):
        runtime.setDevice(self.id)

    def __enter__(self):
        self._stack.append(runtime.getDevice())
        runtime.setDevice(self.id)
        return self

    def __exit__(self, *e):
        runtime.setDevice(self._stack.pop())


class Stream:
    _ids = itertools.count(1)

    def __init__(self, non_blocking=False):
        _may_fail("Stream")
        self.ptr = next(Stream._ids)

    def __enter__(self):
        return self

    def __exit__(self, *e):
        pass


_events: set = set()


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.ptr = runtime.eventCreateWithFlags(0)

    def record(self, stream=None):
        runtime.eventRecord(self.ptr, 0)


class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        self.ptr, self.size, self.owner = ptr, size, owner


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


class _Runtime(types.SimpleNamespace):
    """cudaMalloc'd memory as mapped /dev/shm files; events as checked tokens."""

    eventDisableTiming, eventInterprocess = 2, 4
    cudaIpcMemLazyEnablePeerAccess = 1
    memcpyDefault = 4

    def __init__(self):
        super().__init__(maps={}, ids=itertools.count(1), current=int(_RANK) % _DEVICES)

    def getDeviceCount(self):
        return _DEVICES

    def getDevice(self):
        return self.current

    def memGetInfo(self):  # (free, total) of a 16 GiB device
        return 12 << 30, 16 << 30

    def setDevice(self, i):
        if not 0 <= i < _DEVICES:
            raise CUDARuntimeError(f"cudaErrorInvalidDevice: device {i}")
        self.current = i

    def deviceGetPCIBusId(self, i):
        return f"0000:{i + 1:02x}:00.0"

    def deviceGetByPCIBusId(self, bus):
        for i in range(_DEVICES):
            if self.deviceGetPCIBusId(i) == bus:
                return i
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: no device at {bus}")

    def deviceCanAccessPeer(self, i, j):
        return int(os.environ.get("STANDIN_CUPY_PEER_ACCESS", "1") != "0")

    def _map(self, name, size=None):
        fd = os.open(f"/dev/shm/{name}", os.O_RDWR | (os.O_CREAT | os.O_EXCL if size else 0),
                     0o600)
        try:
            if size:
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        addr = np.frombuffer(mm, np.uint8).__array_interface__["data"][0]
        self.maps[addr] = (name, mm)
        return addr

    def malloc(self, size):
        _may_fail("malloc")
        return self._map(f"{_PREFIX}{os.getpid()}-{next(self.ids)}", size)

    def free(self, addr):
        name, _ = self.maps.pop(addr)
        os.unlink(f"/dev/shm/{name}")

    def ipcGetMemHandle(self, addr):
        _may_fail("ipcGetMemHandle")
        return self.maps[addr][0].encode().ljust(64, b"\0")

    def ipcOpenMemHandle(self, handle, flags=1):
        _may_fail("ipcOpenMemHandle")
        return self._map(handle.rstrip(b"\0").decode())

    def ipcCloseMemHandle(self, addr):
        self.maps.pop(addr)

    def eventCreateWithFlags(self, flags):
        _may_fail("eventCreateWithFlags")
        ev = next(self.ids)
        _events.add(ev)
        return ev

    def ipcGetEventHandle(self, ev):
        return f"{os.getpid()}:{ev}".encode().ljust(64, b"\0")

    def ipcOpenEventHandle(self, handle):
        return self.eventCreateWithFlags(0)

    def _check(self, ev):
        if ev not in _events:
            raise RuntimeError(f"event {ev} is not a live event of this process")

    def eventRecord(self, ev, stream):
        self._check(ev)

    def streamWaitEvent(self, stream, ev, flags=0):
        self._check(ev)

    def eventDestroy(self, ev):
        self._check(ev)
        _events.discard(ev)

    def eventQuery(self, ev):
        self._check(ev)
        return 0

    def streamQuery(self, stream):
        return 0

    def memcpyAsync(self, dst, src, size, kind, stream):
        ctypes.memmove(dst, src, size)


runtime = _Runtime()
_current = Stream.__new__(Stream)  # the default stream (which STANDIN_CUPY_FAIL spares)
_current.ptr = 0
cuda = types.SimpleNamespace(
    runtime=runtime, Device=Device, Stream=Stream, Event=Event, UnownedMemory=UnownedMemory,
    MemoryPointer=MemoryPointer, get_current_stream=lambda: _current,
    is_available=lambda: True)
__version__ = "standin"
