"""MPI point-to-point transport (mpi4py, buffer-based; data is never pickled).

Each endpoint owns a duplicate of the communicator's MPI communicator, so
collectives and the user's messages never match each other's receives.
Waits poll ``Testall``, yielding the core between polls and backing off to
short sleeps when nothing moves, so that a deadline and the liveness of
local peers can be checked.
"""
from __future__ import annotations

import os
import time
from typing import Iterable

import numpy as np
from mpi4py import MPI

from .base import Deadline, Endpoint, Reducer, Request, Transport
from .errors import CollectiveError, PeerFailure

TAG_UB = 32767  # the least upper bound on tags that MPI guarantees


class MpiTransport(Transport):
    name = "mpi"

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        self.coll = MpiEndpoint(self, mpicomm.Dup(), "collective")
        self.p2p = MpiEndpoint(self, mpicomm.Dup(), "recv")

    def close(self) -> None:
        for ep in (self.coll, self.p2p):
            ep.free()


class _Req(Request):
    __slots__ = ("ep", "mpi", "peer", "nbytes", "sending", "acc", "op", "scratch", "finished")

    def __init__(self, ep, mpi_req, peer, nbytes, sending, acc=None, op=None, scratch=None):
        self.ep, self.mpi, self.peer, self.nbytes = ep, mpi_req, peer, nbytes
        self.sending, self.acc, self.op, self.scratch = sending, acc, op, scratch
        self.finished = False

    def complete(self) -> None:
        self.finished = True
        t = self.ep.t
        if self.sending:
            t.sent_bytes += self.nbytes
        else:
            t.recv_bytes += self.nbytes
            if self.op is not None:
                self.op(self.acc, self.scratch, out=self.acc)

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        if not self.finished and self.mpi.Test():
            self.complete()
        return self.finished


class MpiEndpoint(Endpoint):
    def __init__(self, t: MpiTransport, comm, what: str):
        self.t, self.comm, self.what = t, comm, what
        self.rank, self.size = t.rank, t.size

    def free(self) -> None:
        if self.comm != MPI.COMM_NULL:
            try:
                self.comm.Free()
            except MPI.Exception:
                pass
            self.comm = MPI.COMM_NULL

    def _tag(self, tag):
        return (self.tag if tag is None else tag) % (TAG_UB + 1)

    def _check_peer(self, peer: int) -> None:
        if not (0 <= peer < self.size) or peer == self.rank:
            raise ValueError(f"peer {peer} is not another rank of this communicator "
                             f"(size {self.size}, rank {self.rank})")

    def isend(self, buf, peer, tag=None) -> Request:
        self._check_peer(peer)
        b = buf.reshape(-1).view(np.uint8)
        return _Req(self, self.comm.Isend([b, MPI.BYTE], peer, self._tag(tag)), peer, b.nbytes, True)

    def irecv(self, out, peer, tag=None) -> Request:
        self._check_peer(peer)
        b = out.reshape(-1).view(np.uint8)
        return _Req(self, self.comm.Irecv([b, MPI.BYTE], peer, self._tag(tag)), peer, b.nbytes, False)

    def irecv_reduce(self, acc, peer, op: Reducer, tag=None) -> Request:
        self._check_peer(peer)
        acc = acc.reshape(-1)
        scratch = np.empty_like(acc)
        b = scratch.view(np.uint8)
        return _Req(self, self.comm.Irecv([b, MPI.BYTE], peer, self._tag(tag)), peer,
                    b.nbytes, False, acc, op, scratch)

    def _failed(self, peer: int, e: Exception) -> CollectiveError:
        for _ in range(50):  # a peer that is dying may take a moment to be gone
            if self.t.liveness.dead([peer]):
                return PeerFailure(f"rank(s) [{peer}] died during {self.what}", ranks=[peer])
            time.sleep(0.01)
        return CollectiveError(f"message from rank {peer} failed: {e}", ranks=[peer])

    def waitall(self, reqs: Iterable[Request]) -> None:
        pending = [r for r in reqs if not r.finished]
        if not pending:
            return
        dl = Deadline(self.t.timeout)
        polls, nap = 0, 0.0
        status = MPI.Status()
        while pending:
            still = []
            moved = False
            for r in pending:
                try:
                    ok = r.mpi.Test(status)
                except MPI.Exception as e:
                    raise self._failed(r.peer, e) from None
                if ok:
                    if not r.sending and status.Get_count(MPI.BYTE) != r.nbytes:
                        raise CollectiveError(
                            f"rank {r.peer} sent {status.Get_count(MPI.BYTE)} bytes where "
                            f"rank {self.rank} expects {r.nbytes}", ranks=[r.peer])
                    r.complete()
                    moved = True
                else:
                    still.append(r)
            pending = still
            if not pending:
                return
            if moved:
                dl.progress()
                polls, nap = 0, 0.0
                continue
            polls += 1
            if polls < 64:
                os.sched_yield()
                continue
            peers = sorted({r.peer for r in pending})
            dl.check(self.t.liveness, lambda: peers, lambda: peers, self.what)
            nap = min(0.001, nap * 2 or 2e-5)
            time.sleep(nap)
