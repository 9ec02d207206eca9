"""The shared-memory transport: the segment, its two endpoints and the
communicator-allocated regions, assembled (the package's docstring says
what each part does).  A transport built on this one (cuda) supplies its
own endpoints through ``make_endpoint``."""
from __future__ import annotations

import platform
import sys

import numpy as np

from .. import _wire
from ..base import Capabilities, Transport, env_int
from . import _cma, _futex
from .regions import Regions
from .segment import Layout, Segment, open_segment
from .settings import Settings, default_spin, from_env
from .slots import ShmEndpoint

# The slot protocol orders its plain stores (data, header, then head) by the
# processor's own store order: x86-64 keeps stores in program order (TSO).
SUPPORTED_MACHINES = ("x86_64", "AMD64")


def supported() -> bool:
    return (sys.platform.startswith("linux") and platform.machine() in SUPPORTED_MACHINES
            and _futex.available)


class ShmTransport(Transport):
    name = "shm"

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        if not supported():
            raise ValueError(f"transport='shm' needs an x86-64 Linux host (this is "
                             f"{platform.machine()}); use transport='mpi'")
        # rank 0's settings hold for all: the layout must be the same everywhere
        slot_bytes, nslots, xchg_bytes, cma_bytes, one_copy = \
            _wire.rank0_settings(mpicomm, from_env)
        # process_vm_readv between every pair, probed once (same user, no
        # ptrace restriction in the way), where anything would use it
        cma = bool(cma_bytes or one_copy) and _cma.works_between(mpicomm)
        self.settings = Settings(
            slot_bytes, nslots, xchg_bytes,
            # messages of cma_bytes and more go by rendezvous: the receiver
            # copies them straight out of the sender's buffer (one copy, not two)
            cma_bytes=cma_bytes if cma else 0,
            # the one-copy collectives (one_copy.py) are offered; else the staged ones
            one_copy=one_copy and cma,
            spin=env_int("COLLECTIVES_SPIN", default_spin(self.size)))
        self.slot_bytes, self.nslots, self.xchg_bytes = slot_bytes, nslots, xchg_bytes
        layout = Layout(self.size, nslots, slot_bytes, xchg_bytes)
        self.seg = Segment(open_segment(mpicomm, layout.total), layout, self.rank)
        # communicator-allocated arrays that every rank maps (regions.py)
        self.regions = Regions(mpicomm, self.rank, self.size)
        self.coll = self.make_endpoint(0, strict=True)
        self.p2p = self.make_endpoint(1, strict=False)
        self.caps = Capabilities(shared_exchange=True, one_copy=self.settings.one_copy,
                                 regions=True)

    def make_endpoint(self, ctx: int, strict: bool) -> ShmEndpoint:
        """Endpoint ``ctx`` (coll 0, strict; p2p 1) on this transport's segment."""
        return ShmEndpoint(self.seg, ctx, strict, self.settings, self.liveness, self.timeout,
                           watch=self.watch, regions=self.regions)

    # -- regions ----------------------------------------------------------
    def mapped(self, peer: int, addr: int, nbytes: int) -> np.ndarray | None:
        """``nbytes`` at ``addr`` in rank ``peer``'s memory as a uint8 view in
        this process, where they lie in a live region of ``peer`` (which every
        rank maps); None: read them with process_vm_readv (one_copy.py)."""
        return self.regions.mapped(peer, addr, nbytes)

    def locate(self, a) -> tuple[int, int] | None:
        """(region address, offset) where ``a`` lies in one of this rank's live
        regions; else None."""
        return self.regions.locate(a)

    # -- the rank block (the segment's) -------------------------------------
    def set_arrived(self, seq: int, call_bytes: int = 0) -> None:
        self.seg.set_arrived(seq, call_bytes)

    def arrival_board(self):
        a, k = self.seg.board[self.rank]
        return self.seg.q64, a, k

    def arrived(self, r: int) -> int:
        return self.seg.arrived(r)

    def notify(self, seq: int, text: str, skip=()) -> None:
        self.seg.notify(seq, text)  # a note in the segment: no message to anyone

    def unclaimed(self, seq: int) -> None:
        self.coll.unclaimed(seq)

    def watch(self, seq: int) -> None:
        """Raise what a peer's rank block says about collective ``seq``
        (``Segment.watch``), and a peer's message here that no call will take
        (``unclaimed``); the coll endpoint's waits call it."""
        self.seg.watch(seq)
        self.coll.unclaimed(seq)

    def close(self) -> None:
        for ep in (self.coll, self.p2p):
            ep.release()
        self.regions.close()
        self.seg.close()


__all__ = ["ShmTransport", "supported", "SUPPORTED_MACHINES"]
