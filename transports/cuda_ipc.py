"""The device memory and events that the cuda transport shares through CUDA IPC.

Each rank allocates one region of its own with ``cudaMalloc``
(``cupy.cuda.runtime.malloc``, not CuPy's memory pool, whose blocks cannot
be exported on their own) and cuts it, per endpoint and per peer, into as
many device slots as a host channel has slots.  Device slot k of the
channel ``src -> dst`` lies in ``src``'s region.  Per slot and direction
there is one interprocess event: ``filled`` (recorded by the sender after
its copy into the slot) and ``drained`` (recorded by the receiver after its
read).

Set-up goes in stages.  A step that one rank may fail alone (allocating,
creating events, exporting or opening handles) is followed by an agreement
of every rank (``agreed``) before anyone enters the next collective MPI
call, so that a failure raises the same error on every rank instead of
leaving the others waiting in that call.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from . import _wire

HANDLE_BYTES = 64  # a cudaIpcMemHandle_t or cudaIpcEventHandle_t
# a rank's memory record: the handle of its region's base, then the offset of
# its slots from that base (i64)
MEM_HANDLE, MEM_OFFSET, MEM_RECORD = 0, HANDLE_BYTES, HANDLE_BYTES + 8
FILLED, DRAINED = 0, 1     # the two events of a slot, by their index in the handles
RELEASE_WAIT_S = 5.0       # how long release() waits for the peers to unmap this rank's region


def agree(mpicomm, error: str | None, what: str) -> None:
    """Raise ValueError on every rank if any rank failed, naming each one's error."""
    errors = _wire.allgather(mpicomm, error)
    bad = [(r, e) for r, e in enumerate(errors) if e]
    if bad:
        raise ValueError(f"{what}: " + "; ".join(f"rank {r}: {e}" for r, e in bad))


def agreed(mpicomm, what: str, step: Callable, *args):
    """``step(*args)`` on this rank, then the agreement of all on its outcome:
    its result where every rank succeeded, else ValueError on every rank."""
    result, error = None, None
    try:
        result = step(*args)
    except Exception as e:  # any CUDA error, or a missing peer access
        error = f"{type(e).__name__}: {e}"
    agree(mpicomm, error, f"setting up the CUDA IPC transport failed while {what}")
    return result


def check_peer_access(rt, device: int, buses: list[str], me: int) -> None:
    """Raise where a peer's GPU is another one that this rank's GPU cannot
    access as a peer: opening its memory through IPC needs peer access."""
    bad = []
    for p, bus in enumerate(buses):
        if p == me or bus == buses[me]:
            continue
        try:
            other = rt.deviceGetByPCIBusId(bus)
        except Exception:  # not visible to this process: the open will tell
            continue
        if not rt.deviceCanAccessPeer(device, other):
            bad.append(f"rank {p}'s GPU (PCI bus {bus})")
    if bad:
        raise RuntimeError(f"this rank's GPU (PCI bus {buses[me]}) cannot access "
                           f"{', '.join(bad)} as a peer (cudaDeviceCanAccessPeer is 0), and "
                           f"CUDA IPC between two GPUs needs peer access; put these ranks on "
                           f"one GPU, or on GPUs with peer access (nvidia-smi topo -p2p r)")


class IpcSlots:
    """This rank's region and events, and the peers' ones opened here."""

    def __init__(self, rt, rank: int, size: int, nslots: int, slot_bytes: int):
        self.rt, self.rank, self.size = rt, rank, size
        self.nslots, self.slot_bytes = nslots, slot_bytes
        self.region = 0                 # this rank's cudaMalloc'd slots
        self.mapped: dict = {}          # peer -> what cudaIpcOpenMemHandle returned
        self.peer_region: dict = {}     # peer -> its slots' base, as mapped here
        self.own_events: list = []      # interprocess events this rank created
        self.peer_events: list = []     # peers' events opened here
        # own[which][ctx][peer][k] (which: FILLED as sender, DRAINED as receiver)
        self.own: list = []
        self.theirs: dict = {}          # peer -> its handles towards this rank

    # -- addresses ------------------------------------------------------------
    def _offset(self, src: int, ctx: int, dst: int, k: int) -> int:
        """Offset of device slot k of channel src -> dst in src's region."""
        j = dst - (dst > src)  # peers of src, numbered 0..N-2
        return ((ctx * (self.size - 1) + j) * self.nslots + k) * self.slot_bytes

    def own_slot(self, ctx: int, dst: int, k: int) -> int:
        return self.region + self._offset(self.rank, ctx, dst, k)

    def peer_slot(self, src: int, ctx: int, k: int) -> int:
        return self.peer_region[src] + self._offset(src, ctx, self.rank, k)

    # -- set-up ---------------------------------------------------------------
    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """Allocate the region and the events; their handles as raw bytes:
        the memory record, and handles[which, ctx, peer, k]."""
        n, me, ns, rt = self.size, self.rank, self.nslots, self.rt
        self.region = rt.malloc(2 * (n - 1) * ns * self.slot_bytes)
        flags = rt.eventDisableTiming | rt.eventInterprocess
        self.own = [[[[0] * ns for _ in range(n)] for _ in range(2)] for _ in range(2)]
        handles = np.zeros((2, 2, n, ns, HANDLE_BYTES), np.uint8)
        for which in (FILLED, DRAINED):
            for ctx in range(2):
                for p in (p for p in range(n) if p != me):
                    for k in range(ns):
                        ev = rt.eventCreateWithFlags(flags)
                        self.own_events.append(ev)
                        self.own[which][ctx][p][k] = ev
                        handles[which, ctx, p, k] = np.frombuffer(rt.ipcGetEventHandle(ev),
                                                                  np.uint8)
        mem = np.zeros(MEM_RECORD, np.uint8)
        mem[MEM_HANDLE:MEM_OFFSET] = np.frombuffer(rt.ipcGetMemHandle(self.region), np.uint8)
        mem[MEM_OFFSET:].view(np.int64)[0] = 0  # the slots start at the exported base
        return mem, handles

    def gather(self, mpicomm, mem: np.ndarray, handles: np.ndarray,
               bus: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every rank's memory record, event handles and GPU (a collective
        step: raw bytes in MPI Allgather calls, nothing pickled)."""
        from mpi4py import MPI
        n = self.size
        all_mem = np.empty((n, MEM_RECORD), np.uint8)
        all_handles = np.empty((n, *handles.shape), np.uint8)
        mpicomm.Allgather([mem, MPI.BYTE], [all_mem, MPI.BYTE])
        mpicomm.Allgather([handles, MPI.BYTE], [all_handles, MPI.BYTE])
        return all_mem, all_handles, _wire.allgather(mpicomm, bus)

    def open(self, all_mem: np.ndarray, all_handles: np.ndarray) -> None:
        """Map every peer's region and open its events towards this rank."""
        rt, me = self.rt, self.rank
        for p in (p for p in range(self.size) if p != me):
            try:
                self.mapped[p] = rt.ipcOpenMemHandle(all_mem[p, MEM_HANDLE:MEM_OFFSET].tobytes(),
                                                     rt.cudaIpcMemLazyEnablePeerAccess)
            except Exception as e:  # name the peer: its GPU may be the cause
                raise RuntimeError(f"opening rank {p}'s device memory: "
                                   f"{type(e).__name__}: {e}") from None
            offset = int(all_mem[p, MEM_OFFSET:].view(np.int64)[0])
            self.peer_region[p] = self.mapped[p] + offset
            self.theirs[p] = [[self._open_events(all_handles[p, which, ctx, me])
                               for ctx in range(2)] for which in (FILLED, DRAINED)]

    def _open_events(self, handles: np.ndarray) -> list:
        evs = [self.rt.ipcOpenEventHandle(h.tobytes()) for h in handles]
        self.peer_events += evs
        return evs

    def events(self, ctx: int) -> tuple[dict, dict, dict, dict]:
        """Per peer, per slot, for endpoint ``ctx``: this rank's filled and
        drained events, and the peer's drained and filled ones."""
        peers = [p for p in range(self.size) if p != self.rank]
        return ({p: self.own[FILLED][ctx][p] for p in peers},
                {p: self.own[DRAINED][ctx][p] for p in peers},
                {p: self.theirs[p][DRAINED][ctx] for p in peers},
                {p: self.theirs[p][FILLED][ctx] for p in peers})

    # -- release --------------------------------------------------------------
    def release(self, flags, free: bool, others_gone: Callable[[], bool]) -> None:
        """Unmap the peers' regions and events; then set this rank's byte in
        ``flags`` and, once every peer has set its own (it has unmapped this
        rank's region), free this rank's region and events; or leave them to
        the process's exit (``free`` false, a peer that does not answer)."""
        rt = self.rt
        for ev in self.peer_events:
            rt.eventDestroy(ev)
        for ptr in self.mapped.values():
            rt.ipcCloseMemHandle(ptr)
        self.peer_events, self.mapped, self.peer_region = [], {}, {}
        if flags is None:  # set-up stopped before any handle left this rank
            return
        flags[self.rank] = 1
        others = [p for p in range(self.size) if p != self.rank]
        end = time.monotonic() + RELEASE_WAIT_S
        while free and not all(flags[p] for p in others):
            if time.monotonic() > end or others_gone():
                free = False  # a peer may still map it: the exit frees it
                break
            time.sleep(0.001)
        if free:
            for ev in self.own_events:
                rt.eventDestroy(ev)
            if self.region:
                rt.free(self.region)
            self.own_events, self.region = [], 0
