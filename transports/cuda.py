"""CUDA IPC transport: CuPy arrays between the processes of one host.

The control plane is the shared-memory transport's (``shm``): the same
segment, channels, slot headers, doorbells, deadlines and byte counters,
so numpy arrays move on this transport exactly as on ``shm``.  A CuPy
array's bytes move through device memory instead, through the endpoint's
hook for chunks outside the segment (slot kind ``EXTERNAL``):

* **Device slots** (``cuda_ipc``): each rank's ``cudaMalloc``'d region,
  cut per endpoint and per peer into as many slots as a host channel has;
  the header of host slot k describes what device slot k holds.  Every
  chunk costs one wait between processes (on a GPU that the ranks share,
  a switch between their contexts: 220-280 us one way on an H200), so
  slots are as large as the region allows (``slot_bytes``: 4 to 64 MiB),
  or ``COLLECTIVES_CUDA_SLOT_BYTES``.
* **IPC.** At start-up every rank exports its region's handle and the
  handles of its interprocess events; they travel as raw bytes in MPI
  ``Allgather`` calls (nothing is pickled); every rank opens each peer's
  region and events once, keeps them, and closes them in ``close()``.  A
  step that fails on one rank is agreed by all before the next collective
  step, so every rank raises.
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
from .base import Capabilities, Deadline, Endpoint, Request, as_bytes, env_int
from .cuda_ipc import IpcSlots, agree, agreed, check_peer_access
from .errors import CollectiveError
from .shm import ShmTransport
from .shm.messages import Recv, Send, Unexpected
from .shm.segment import PAGE, align, open_segment
from .shm.slots import EXTERNAL, ShmEndpoint

MIN_SLOT_BYTES = 4 << 20     # device slot bytes chosen between these (slot_bytes)
MAX_SLOT_BYTES = 64 << 20
REGION_BYTES = 1 << 30       # at most this much device memory a rank for its slots ...
REGION_SHARE = 16            # ... and at most 1/16 of its GPU's memory per rank on that GPU
_NOT_READY = 600          # cudaErrorNotReady, from cudaEventQuery
_NAP_MAX = 200e-6         # settle's longest sleep between looks at the stream
_NOTHING = np.empty(0, np.uint8)


def _cupy():
    import cupy
    return cupy


def probe() -> str | None:
    """None if CuPy imports and sees a CUDA device; else why not."""
    try:
        cp = _cupy()
    except Exception as e:  # ImportError, or a broken CUDA install
        return (f"CuPy is not available ({e}); install it with pip install '.[cuda13]' "
                "or '.[cuda12]' (the machine's CUDA)")
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


def slot_bytes(size: int, nslots: int, gpu_bytes: int, gpus: int) -> int:
    """The device slot's bytes for ``size`` ranks with ``nslots`` slots a
    channel, on ``gpus`` GPUs of ``gpu_bytes`` each: the largest power of two
    that fits the region (2·(size−1)·nslots slots in at most REGION_BYTES,
    and in 1/REGION_SHARE of a GPU per rank sharing it), between
    MIN_SLOT_BYTES and MAX_SLOT_BYTES."""
    if size < 2:
        return MIN_SLOT_BYTES
    sharing = -(-size // max(1, gpus))
    region = min(REGION_BYTES, gpu_bytes // (REGION_SHARE * sharing))
    per_slot = region // (2 * (size - 1) * nslots)
    if per_slot < MIN_SLOT_BYTES:
        return MIN_SLOT_BYTES
    return min(MAX_SLOT_BYTES, 1 << (per_slot.bit_length() - 1))


def _settings(size: int, nslots: int) -> int:
    """Rank 0's device slot bytes: COLLECTIVES_CUDA_SLOT_BYTES, else slot_bytes()."""
    if os.environ.get("COLLECTIVES_CUDA_SLOT_BYTES", "").strip():
        given = env_int("COLLECTIVES_CUDA_SLOT_BYTES", 0)
        if given <= 0 or given % 256:
            raise ValueError("COLLECTIVES_CUDA_SLOT_BYTES must be a positive multiple of 256")
        return given
    try:
        rt = _cupy().cuda.runtime
        return slot_bytes(size, nslots, rt.memGetInfo()[1], rt.getDeviceCount())
    except Exception as e:  # every rank raises it (rank0_settings), none waits
        raise ValueError(f"transport='cuda': reading the GPU's memory size failed: "
                         f"{type(e).__name__}: {e}") from None


class DevSend(Send):
    __slots__ = ("ptr",)
    external = True

    def __init__(self, ep, peer, data, tag):
        super().__init__(ep, peer, data, tag)
        self.rndv = False
        self.chunks = -(-data.nbytes // ep.external_bytes)
        self.ptr = data.data.ptr


class DevRecv(Recv):
    __slots__ = ("ptr",)
    external = True

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


class DevUnexpected(Unexpected):
    """A point-to-point device message that arrived before its receive: its
    chunks are copied into a device buffer of this rank's."""

    __slots__ = ("ptr", "ep")
    external = True

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
    """The shared-memory endpoint, with device chunks for CuPy buffers (its
    EXTERNAL chunks, in the device slots)."""

    stream = None

    def __init__(self, t: CudaTransport, ctx: int, strict: bool):
        super().__init__(t.seg, ctx, strict, t.settings, t.liveness, t.timeout,
                         watch=t.watch, regions=t.regions)
        self.t = t  # its device, streams, IPC slots and events
        self.ops: dict = {}  # external_bytes: the device slot's, set by the transport

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
            with self.t.gpu():
                self.t.follow_caller(self.stream)
        return True

    def isend(self, buf, peer, tag=None) -> Request:
        if not self._device_buffer(buf) or buf.nbytes == 0:
            return super().isend(buf if isinstance(buf, np.ndarray) else _NOTHING, peer, tag)
        return self.enqueue(DevSend(self, peer, as_bytes(buf), self.tag if tag is None else tag))

    def irecv(self, out, peer, tag=None) -> Request:
        if not self._device_buffer(out):
            return super().irecv(out, peer, tag)
        return self.post(DevRecv(self, peer, self.tag if tag is None else tag, as_bytes(out)))

    def irecv_reduce(self, acc, peer, op, tag=None, src=None) -> Request:
        if not self._device_buffer(acc):
            return super().irecv_reduce(acc, peer, op, tag, src)
        if src is not None:  # the device receive reduces into acc in place
            acc[...] = src
        return self.post(DevRecv(self, peer, self.tag if tag is None else tag,
                                 as_bytes(acc), acc.reshape(-1), op))

    def chunk_bytes(self, a) -> int:
        return super().chunk_bytes(a) if isinstance(a, np.ndarray) else 0

    def exchange(self, buf, root=None, sent=None, recv=None, sink=None):
        if isinstance(buf[0] if isinstance(buf, (list, tuple)) else buf, np.ndarray):
            return super().exchange(buf, root, sent, recv, sink)
        return Endpoint.exchange(self, buf, root, sent, recv, sink)  # through the device slots

    # -- completion -------------------------------------------------------
    def waitall(self, reqs) -> None:
        reqs = list(reqs)
        super().waitall(reqs)
        if not self.strict and any(r.external for r in reqs):
            with self.t.gpu():
                self.t.settle(self)

    def test(self, req) -> bool:
        done = super().test(req)
        if done and req.external and not self.strict:
            with self.t.gpu():
                self.t.settle(self)
        return done

    # -- the hook: the device side of a chunk --------------------------------
    def fill_external(self, peer: int, k: int, s: DevSend) -> int:
        """Copy the next chunk of ``s`` into this rank's slot k for ``peer``
        once the peer has drained it; returns the chunk's size."""
        t, rt = self.t, self.t.rt
        n = min(self.external_bytes, s.data.nbytes - s.off)
        st = self.stream.ptr
        with t.gpu():
            rt.streamWaitEvent(st, self.peer_drained[peer][k])
            rt.memcpyAsync(t.ipc.own_slot(self.ctx, peer, k), s.ptr + s.off, n,
                           rt.memcpyDefault, st)
            rt.eventRecord(self.filled[peer][k], st)
        return n

    def drain_external(self, peer: int, k: int, cur, n: int) -> None:
        """Copy or reduce chunk k straight out of the peer's slot, after the
        peer's copy into it; then mark the slot drained."""
        if not cur.external:
            raise _mixed(peer, self.rank, sent="device")
        t, rt = self.t, self.t.rt
        st = self.stream.ptr
        with t.gpu():
            rt.streamWaitEvent(st, self.peer_filled[peer][k])
            cur.consume(t.peer_slot(peer, self.ctx, k, n))
            rt.eventRecord(self.drained[peer][k], st)

    def unexpected_message(self, tag: int, total: int, kind: int):
        if kind != EXTERNAL:
            return super().unexpected_message(tag, total, kind)
        with self.t.gpu(), self.stream:  # allocated on the stream that fills it
            return DevUnexpected(self, tag, total)

    def deliver(self, m) -> None:
        r = m.waiter
        if m.total and m.external != r.external:
            raise _mixed(r.peer, self.rank, sent="device" if m.external else "host")
        if not r.external:
            return super().deliver(m)
        with self.t.gpu():
            super().deliver(m)

    def copy(self, dst: int, chunk) -> None:
        rt = self.t.rt
        rt.memcpyAsync(dst, chunk.data.ptr, chunk.nbytes, rt.memcpyDefault, self.stream.ptr)

    def put(self, r: DevRecv, chunk) -> None:
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


class CudaTransport(ShmTransport):
    name = "cuda"
    device: int | None = None  # the device current at init: arrays must be on it

    def __init__(self, mpicomm, timeout: float, pids, local):
        agree(mpicomm, probe(), "transport='cuda' needs CuPy and a CUDA device on every rank")
        super().__init__(mpicomm, timeout, pids, local)
        cp = self.cp = _cupy()
        self.rt = cp.cuda.runtime
        try:
            self.dev_slot_bytes = _wire.rank0_settings(
                mpicomm, lambda: _settings(self.size, self.nslots))
        except BaseException:
            super().close()
            raise
        for ep in (self.coll, self.p2p):
            ep.external_bytes = self.dev_slot_bytes
        self.ipc = IpcSlots(self.rt, self.rank, self.size, self.nslots, self.dev_slot_bytes)
        self._flags = None  # release flags for close(): rank r sets byte r once it has unmapped
        try:
            self._setup(mpicomm)
        except BaseException:  # agreed: every rank is here, at the same step
            self._release(free=True)
            super().close()
            raise

    def make_endpoint(self, ctx: int, strict: bool) -> CudaEndpoint:
        return CudaEndpoint(self, ctx, strict)

    def gpu(self):
        """This transport's device as a context: a new one per use, since a
        CuPy Device keeps the devices to restore per object, and the caller's
        thread and the worker's may enter it at once."""
        return self.cp.cuda.Device(self.device)

    # -- start-up -----------------------------------------------------------
    def _setup(self, mpicomm) -> None:
        """Local steps, each agreed by every rank before the next collective step."""
        ipc = self.ipc
        agreed(mpicomm, "creating streams and events", self._streams)
        self._flags = open_segment(mpicomm, align(max(self.size, 1), PAGE))  # raises on all
        if self.size == 1:
            return
        mine = agreed(mpicomm, "allocating device slots and events", self._export)
        all_mem, all_handles, buses = ipc.gather(mpicomm, *mine)
        agreed(mpicomm, "opening the peers' device slots and events", self._open,
               all_mem, all_handles, buses)
        for ctx, ep in enumerate((self.coll, self.p2p)):
            ep.attach(*ipc.events(ctx))

    def _streams(self) -> None:
        self.device = self.rt.getDevice()
        # numpy arrays move through the device slots too: no staged exchange
        self.caps = Capabilities(regions=True, device=self.device)
        with self.gpu():
            for ep in (self.coll, self.p2p):
                ep.stream = self.cp.cuda.Stream(non_blocking=True)
                ep.done_event = self.cp.cuda.Event(disable_timing=True)

    def _export(self) -> tuple:
        """This rank's handles (cuda_ipc), and its GPU's PCI bus id."""
        with self.gpu():
            return (*self.ipc.export(), self.rt.deviceGetPCIBusId(self.device))

    def _open(self, all_mem, all_handles, buses: list[str]) -> None:
        with self.gpu():
            check_peer_access(self.rt, self.device, buses, self.rank)
            self.ipc.open(all_mem, all_handles)

    def peer_slot(self, src: int, ctx: int, k: int, nbytes: int):
        """The first ``nbytes`` of src's device slot k towards this rank, as a
        CuPy uint8 array over the IPC-mapped memory (read in place)."""
        cp = self.cp
        mem = cp.cuda.UnownedMemory(self.ipc.peer_slot(src, ctx, k), nbytes, self, self.device)
        return cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))

    # -- streams ------------------------------------------------------------
    def follow_caller(self, stream) -> None:
        """Make ``stream`` wait for the work issued so far on the caller's stream."""
        ev = self.cp.cuda.Event(disable_timing=True)
        ev.record(self.cp.cuda.get_current_stream())
        self.rt.streamWaitEvent(stream.ptr, ev.ptr)

    def settle(self, ep: "CudaEndpoint") -> None:
        """Return once ``ep``'s stream has done all its work, polling with the
        endpoint's deadline (a dead peer or a stalled GPU raises, not hangs).
        It looks as the host waits do (COLLECTIVES_SPIN: many looks where
        every rank has a core, few where they share), then sleeps from
        20 us doubling to _NAP_MAX."""
        rt = self.rt
        ev = ep.done_event.ptr
        rt.eventRecord(ev, ep.stream.ptr)
        dl, polls, nap = None, 0, 0.0
        spin = max(1, ep.settings.spin)
        peers = [p for p in range(self.size) if p != self.rank]
        while True:
            status = rt.eventQuery(ev)
            if status == 0:
                return
            if status != _NOT_READY:
                raise CollectiveError(f"CUDA error {status} in {ep.what}")
            polls += 1
            if polls < spin:
                os.sched_yield()
                continue
            dl = dl or Deadline(self.timeout, self.rank)
            dl.check(self.liveness, lambda: peers, lambda: peers, ep.what)
            nap = min(_NAP_MAX, nap * 2 or 2e-5)
            time.sleep(nap)

    def on_device(self, body, call: str):
        """Wrap a collective's ``body(ep)`` on CuPy arrays: after the caller's
        work (as of now), on the endpoint's stream, finished on return."""
        with self.gpu():
            fence = self.cp.cuda.Event(disable_timing=True)
            fence.record(self.cp.cuda.get_current_stream())

        def run(ep):
            with self.gpu(), ep.stream:
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
        every peer has unmapped it (``IpcSlots.release``)."""
        if getattr(self, "rt", None) is None:
            return
        flags = self._flags
        others = [p for p in range(self.size) if p != self.rank]
        try:
            with self.gpu():
                streams = [ep.stream for ep in (self.coll, self.p2p) if ep.stream is not None]
                if any(self.rt.streamQuery(s.ptr) != 0 for s in streams):
                    return  # work still queued after an error: leave the mappings alone
                self.ipc.release(flags, free, lambda: bool(self.liveness.dead(others)))
        except Exception:
            pass  # a context already torn down at exit: nothing left to release
        finally:
            if flags is not None:
                self._flags = None
                flags.close()
            self.rt = None
