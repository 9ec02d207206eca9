"""CUDA IPC transport: CuPy arrays between the processes of one host.

The control plane is the shared-memory transport's (``shm.py``): the same
segment, channels, slot headers, doorbells, deadlines and byte counters,
so numpy arrays move on this transport exactly as on ``shm``.  A CuPy
array's bytes move through device memory instead:

* **Device slots.** Each rank allocates one region of its own with
  ``cudaMalloc`` (``cupy.cuda.runtime.malloc``, not CuPy's memory pool) and
  cuts it, per endpoint and per peer, into as many slots as a host channel
  has (``COLLECTIVES_CUDA_SLOT_BYTES``, 4 MiB by default).  Device slot k of
  the channel ``src -> dst`` lies in ``src``'s region; the header of host
  slot k describes what it holds (kind ``DEVICE``).
* **IPC.** At start-up every rank exports its region's base with
  ``cudaIpcGetMemHandle`` (a handle and an offset) and the handles of its
  interprocess events (``cudaIpcGetEventHandle``); the handles travel as raw
  bytes in one MPI ``Allgather`` (nothing is pickled); every rank opens each
  peer's region and events once, keeps them, and closes them in ``close()``.
* **Order between processes** comes from interprocess events, one per slot
  and direction.  The sender waits (on its stream) for the receiver's
  ``drained[k]``, copies the chunk into its slot k, records ``filled[k]``,
  then publishes the header.  The receiver, once it sees the header, makes
  its stream wait for ``filled[k]``, copies or reduces straight out of the
  peer's slot (a CuPy kernel reading the IPC-mapped memory: no host
  staging), records ``drained[k]`` and frees the host slot.  Every record is
  issued before the host flag that lets a peer wait on it, so no wait can
  precede its record, and the host never waits for the GPU inside a step.
* **Streams.** Each endpoint has its own non-blocking stream.  A collective
  on CuPy arrays first makes that stream wait for an event recorded on the
  caller's current stream (when the call was issued), runs the algorithm
  with the stream current (so the algorithms' own CuPy calls go on it too),
  and returns once the stream has drained: a result is ready on any stream.
  Point-to-point calls do the same around each message.

Messages of 0 bytes, and numpy buffers, go through the host slots.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from . import _wire
from .base import Deadline, Endpoint, Request
from .errors import CollectiveError
from .shm import (DEVICE, ShmEndpoint, ShmTransport, _align, _env_int, _open_segment,
                  _Recv, _Send, _Unexpected, rank0_settings)

DEFAULT_SLOT_BYTES = 4 << 20
_NOT_READY = 600          # cudaErrorNotReady, from cudaEventQuery
_RELEASE_WAIT_S = 5.0     # how long close() waits for the peers to unmap this rank's region
_NOTHING = np.empty(0, np.uint8)


def _cupy():
    import cupy
    return cupy


def probe() -> str | None:
    """None if CuPy imports and sees a CUDA device; else why not."""
    try:
        cp = _cupy()
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"CuPy is not available ({e}); install it with pip install '.[cuda]'"
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
    except Exception as e:
        return f"no usable CUDA device ({e})"
    return None


def wanted(mpicomm) -> bool:
    """For transport="auto": every rank has imported CuPy already and sees a GPU."""
    mine = "cupy" in sys.modules and probe() is None
    return _wire.all_true(mpicomm, mine)


def _settings() -> int:
    slot_bytes = _env_int("COLLECTIVES_CUDA_SLOT_BYTES", DEFAULT_SLOT_BYTES)
    if slot_bytes <= 0 or slot_bytes % 256:
        raise ValueError("COLLECTIVES_CUDA_SLOT_BYTES must be a positive multiple of 256")
    return slot_bytes


def _agree(mpicomm, error: str | None, what: str) -> None:
    """Raise on every rank if any rank failed (its message, or a pointer to it)."""
    errors = _wire.allgather(mpicomm, error)
    bad = [(r, e) for r, e in enumerate(errors) if e]
    if bad:
        raise ValueError(f"{what}: " + "; ".join(f"rank {r}: {e}" for r, e in bad))


class CudaTransport(ShmTransport):
    name = "cuda"

    def __init__(self, mpicomm, timeout: float, pids, local):
        _agree(mpicomm, probe(), "transport='cuda' needs CuPy and a CUDA device on every rank")
        super().__init__(mpicomm, timeout, pids, local)
        cp = self.cp = _cupy()
        self.rt = cp.cuda.runtime
        self.device = self.rt.getDevice()  # the device current at init: arrays must be on it
        self.cuda_device = cp.cuda.Device(self.device)
        self.dev_slot_bytes = rank0_settings(mpicomm, _settings)
        self.coll = CudaEndpoint(self, 0, strict=True)
        self.p2p = CudaEndpoint(self, 1, strict=False)
        self.region = 0                 # this rank's cudaMalloc'd slots
        self.peer_region: dict = {}     # peer -> its region, opened through IPC
        self.own_events: list = []      # interprocess events this rank created
        self.peer_events: list = []     # peers' events opened here
        self._flags = None
        error = None
        try:
            with self.cuda_device:
                self._setup(mpicomm)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        try:
            _agree(mpicomm, error, "setting up the CUDA IPC transport failed")
        except ValueError:
            self._release(free=False)
            super().close()
            raise

    # -- start-up -----------------------------------------------------------
    def _slot_offset(self, src: int, ctx: int, dst: int, k: int) -> int:
        """Offset of device slot k of channel src -> dst in src's region."""
        j = dst - (dst > src)  # peers of src, numbered 0..N-2
        return ((ctx * (self.size - 1) + j) * self.nslots + k) * self.dev_slot_bytes

    def _setup(self, mpicomm) -> None:
        n, me, ns, rt = self.size, self.rank, self.nslots, self.rt
        for ep in (self.coll, self.p2p):
            ep.stream = self.cp.cuda.Stream(non_blocking=True)
            ep.done_event = self.cp.cuda.Event(disable_timing=True)
        # release flags for close(): rank r sets byte r once it has unmapped its peers
        self._flags = _open_segment(mpicomm, _align(max(n, 1), 4096))
        if n == 1:
            return
        self.region = rt.malloc(2 * (n - 1) * ns * self.dev_slot_bytes)
        flags = rt.eventDisableTiming | rt.eventInterprocess
        # own[0][ctx][peer][k]: filled (this rank sends to peer); own[1]: drained (receives)
        own = [[[[0] * ns for _ in range(n)] for _ in range(2)] for _ in range(2)]
        handles = np.zeros((2, 2, n, ns, 64), np.uint8)
        for which in range(2):
            for ctx in range(2):
                for p in range(n):
                    if p == me:
                        continue
                    for k in range(ns):
                        ev = rt.eventCreateWithFlags(flags)
                        self.own_events.append(ev)
                        own[which][ctx][p][k] = ev
                        handles[which, ctx, p, k] = np.frombuffer(rt.ipcGetEventHandle(ev),
                                                                  np.uint8)
        mem = np.zeros(72, np.uint8)
        mem[:64] = np.frombuffer(rt.ipcGetMemHandle(self.region), np.uint8)
        mem[64:].view(np.int64)[0] = 0  # offset of the slots from the exported base
        all_mem = np.empty((n, 72), np.uint8)
        all_handles = np.empty((n, *handles.shape), np.uint8)
        from mpi4py import MPI
        mpicomm.Allgather([mem, MPI.BYTE], [all_mem, MPI.BYTE])
        mpicomm.Allgather([handles, MPI.BYTE], [all_handles, MPI.BYTE])
        for p in range(n):
            if p == me:
                continue
            base = rt.ipcOpenMemHandle(all_mem[p, :64].tobytes(),
                                       rt.cudaIpcMemLazyEnablePeerAccess)
            self.peer_region[p] = base + int(all_mem[p, 64:].view(np.int64)[0])
        for ctx, ep in enumerate((self.coll, self.p2p)):
            ep.attach({p: own[0][ctx][p] for p in range(n) if p != me},
                      {p: own[1][ctx][p] for p in range(n) if p != me},
                      {p: self._open_events(all_handles[p, 1, ctx, me]) for p in range(n)
                       if p != me},
                      {p: self._open_events(all_handles[p, 0, ctx, me]) for p in range(n)
                       if p != me})

    def _open_events(self, handles: np.ndarray) -> list:
        evs = [self.rt.ipcOpenEventHandle(h.tobytes()) for h in handles]
        self.peer_events += evs
        return evs

    # -- addresses ----------------------------------------------------------
    def own_slot(self, ctx: int, dst: int, k: int) -> int:
        return self.region + self._slot_offset(self.rank, ctx, dst, k)

    def peer_slot(self, src: int, ctx: int, k: int, nbytes: int):
        """The first ``nbytes`` of src's device slot k towards this rank, as a
        CuPy uint8 array over the IPC-mapped memory (read in place)."""
        cp = self.cp
        ptr = self.peer_region[src] + self._slot_offset(src, ctx, self.rank, k)
        mem = cp.cuda.UnownedMemory(ptr, nbytes, self, self.device)
        return cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))

    # -- streams ------------------------------------------------------------
    def follow_caller(self, stream) -> None:
        """Make ``stream`` wait for the work issued so far on the caller's stream."""
        ev = self.cp.cuda.Event(disable_timing=True)
        ev.record(self.cp.cuda.get_current_stream())
        self.rt.streamWaitEvent(stream.ptr, ev.ptr)

    def settle(self, ep: "CudaEndpoint") -> None:
        """Return once ``ep``'s stream has done all its work, polling with the
        endpoint's deadline (a dead peer or a stalled GPU raises, not hangs)."""
        rt = self.rt
        ev = ep.done_event.ptr
        rt.eventRecord(ev, ep.stream.ptr)
        dl, polls, nap = None, 0, 0.0
        peers = [p for p in range(self.size) if p != self.rank]
        while True:
            status = rt.eventQuery(ev)
            if status == 0:
                return
            if status != _NOT_READY:
                raise CollectiveError(f"CUDA error {status} in {ep.what}")
            polls += 1
            if polls < 64:
                os.sched_yield()
                continue
            dl = dl or Deadline(self.timeout, self.rank)
            dl.check(self.liveness, lambda: peers, lambda: peers, ep.what)
            nap = min(0.001, nap * 2 or 2e-5)
            time.sleep(nap)

    def on_device(self, body, call: str):
        """Wrap a collective's ``body(ep)`` on CuPy arrays: after the caller's
        work (as of now), on the endpoint's stream, finished on return."""
        with self.cuda_device:
            fence = self.cp.cuda.Event(disable_timing=True)
            fence.record(self.cp.cuda.get_current_stream())

        def run(ep):
            with self.cuda_device, ep.stream:
                self.rt.streamWaitEvent(ep.stream.ptr, fence.ptr)
                result = body(ep)
                self.settle(ep)
            return result
        return run

    # -- shutdown -----------------------------------------------------------
    def close(self) -> None:
        try:
            self._release(free=True)
        finally:
            super().close()

    def _release(self, free: bool) -> None:
        """Unmap the peers' regions and events, then free this rank's own once
        every peer has unmapped it (or leave it to the process's exit)."""
        if getattr(self, "rt", None) is None:
            return
        rt, flags = self.rt, self._flags
        try:
            with self.cuda_device:
                streams = [ep.stream for ep in (self.coll, self.p2p)
                           if getattr(ep, "stream", None) is not None]
                if any(rt.streamQuery(s.ptr) != 0 for s in streams):
                    return  # work still queued after an error: leave the mappings alone
                for ev in self.peer_events:
                    rt.eventDestroy(ev)
                for base in self.peer_region.values():
                    rt.ipcCloseMemHandle(base)
                self.peer_events, self.peer_region = [], {}
                if flags is None:
                    return
                flags[self.rank] = 1
                others = [p for p in range(self.size) if p != self.rank]
                end = time.monotonic() + _RELEASE_WAIT_S
                while free and not all(flags[p] for p in others):
                    if time.monotonic() > end or self.liveness.dead(others):
                        free = False  # a peer may still map it: the exit frees it
                        break
                    time.sleep(0.001)
                if free:
                    for ev in self.own_events:
                        rt.eventDestroy(ev)
                    if self.region:
                        rt.free(self.region)
                    self.own_events, self.region = [], 0
        except Exception:
            pass  # a context already torn down at exit: nothing left to release
        finally:
            if flags is not None:
                self._flags = None
                flags.close()
            self.rt = None


class _DevSend(_Send):
    __slots__ = ("ptr",)
    dev = True

    def __init__(self, ep, peer, data, tag):
        super().__init__(ep, peer, data, tag)
        self.rndv = False
        self.chunks = -(-data.nbytes // ep.dev_slot_bytes)
        self.ptr = data.data.ptr


class _DevRecv(_Recv):
    __slots__ = ("ptr",)
    dev = True

    def __init__(self, ep, peer, tag, out, acc=None, op=None):
        super().__init__(ep, peer, tag, out, acc, op)
        self.ptr = out.data.ptr

    def consume(self, chunk) -> None:
        n = chunk.nbytes
        if n:
            if isinstance(chunk, np.ndarray):
                raise _mixed(self.peer, self.ep.rank, sent="host")
            self.ep.put(self, chunk)
        self.off += n


class _DevUnexpected(_Unexpected):
    """A point-to-point device message that arrived before its receive: its
    chunks are copied into a device buffer of this rank's."""

    __slots__ = ("ptr", "ep")
    dev = True

    def __init__(self, ep, tag, total):
        self.tag, self.total, self.off = tag, total, 0
        self.finished, self.waiter, self.ep = False, None, ep
        self.buf = ep.t.cp.empty(total, ep.t.cp.uint8)
        self.ptr = self.buf.data.ptr

    def consume(self, chunk) -> None:
        self.ep.copy(self.ptr + self.off, chunk)
        self.off += chunk.nbytes


def _mixed(peer: int, rank: int, sent: str) -> CollectiveError:
    other = "device (CuPy)" if sent == "host" else "host (numpy)"
    return CollectiveError(f"rank {peer} sent {sent} memory where rank {rank} receives into "
                           f"{other} memory (numpy and CuPy arrays mixed between ranks)",
                           ranks=[peer])


class CudaEndpoint(ShmEndpoint):
    """The shared-memory endpoint, with device chunks for CuPy buffers."""

    stream = None

    def __init__(self, t: CudaTransport, ctx: int, strict: bool):
        super().__init__(t, ctx, strict)
        self.dev_slot_bytes = t.dev_slot_bytes
        self.ops: dict = {}

    def attach(self, filled, drained, peer_drained, peer_filled) -> None:
        """Per peer, per slot: this rank's events (filled as sender, drained as
        receiver) and the peer's opened ones (drained as receiver of our
        chunks, filled as sender of its own)."""
        self.filled, self.drained = filled, drained
        self.peer_drained, self.peer_filled = peer_drained, peer_filled

    # -- posting ----------------------------------------------------------
    def _device_buffer(self, buf) -> bool:
        if isinstance(buf, np.ndarray):
            return False
        if not self.strict:  # a user's message: after the caller's own work on it
            with self.t.cuda_device:
                self.t.follow_caller(self.stream)
        return True

    def isend(self, buf, peer, tag=None) -> Request:
        if not self._device_buffer(buf) or buf.nbytes == 0:
            return super().isend(buf if isinstance(buf, np.ndarray) else _NOTHING, peer, tag)
        self._check_peer(peer)
        return self._enqueue(_DevSend(self, peer, _bytes(buf), self.tag if tag is None else tag))

    def irecv(self, out, peer, tag=None) -> Request:
        if not self._device_buffer(out):
            return super().irecv(out, peer, tag)
        return self._post(_DevRecv(self, peer, self.tag if tag is None else tag, _bytes(out)))

    def irecv_reduce(self, acc, peer, op, tag=None) -> Request:
        if not self._device_buffer(acc):
            return super().irecv_reduce(acc, peer, op, tag)
        return self._post(_DevRecv(self, peer, self.tag if tag is None else tag,
                                   _bytes(acc), acc.reshape(-1), op))

    def chunk_bytes(self, a) -> int:
        return super().chunk_bytes(a) if isinstance(a, np.ndarray) else 0

    def exchange(self, buf, root=None, sent=None, recv=None):
        if isinstance(buf[0] if isinstance(buf, (list, tuple)) else buf, np.ndarray):
            return super().exchange(buf, root, sent, recv)
        return Endpoint.exchange(self, buf, root, sent, recv)  # through the device slots

    # -- completion -------------------------------------------------------
    def waitall(self, reqs) -> None:
        reqs = list(reqs)
        super().waitall(reqs)
        if not self.strict and any(r.dev for r in reqs):
            with self.t.cuda_device:
                self.t.settle(self)

    def test(self, req) -> bool:
        done = super().test(req)
        if done and req.dev and not self.strict:
            with self.t.cuda_device:
                self.t.settle(self)
        return done

    # -- the device side of a chunk ----------------------------------------
    def _fill_device(self, peer: int, k: int, s: _DevSend) -> int:
        """Copy the next chunk of ``s`` into this rank's slot k for ``peer``
        once the peer has drained it; returns the chunk's size."""
        t, rt = self.t, self.t.rt
        n = min(self.dev_slot_bytes, s.data.nbytes - s.off)
        st = self.stream.ptr
        with t.cuda_device:
            rt.streamWaitEvent(st, self.peer_drained[peer][k])
            rt.memcpyAsync(t.own_slot(self.ctx, peer, k), s.ptr + s.off, n,
                           rt.memcpyDefault, st)
            rt.eventRecord(self.filled[peer][k], st)
        return n

    def _drain_device(self, peer: int, k: int, cur, n: int) -> None:
        """Copy or reduce chunk k straight out of the peer's slot, after the
        peer's copy into it; then mark the slot drained."""
        if not cur.dev:
            raise _mixed(peer, self.rank, sent="device")
        t, rt = self.t, self.t.rt
        st = self.stream.ptr
        with t.cuda_device:
            rt.streamWaitEvent(st, self.peer_filled[peer][k])
            cur.consume(t.peer_slot(peer, self.ctx, k, n))
            rt.eventRecord(self.drained[peer][k], st)

    def _unexpected_message(self, tag: int, total: int, kind: int):
        if kind != DEVICE:
            return super()._unexpected_message(tag, total, kind)
        with self.t.cuda_device:
            return _DevUnexpected(self, tag, total)

    def _deliver(self, m) -> None:
        r = m.waiter
        if m.total and m.dev != r.dev:
            raise _mixed(r.peer, self.rank, sent="device" if m.dev else "host")
        if not r.dev:
            return super()._deliver(m)
        with self.t.cuda_device:
            super()._deliver(m)

    def copy(self, dst: int, chunk) -> None:
        rt = self.t.rt
        rt.memcpyAsync(dst, chunk.data.ptr, chunk.nbytes, rt.memcpyDefault, self.stream.ptr)

    def put(self, r: _DevRecv, chunk) -> None:
        """Chunk ``chunk`` (device bytes) into receive ``r`` at its offset."""
        if r.op is None:
            self.copy(r.ptr + r.off, chunk)
            return
        isz = r.acc.itemsize
        a = r.acc[r.off // isz:(r.off + chunk.nbytes) // isz]
        with self.stream:  # a CuPy kernel that reads the peer's slot in place
            self._cupy_op(r.op)(a, chunk.view(r.acc.dtype), out=a)

    def _cupy_op(self, op):
        """CuPy's ufunc for the numpy ufunc ``op`` (np.add -> cupy.add, ...)."""
        f = self.ops.get(op)
        if f is None:
            f = self.ops[op] = getattr(self.t.cp, op.__name__)
        return f


def _bytes(a):
    return a.reshape(-1).view("uint8")
