"""MPI point-to-point transport (mpi4py, buffer-based; data is never pickled).

Each endpoint owns a duplicate of the communicator's MPI communicator, so
collectives and the user's messages never match each other's receives.
Waits poll ``Test`` on each pending request, yielding the core between polls
and backing off to short sleeps when nothing moves, so that a deadline and
the liveness of local peers can be checked.  One lock per process
serialises the MPI calls of the collective workers and the caller's thread,
so a library that grants less than MPI_THREAD_MULTIPLE is safe too.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Iterable

import numpy as np
from mpi4py import MPI

from .base import TAG_UB, Deadline, Endpoint, Reducer, Request, Transport, as_bytes
from .errors import CollectiveError, PeerFailure

# a wait polls this many times, yielding the core, then naps between polls,
# doubling from 20 us up to _NAP_MAX seconds
_POLLS = 64
_NAP_MAX = 0.001
_MPI_LOCK = threading.Lock()  # one per process: every communicator's worker shares it


class MpiTransport(Transport):
    name = "mpi"

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        self.lock = _MPI_LOCK
        self.coll = MpiEndpoint(self, mpicomm.Dup(), "collective")
        self.p2p = MpiEndpoint(self, mpicomm.Dup(), "send/recv")

    def close(self) -> None:
        for ep in (self.coll, self.p2p):
            ep.free()


class _Req(Request):
    __slots__ = ("ep", "mpi", "peer", "nbytes", "sending", "acc", "op", "scratch", "finished")

    def __init__(self, ep, mpi_req, peer, nbytes, sending, acc=None, op=None, scratch=None):
        self.ep, self.mpi, self.peer, self.nbytes = ep, mpi_req, peer, nbytes
        self.sending, self.acc, self.op, self.scratch = sending, acc, op, scratch
        self.finished = False

    def test(self) -> bool:
        """Complete the request if MPI has: check the size, reduce, count."""
        if self.finished:
            return True
        ep = self.ep
        status = MPI.Status()
        try:
            with ep.t.lock:
                ok = self.mpi.Test(status)
        except MPI.Exception as e:
            raise ep.failed(self.peer, e) from None
        if not ok:
            return False
        self.finished = True
        if self.sending:
            ep.sent_bytes += self.nbytes
            return True
        got = status.Get_count(MPI.BYTE)
        if got != self.nbytes:
            raise CollectiveError(f"rank {self.peer} sent {got} bytes where rank {ep.rank} "
                                  f"expects {self.nbytes}", ranks=[self.peer])
        ep.recv_bytes += self.nbytes
        if self.op is not None:
            self.op(self.acc, self.scratch, out=self.acc)
            ep.give_back(self.scratch)
        return True

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.test()


class MpiEndpoint(Endpoint):
    def __init__(self, t: MpiTransport, comm, what: str):
        self.t, self.comm, self.what = t, comm, what
        self.rank, self.size = t.rank, t.size
        self._pool: list[np.ndarray] = []  # receive-and-reduce buffers to reuse

    def free(self) -> None:
        if self.comm != MPI.COMM_NULL:  # collective in MPI: every rank closes
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

    def _post(self, start, buf, peer, tag, sending, acc=None, op=None) -> Request:
        self._check_peer(peer)
        b = as_bytes(buf)
        with self.t.lock:
            req = start([b, MPI.BYTE], peer, self._tag(tag))
        return _Req(self, req, peer, b.nbytes, sending, acc, op, buf)

    def isend(self, buf, peer, tag=None) -> Request:
        return self._post(self.comm.Isend, buf, peer, tag, True)

    def irecv(self, out, peer, tag=None) -> Request:
        return self._post(self.comm.Irecv, out, peer, tag, False)

    def irecv_reduce(self, acc, peer, op: Reducer, tag=None) -> Request:
        acc = acc.reshape(-1)
        return self._post(self.comm.Irecv, self._scratch(acc), peer, tag, False, acc, op)

    def _scratch(self, like: np.ndarray) -> np.ndarray:
        """A receive buffer shaped like ``like``, from the pool of earlier ones:
        a fresh one each time would cost a page fault per 4 KiB."""
        nb = like.nbytes
        for i, b in enumerate(self._pool):
            if b.nbytes >= nb:
                del self._pool[i]
                return b[:nb].view(like.dtype)
        return np.empty(max(nb, 64), np.uint8)[:nb].view(like.dtype)

    def give_back(self, scratch: np.ndarray) -> None:
        base = scratch
        while base.base is not None:
            base = base.base
        if len(self._pool) < 4:
            self._pool.append(base)
        else:  # keep the largest
            self._pool.sort(key=lambda b: b.nbytes)
            if base.nbytes > self._pool[0].nbytes:
                self._pool[0] = base

    def failed(self, peer: int, e: Exception) -> CollectiveError:
        for _ in range(50):  # a peer that is dying may take a moment to be gone
            if self.t.liveness.dead([peer]):
                return PeerFailure(f"rank(s) [{peer}] died during {self.what}", ranks=[peer])
            time.sleep(0.01)
        return CollectiveError(f"message from rank {peer} failed: {e}", ranks=[peer])

    def waitall(self, reqs: Iterable[Request]) -> None:
        pending = [r for r in reqs if not r.finished]
        dl = Deadline(self.t.timeout, self.t.rank)
        polls, nap = 0, 0.0
        while pending:
            still = [r for r in pending if not r.test()]
            if not still:
                return
            if len(still) < len(pending):
                dl.progress()
                polls, nap = 0, 0.0
                pending = still
                continue
            polls += 1
            if polls < _POLLS:
                os.sched_yield()
                continue
            peers = sorted({r.peer for r in pending})
            dl.check(self.t.liveness, lambda: peers, lambda: peers, self.what)
            nap = min(_NAP_MAX, nap * 2 or 2e-5)
            time.sleep(nap)
