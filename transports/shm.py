"""POSIX shared-memory transport for the ranks of one host.

Its modules, one job each:

* ``shm_segment``: the segment (created, mapped by every rank, unlinked at
  once) and its layout, every offset by name;
* ``shm_slots``: the slot protocol of an endpoint (channels of slots,
  sends, receives, matching, unexpected messages, progress and waiting);
* ``shm_exchange``: the staged ``exchange()`` through the exchange buffers;
* ``shm_direct``: the one-copy path, peers reading a rank's array where it lies;
* ``shm_regions``: communicator-allocated arrays, which every rank maps.

This module assembles them: settings, the transport (its rank-block words:
doorbells, sleeping flags, arrival, the note of a failed call) and its two
endpoints, of the class ``endpoint_class`` names (a transport built on this
one supplies its own).

A message is cut into slot-sized chunks.  The sender copies a chunk into a
free slot and bumps ``head``; the receiver copies (or reduces) it out and
bumps ``tail``.  With several slots per channel the sender fills chunk k+1
while the receiver reduces chunk k.  Each side then rings the other's
doorbell; a rank with nothing to do spins a little, then sleeps on its own
doorbell with a futex, so ranks oversubscribing a core do not starve each
other.  Every header read from the segment is checked against the receiving
buffer before a byte is written: a corrupt or hostile peer gets an error,
not an out-of-bounds write.
"""
from __future__ import annotations

import mmap
import os
import platform
import sys

import numpy as np

from . import _cma, _futex
from ._wire import rank0_settings
from .base import Capabilities, Transport, env_int
from .errors import mismatched, peer_notice
from .shm_regions import Regions
from .shm_segment import (ARRIVED, ARRIVED_KEY, DOORBELL, FAILED, MASK, NOTE_BYTES, NOTE_LEN,
                          SHM_DIR, SHM_PREFIX, SLEEPING, Channel, Layout, open_segment)
from .shm_slots import EAGER, EXTERNAL, MAX_MESSAGE_BYTES, RENDEZVOUS, ShmEndpoint

# The slot protocol orders its plain stores (data, header, then head) by the
# processor's own store order: x86-64 keeps stores in program order (TSO).
SUPPORTED_MACHINES = ("x86_64", "AMD64")


def supported() -> bool:
    return (sys.platform.startswith("linux") and platform.machine() in SUPPORTED_MACHINES
            and _futex.available)


# A rank with nothing to do looks at its doorbell this many times, yielding
# the core in between (about 0.6 us a look here), before it sleeps in the
# kernel: many where every rank of the job on this machine has a core of its
# own (a futex wake-up costs tens of microseconds, and a pipelined transfer
# waits on its peer at every chunk: at N = 2, 1 MiB broadcasts ran 5x and 4
# MiB gathers 1.5x faster with 2000 looks than with 20), few where ranks
# share cores (a looking rank holds the core its peer needs).
SPIN_OWN_CORES = 2000
SPIN_SHARED_CORES = 20


def ranks_on_this_machine(size: int) -> int:
    """The ranks of the job on this machine as the launcher tells them (MPICH's
    Hydra: MPI_LOCALNRANKS; Open MPI: OMPI_COMM_WORLD_LOCAL_SIZE), and at
    least the ``size`` ranks of this segment."""
    told = [os.environ.get(k, "") for k in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")]
    return max([size] + [int(v) for v in told if v.strip().isdigit()])


def default_spin(size: int) -> int:
    """COLLECTIVES_SPIN's default for a segment of ``size`` ranks."""
    cores = len(os.sched_getaffinity(0))
    return SPIN_OWN_CORES if ranks_on_this_machine(size) <= cores else SPIN_SHARED_CORES


def _settings() -> tuple[int, int, int, int, bool]:
    slot_bytes = env_int("COLLECTIVES_SHM_SLOT_BYTES", 256 * 1024)
    nslots = env_int("COLLECTIVES_SHM_SLOTS", 4)
    # the largest contribution that exchange() moves in one copy
    xchg_bytes = env_int("COLLECTIVES_SHM_XCHG_BYTES", 1024 * 1024)
    # off by default: on the 2-core VM this was measured on, process_vm_readv
    # was no faster than two slot copies (docs/performance.md)
    cma_bytes = env_int("COLLECTIVES_SHM_CMA_BYTES", 0)
    # the one-copy collectives (shm_direct), where the ranks may read each
    # other's memory; 0 turns them off (the staged algorithms, as without CMA)
    one_copy = env_int("COLLECTIVES_SHM_CMA", 1)
    if slot_bytes % 64 or slot_bytes <= 0:
        raise ValueError("COLLECTIVES_SHM_SLOT_BYTES must be a positive multiple of 64")
    if nslots < 1 or nslots & (nslots - 1):
        raise ValueError("COLLECTIVES_SHM_SLOTS must be a power of two")
    if xchg_bytes % 64 or xchg_bytes < 4096:
        raise ValueError("COLLECTIVES_SHM_XCHG_BYTES must be a multiple of 64, at least 4096")
    if one_copy not in (0, 1):
        raise ValueError("COLLECTIVES_SHM_CMA must be 0 or 1")
    return slot_bytes, nslots, xchg_bytes, max(0, cma_bytes), bool(one_copy)


class ShmTransport(Transport):
    name = "shm"
    endpoint_class: type = ShmEndpoint  # what coll and p2p are built as

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        if not supported():
            raise ValueError(f"transport='shm' needs an x86-64 Linux host (this is "
                             f"{platform.machine()}); use transport='mpi'")
        # rank 0's settings hold for all: the layout must be the same everywhere
        self.slot_bytes, self.nslots, self.xchg_bytes, cma_bytes, one_copy = \
            rank0_settings(mpicomm, _settings)
        # process_vm_readv between every pair, probed once (same user, no
        # ptrace restriction in the way), where anything would use it
        cma = bool(cma_bytes or one_copy) and _cma.works_between(mpicomm)
        # messages of cma_bytes and more go by rendezvous: the receiver copies
        # them straight out of the sender's buffer (one copy instead of two)
        self.cma_bytes = cma_bytes if cma else 0
        # the one-copy collectives (shm_direct) are offered; else the staged ones
        self.one_copy = one_copy and cma
        self.spin = env_int("COLLECTIVES_SPIN", default_spin(self.size))
        self.layout = Layout(self.size, self.nslots, self.slot_bytes, self.xchg_bytes)
        self.xchg_seq = 0
        self._xchg_cache: dict = {}
        self._mm: mmap.mmap = open_segment(mpicomm, self.layout.total)
        self.mem = np.frombuffer(self._mm, dtype=np.uint8)
        # scalar control words through memoryviews (plain loads and stores of
        # Python ints, cheaper than numpy scalars); numpy for slot headers
        self.u32 = memoryview(self._mm).cast("I")
        self.q64 = memoryview(self._mm).cast("q")
        self.addr = self.mem.ctypes.data
        lay = self.layout  # each rank's doorbell and first sleeping flag, as u32 indices
        self.bells = [lay.u32(r, DOORBELL) for r in range(self.size)]
        self.sleeping = [lay.u32(r, SLEEPING) for r in range(self.size)]
        self.others = [p for p in range(self.size) if p != self.rank]
        # every rank's arrival (collective, call size) and failure words, as i64 indices
        self.board = [(lay.i64(r, ARRIVED), lay.i64(r, ARRIVED_KEY)) for r in range(self.size)]
        self.failed = [lay.i64(r, FAILED) for r in range(self.size)]
        self.coll = self.endpoint_class(self, 0, strict=True)
        self.p2p = self.endpoint_class(self, 1, strict=False)
        # communicator-allocated arrays that every rank maps (shm_regions)
        self.regions = Regions(mpicomm, self.rank, self.size)
        self.caps = Capabilities(shared_exchange=True, one_copy=self.one_copy, regions=True)

    # -- regions ----------------------------------------------------------
    def mapped(self, peer: int, addr: int, nbytes: int) -> np.ndarray | None:
        """``nbytes`` at ``addr`` in rank ``peer``'s memory as a uint8 view in
        this process, where they lie in a live region of ``peer`` (which every
        rank maps); None: read them with process_vm_readv (shm_direct)."""
        return self.regions.mapped(peer, addr, nbytes)

    def locate(self, a) -> tuple[int, int] | None:
        """(region address, offset) where ``a`` lies in one of this rank's live
        regions; else None."""
        return self.regions.locate(a)

    # -- rank block -------------------------------------------------------
    def ring(self, peer: int) -> None:
        """Tell ``peer`` there is news: bump its doorbell, wake it if it sleeps."""
        i, s = self.bells[peer], self.sleeping[peer]
        u32 = self.u32
        u32[i] = (u32[i] + 1) & MASK
        if u32[s] or u32[s + 1]:  # the SLEEPING flag of coll (ctx 0) or of p2p (ctx 1)
            _futex.wake(self.addr + 4 * i)

    def set_arrived(self, seq: int, key: int = 0) -> None:
        # ARRIVED is 0 while the call size changes: a peer that reads the same
        # sequence number before and after it has read that call's size
        q, (a, k) = self.q64, self.board[self.rank]
        q[a] = 0
        q[k] = key
        q[a] = seq

    def arrived(self, r: int) -> int:
        return self.q64[self.board[r][0]]

    # -- the failure path ---------------------------------------------------
    def notify(self, seq: int, text: str) -> None:
        """Write this rank's note, then its failure word, and ring every peer."""
        note = text.encode()[:NOTE_BYTES]
        at = self.layout.note(self.rank)
        self.mem[at:at + len(note)] = np.frombuffer(note, np.uint8)
        me = self.layout.i64(self.rank, NOTE_LEN)
        self.q64[me] = len(note)
        self.q64[self.failed[self.rank]] = seq
        for p in self.others:
            self.ring(p)

    def watch(self, seq: int) -> None:
        """Raise what a peer's rank block says about collective ``seq``: its
        note, where it gave up this call or an earlier one; ``mismatched``,
        where it has entered this call with another call size than this
        rank's (as published: debug mode publishes UNCHECKED everywhere)."""
        q = self.q64
        key = q[self.board[self.rank][1]]
        for p in self.others:
            f = q[self.failed[p]]
            if 0 < f <= seq:
                n = max(0, min(q[self.layout.i64(p, NOTE_LEN)], NOTE_BYTES))
                at = self.layout.note(p)
                raise peer_notice(p, bytes(self.mem[at:at + n]).decode("utf-8", "replace"))
        for p in self.others:
            a, k = self.board[p]
            if q[a] != seq:
                continue
            theirs = q[k]
            if theirs != key and q[a] == seq:  # still that call: its size
                raise mismatched(p, seq, theirs, self.rank, key)

    def xchg_views(self, seq: int, dtype: np.dtype, nbytes: int) -> list[np.ndarray]:
        """Every rank's exchange buffer for call ``seq``, as ``nbytes`` of ``dtype``."""
        key = (seq & 1, dtype, nbytes)
        views = self._xchg_cache.get(key)
        if views is None:
            if len(self._xchg_cache) > 64:
                self._xchg_cache.clear()
            base = [self.layout.xchg(r, seq & 1) for r in range(self.size)]
            views = [self.mem[b:b + nbytes].view(dtype) for b in base]
            self._xchg_cache[key] = views
        return views

    def sleep(self, ctx: int, seen: int, timeout: float) -> None:
        """Sleep on this rank's doorbell; a wake-up lost to a race costs at most 2 ms."""
        flag = self.sleeping[self.rank] + ctx
        self.u32[flag] = 1
        _futex.wait(self.addr + 4 * self.bells[self.rank], seen, max(0.0, min(timeout, 0.002)))
        self.u32[flag] = 0

    def doorbell(self) -> int:
        return self.u32[self.bells[self.rank]]

    # -- channels ---------------------------------------------------------
    def channel(self, ctx: int, src: int, dst: int) -> Channel:
        return Channel(self.layout, self.mem, self.layout.channel(ctx, src, dst))

    def close(self) -> None:
        for ep in (self.coll, self.p2p):
            ep.release()
        self.regions.close()
        self._xchg_cache.clear()
        for mv in (self.u32, self.q64):
            mv.release()
        self.mem = self.u32 = self.q64 = None
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass  # a view is still alive somewhere; the mapping goes with it


__all__ = ["ShmTransport", "ShmEndpoint", "supported", "rank0_settings", "open_segment",
           "SHM_DIR", "SHM_PREFIX", "EAGER", "RENDEZVOUS", "EXTERNAL", "MASK",
           "MAX_MESSAGE_BYTES", "SUPPORTED_MACHINES"]
