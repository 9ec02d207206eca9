"""The hierarchical transport: shared memory within each host, MPI between hosts.

Three transports in one, each over an MPI communicator of its own:

* ``local``: a shared-memory transport (shm) over the ranks of this host;
* ``cross``: an MPI transport over the ranks with this rank's local rank, one
  per host, ordered by host (local rank 0's is the hosts' leaders);
* ``flat``: an MPI transport over every rank, which carries the user's
  ``send``/``recv`` and the flat algorithms (every algorithm written for one
  endpoint runs unchanged on ``coll``, whose messages go through it).

The hierarchical algorithms (collectives/hierarchical.py) take ``coll.local`` and
``coll.cross`` and compose them.  The Communicator sets a call's tag, call
size and name on ``coll``; ``coll`` passes them to the endpoints of all three,
so per-call tags, timeouts and mismatch detection hold in every part.  A rank
that gives up a call tells every rank through ``flat``'s notices, which the
``cross`` transport shares, and the ranks of its host through the segment;
the shm transport of a host also looks at ``flat``'s notices while it waits,
so a failure on another host reaches a rank whatever part it waits in.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .base import Capabilities, Endpoint, Reducer, Request, Transport
from .errors import CollectiveError, renumber
from .hosts import Hosts
from .mpi import MpiTransport
from .shm import ShmTransport


# How much longer than the timeout a rank waits on live ranks of its own
# host.  Those are in the same call, so they wait on another host
# themselves: when one gives up, the others hear it (naming the ranks of the
# host that stopped) instead of timing out at the same moment, naming a
# live rank of their own host.  The shared-memory part waits that much
# longer always (every peer there is of this host); the flat part where the
# ranks it waits for include one of this host.
LOCAL_GRACE_S = 10.0


def grace(timeout: float) -> float:
    return min(LOCAL_GRACE_S, timeout)


def local_timeout(timeout: float) -> float:
    """The timeout of a host's shared-memory part."""
    return timeout + grace(timeout)


class _HostShm(ShmTransport):
    """The shm transport of one host, which also hears notices from other hosts."""

    remote_notices = None  # flat's Notices (set by HierTransport)

    def watch(self, seq: int) -> None:
        super().watch(seq)
        if self.remote_notices is not None:
            self.remote_notices.check(seq)


class HierEndpoint(Endpoint):
    """The collective endpoint of a hierarchical transport: messages between
    any two ranks go through ``flat``; ``local`` and ``cross`` are the parts
    the hierarchical algorithms use; ``hosts`` says where every rank is."""

    xchg_bytes = 0  # exchange() is messages (through flat)

    def __init__(self, flat: Endpoint, local: Endpoint, cross: Endpoint, hosts: Hosts):
        self.flat, self.local, self.cross, self.hosts = flat, local, cross, hosts
        self.parts = (flat, local, cross)
        self.rank, self.size = flat.rank, flat.size
        h = hosts
        # the ranks of each host, and for each local rank l the hosts that have
        # one (the members of local rank l's cross communicator, in its order)
        self.members = [h.members(x) for x in range(h.hosts)]
        most = max(len(m) for m in self.members)
        self.cross_hosts = [[x for x in range(h.hosts) if len(self.members[x]) > l]
                            for l in range(most)]

    # the call in progress, on every part
    def _set(self, name: str, value) -> None:
        for ep in self.parts:
            setattr(ep, name, value)

    tag = property(lambda self: self.flat.tag, lambda self, v: self._set("tag", v))
    call_bytes = property(lambda self: self.flat.call_bytes,
                          lambda self, v: self._set("call_bytes", v))
    what = property(lambda self: self.flat.what, lambda self, v: self._set("what", v))

    def begin(self, tag: int, call_bytes: int, what: str) -> None:
        for ep in self.parts:
            ep.tag, ep.call_bytes, ep.what = tag, call_bytes, what

    def _sum(self, name: str) -> int:
        return sum(getattr(ep, name) for ep in self.parts)

    sent_bytes = property(lambda self: self._sum("sent_bytes"))
    recv_bytes = property(lambda self: self._sum("recv_bytes"))
    inter_sent_bytes = property(lambda self: self._sum("inter_sent_bytes"))
    inter_recv_bytes = property(lambda self: self._sum("inter_recv_bytes"))

    def isend(self, buf: np.ndarray, peer: int, tag: int | None = None) -> Request:
        return self.flat.isend(buf, peer, tag)

    def irecv(self, out: np.ndarray, peer: int, tag: int | None = None) -> Request:
        return self.flat.irecv(out, peer, tag)

    def irecv_reduce(self, acc: np.ndarray, peer: int, op: Reducer,
                     tag: int | None = None, src: np.ndarray | None = None) -> Request:
        return self.flat.irecv_reduce(acc, peer, op, tag, src)

    def waitall(self, reqs: Iterable[Request]) -> None:
        self.flat.waitall(reqs)

    def sendrecv(self, sbuf: np.ndarray, dst: int, rbuf: np.ndarray, src: int) -> None:
        self.flat.sendrecv(sbuf, dst, rbuf, src)

    def sendrecv_reduce(self, sbuf: np.ndarray, dst: int, acc: np.ndarray, src: int,
                        op: Reducer) -> None:
        self.flat.sendrecv_reduce(sbuf, dst, acc, src, op)

    def steps(self, plan, src: np.ndarray, buf: np.ndarray, reducer, op: Reducer,
              unit: int = 0, dst: np.ndarray | None = None) -> bool:
        return self.flat.steps(plan, src, buf, reducer, op, unit, dst)


class HierTransport(Transport):
    name = "hier"
    # a death found in any part is told to every rank (its parts' errors name
    # the whole communicator's ranks: collectives/hierarchical.py, _on)
    caps = Capabilities(hier=True, relays_deaths=True, relays_timeouts=True)

    def __init__(self, mpicomm, timeout: float, hosts: Hosts):
        pids, local = list(hosts.pids), list(hosts.local)
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        self._comms: list = []
        self._parts: list[Transport] = []
        try:
            self.flat = self._add(MpiTransport(mpicomm, timeout, pids, local))
            self.flat.grace = grace(timeout)
            mine = hosts.members(hosts.host)
            here = self._split(mpicomm, hosts.host, self.rank)
            self.local = self._add(_HostShm(here, local_timeout(timeout),
                                            [pids[r] for r in mine],
                                            [local[r] for r in mine]))
            self.local.remote_notices = self.flat.notices
            across = self._split(mpicomm, hosts.local_rank, hosts.host)
            ranks = [hosts.members(x)[hosts.local_rank] for x in range(hosts.hosts)
                     if hosts.local_rank < hosts.host_of.count(x)]
            self.cross = self._add(MpiTransport(across, timeout, [pids[r] for r in ranks],
                                                [local[r] for r in ranks]))
            # every member of cross is on a host of its own
            self.cross.place(Hosts(across.Get_rank(), tuple(range(len(ranks))),
                                   tuple(pids[r] for r in ranks), tuple(local[r] for r in ranks)))
            self.cross.notices.free()  # collective on cross: every rank is here
            self.cross.notices = self.flat.notices
            self.flat.notices.whole = True
        except BaseException:
            self.close()
            raise
        self.liveness = self.flat.liveness

        def told_here(seq: int) -> None:
            try:
                self.local.seg.told(seq)
            except CollectiveError as e:
                raise renumber(e, mine, hosts.host_of, hosts.names)
        self.flat.told_here = self.cross.told_here = told_here
        # each part's ranks as the whole communicator numbers them, for errors
        for part, world in ((self.local, mine), (self.cross, ranks)):
            part.coll.world, part.coll.world_hosts = tuple(world), (hosts.host_of, hosts.names)
        self.coll = HierEndpoint(self.flat.coll, self.local.coll, self.cross.coll, hosts)
        self.p2p = self.flat.p2p

    def _split(self, mpicomm, color: int, key: int):
        c = mpicomm.Split(color, key)
        self._comms.append(c)
        return c

    def _add(self, t: Transport) -> Transport:
        self._parts.append(t)
        return t

    def place(self, hosts: Hosts) -> None:
        super().place(hosts)
        if getattr(self, "_parts", None):  # not while Transport.__init__ places the default
            self.flat.place(hosts)

    def set_arrived(self, seq: int, call_bytes: int = 0) -> None:
        self.local.set_arrived(seq, call_bytes)
        self.flat.set_arrived(seq, call_bytes)

    def arrival_board(self):
        return self.local.arrival_board()  # flat's: none (mpi)

    def unclaimed(self, seq: int) -> None:
        self.local.unclaimed(seq)
        self.flat.unclaimed(seq)

    def left_over(self) -> None:
        self.flat.left_over()

    def name_hosts(self, e) -> None:
        # an error of a part is in the whole communicator's ranks already
        # (collectives/hierarchical.py), flat's numbering is the whole's
        renumber(e, range(self.size), self.hosts.host_of, self.hosts.names)

    def notify(self, seq: int, text: str, skip=()) -> None:
        # the segment first: there the word is written at once, while MPI
        # delivers a notice only as the ranks progress
        self.local.notify(seq, text)
        self.flat.notify(seq, text, skip)

    def close(self) -> None:
        # cross shares flat's notices: flat frees them (a second free is a no-op)
        for t in reversed(self._parts):
            t.broken = t.broken or self.broken
            t.close()
        for c in self._comms:
            try:
                c.Free()
            except Exception:
                pass
        self._parts, self._comms = [], []
