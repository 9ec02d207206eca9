"""MPI point-to-point transport (mpi4py, buffer-based; data is never pickled).

Each endpoint owns a duplicate of the communicator's MPI communicator, so
collectives and the user's messages never match each other's receives; a
third duplicate carries the notices of the failure path (``Notices``).
Waits poll ``Test`` on each pending request, yielding the core between polls
and backing off to short sleeps when nothing moves, so that a deadline, the
liveness of local peers and the peers' notices can be checked.  One lock per
process serialises the MPI calls of the collective workers and the caller's
thread, so a library that grants less than MPI_THREAD_MULTIPLE is safe too.

A collective's MPI tag is its sequence number modulo 2**15 (``SEQ_BITS``)
and, above it where the MPI's ``TAG_UB`` leaves room, its call size modulo
a prime (``key_modulus``: 16381 under MPICH's 2**29 - 1): a rank whose call
moves a different number of bytes sends messages that no receive of its
peers matches, and the peers find them by probing (``MpiEndpoint._probe``).
Sizes that differ by a multiple of that prime, or an MPI with only the
guaranteed 32767, leave the tag the sequence number alone; then only a
message of a different size is caught (``status.Get_count``).
"""
from __future__ import annotations

import array
import os
import threading
import time
from collections import deque
from typing import Iterable

import numpy as np
from mpi4py import MPI

from . import _bounded, _swap, schedule
from .base import (TAG_UB, UNCHECKED, Capabilities, Deadline, Endpoint, Reducer, Request,
                   Transport, as_bytes)
from .errors import STRAY_CALLS, CollectiveError, PeerFailure, mismatched, peer_notice, stray

# a wait polls this many times, yielding the core, then naps between polls,
# doubling from 20 us up to _NAP_MAX seconds (a message that lands during a
# nap waits out the rest of it: at N = 4 on two cores, 1 ms naps left small
# gathers at 0.4-0.6 ms a call; performance.md, "Default algorithm choice")
_POLLS = 64
_STEPS_TMP = 64 * 1024  # messages of up to this many bytes take steps' own scratch
_NAP_MAX = 250e-6
_MPI_LOCK = threading.Lock()  # one per process: every communicator's worker shares it
SEQ_BITS = 15  # a collective's tag: the sequence number modulo 2**15 (TAG_UB + 1) ...
SEQ_MASK = (1 << SEQ_BITS) - 1  # ... and the call size's residue above it
NOTE_BYTES = 1024  # the longest text of a notice


def key_modulus(tag_ub: int) -> int:
    """The prime that call sizes are taken modulo in collective tags: the
    largest whose residues fit above the sequence number under ``tag_ub``;
    0 where none does (tags are then the sequence number alone)."""
    room = (tag_ub + 1) >> SEQ_BITS
    for p in range(room, 2, -1):
        if all(p % d for d in range(2, int(p ** 0.5) + 1)):
            return p
    return 0


def _proc_failed(e: Exception) -> bool:
    """Whether MPI error ``e`` says that a peer process failed (MPI 5's
    MPI_ERR_PROC_FAILED, Open MPI's ``--with-ft ulfm``)."""
    try:
        return e.Get_error_class() in _PROC_FAILED
    except (AttributeError, MPI.Exception):
        return False


# mpi4py gives a class that the MPI lacks MPI_ERR_UNKNOWN's value (MPICH has
# neither of these): that one says nothing of a failed process
_PROC_FAILED = {getattr(MPI, n) for n in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING")
                if hasattr(MPI, n)} - {MPI.ERR_UNKNOWN}


def failed_ranks(comm) -> set[int]:
    """The ranks of ``comm`` that MPI knows have failed (MPI 5's
    MPI_Comm_get_failed: Open MPI's ``--with-ft ulfm`` fills it in; elsewhere
    it is empty).  A send to such a rank can stall in MPI_Isend."""
    try:
        g = comm.Get_failed()
    except (AttributeError, NotImplementedError, MPI.Exception):
        return set()
    mine = comm.Get_group()
    try:
        return {r for r in MPI.Group.Translate_ranks(g, list(range(g.Get_size())), mine)
                if r != MPI.UNDEFINED}
    finally:
        g.Free()
        mine.Free()


# receives that _drain gave up on, and sends a failed call left behind, with
# the buffers MPI may still fill or read
_ABANDONED: list = []
# communicators kept, never freed, because a message may still be on its way
# to them: under Open MPI a message that reaches a rank after it freed the
# communicator is delivered into the next communicator that gets the same
# context id, and that communicator's own first message from the same
# sender then never matches (docs/mpi.md).  A context id held by any of
# its members is not given to a new communicator.
_KEPT: list = []


def mpi_reason(e: Exception) -> str:
    """An MPI error in one line: its class and the innermost cause of MPICH's
    error stack ("Other MPI error: process_vm_readv failed (errno 14)"),
    not the whole stack."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    kind = lines[0].split(", error stack")[0].rstrip(":, ")
    cause = lines[-1].split(": ", 1)[-1].strip() if len(lines) > 1 else ""
    return f"{kind}: {cause}" if cause and cause != kind else kind


def _iprobe_any(comm, tag: int, st) -> bool:
    """MPI_Iprobe from any source.  Where MPI refuses MPI_ANY_SOURCE because
    a process has failed (MPI_ERR_PROC_FAILED: Open MPI's fault-tolerant
    mode), each other rank in turn, the failed ones passed over."""
    try:
        return comm.Iprobe(MPI.ANY_SOURCE, tag, st)
    except MPI.Exception as e:
        if not _proc_failed(e):
            raise
    for p in range(comm.Get_size()):
        if p != comm.Get_rank():
            try:
                if comm.Iprobe(p, tag, st):
                    return True
            except MPI.Exception as e:
                if not _proc_failed(e):
                    raise
    return False


def _settled(req) -> bool:
    """Whether a notice's send has completed, or failed (its peer died, in
    Open MPI's fault-tolerant mode): a notice that cannot go is dropped."""
    try:
        return req.Test()
    except MPI.Exception:
        return True


def _drain(comm, patience: float = 0.2) -> None:
    """Receive and drop what is pending on ``comm`` before it is freed: MPICH
    reuses a freed communicator's context, and a message left over (by a
    failed call) would match a receive of the next communicator that gets
    it.  A message that does not come in within ``patience`` seconds (its
    sender died halfway) is left to MPI."""
    st, end = MPI.Status(), time.monotonic() + patience
    while _iprobe_any(comm, MPI.ANY_TAG, st):
        buf = np.empty(st.Get_count(MPI.BYTE), np.uint8)
        req = comm.Irecv([buf, MPI.BYTE], st.Get_source(), st.Get_tag())
        while not req.Test():
            if time.monotonic() > end:
                _ABANDONED.append((req, buf))
                return
            time.sleep(1e-4)


def _free(comm, lock, keep: bool = False):
    """Drain and free ``comm`` (collective in MPI: every rank closes), or with
    ``keep`` drain it and keep it for good (``_KEPT``); returns COMM_NULL,
    what the owner holds instead."""
    if comm != MPI.COMM_NULL:
        try:
            with lock:
                _drain(comm)
                if keep:
                    _KEPT.append(comm)
                else:
                    comm.Free()
        except MPI.Exception:
            pass
    return MPI.COMM_NULL


class MpiTransport(Transport):
    name = "mpi"
    caps = Capabilities(relays_deaths=True)  # waits watch the peers of their requests alone
    # seconds a wait that times out on live ranks of this host waits more
    # for their notice (hier's flat part: transports/hier.py)
    grace = 0.0
    # told_here(seq): raises the word of a rank of this host that gave up
    # collective seq, where it reaches this host's ranks by another way than
    # the notices (hier: its shared-memory part); a rank that gives up and
    # ends can go before MPI has delivered its notice
    told_here = None

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        self.lock = _MPI_LOCK
        # ranks on another machine (not an emulated host: MPI reaches a rank
        # of this machine through shared memory), whose sends are bounded
        self.elsewhere = [not x for x in local]
        self.elsewhere_bytes = bytes(self.elsewhere)  # the same for the compiled steps
        # MPI_TAG_UB is an attribute of MPI_COMM_WORLD (MPI 4.0, 8.1.2);
        # Open MPI does not copy it to a communicator made by a split
        tag_ub = mpicomm.Get_attr(MPI.TAG_UB) or MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or TAG_UB
        self.coll = MpiEndpoint(self, mpicomm.Dup(), "collective", key_modulus(tag_ub))
        self.p2p = MpiEndpoint(self, mpicomm.Dup(), "send/recv")
        self.notices = Notices(self, mpicomm, tag_ub)

    def notify(self, seq: int, text: str, skip=()) -> None:
        self.notices.send(seq, text, skip)

    def unclaimed(self, seq: int) -> None:
        self.notices.check(seq)
        if self.coll.modulus and self.coll.call_bytes != UNCHECKED:
            self.coll._probe()

    def left_over(self) -> None:
        """Before a close after calls that all returned: tell the sender of
        any message one of its calls left unreceived here (``strays``), so that
        a sender still waiting in that call raises instead of timing out."""
        if self.coll.modulus and self.coll.comm != MPI.COMM_NULL:
            for peer, call, words in self.coll.strays():
                others = [p for p in range(self.size) if p != peer]  # the sender alone
                self.notices.send(call, f"rank {self.rank} detected an error in collective "
                                        f"#{call}: {words}", skip=others)

    def set_arrived(self, seq: int, call_bytes: int = 0) -> None:
        if not seq & 63:  # a rank that never waits still takes its peers' arrivals
            self.notices.drain()

    def near(self, ranks: list[int]) -> bool:
        """Whether one of ``ranks`` is on this host and alive."""
        here = [r for r in ranks if not self.remote[r]]
        return bool(here) and len(self.liveness.dead(here)) < len(here)

    def close(self) -> None:
        # after a failure, or a notice sent, a peer's message (or this rank's)
        # may still be on its way: the communicators are kept (_KEPT)
        keep = self.broken or self.notices.told
        for ep in (self.coll, self.p2p, self.notices):
            ep.free(keep)


class Notices:
    """The failure path: a rank that gives up collective k on an error it
    detected sends every peer k (int64) and its text (UTF-8), as bytes, on a
    communicator of their own; a waiting rank receives them when it checks
    on its peers and raises the first that concerns its call or an earlier
    one.  Their tag is a random number that rank 0 draws for this
    communicator, so that a notice left over from a freed communicator
    (whose MPI context a later one may reuse) is never received.
    ``whole``: the ranks of this communicator are those of the whole one,
    also where a part shares these notices (hier's cross part shares flat's),
    so that its errors are not renumbered as the part's."""

    whole = False

    def __init__(self, t: MpiTransport, mpicomm, tag_ub: int):
        self.t = t
        tag = np.array([int.from_bytes(os.urandom(4), "little") % (tag_ub + 1)], np.int64)
        mpicomm.Bcast(tag, root=0)
        self.tag = int(tag[0])
        self.comm = mpicomm.Dup()
        self.sent: list = []  # (request, buffer) of each notice, never waited for
        self.told = False     # whether this rank sent a notice
        self.heard: dict[int, tuple[int, str]] = {}  # peer -> its first notice
        # arrivals: a collective that waits without progress says once which
        # call it is in and its call key (seq, key), on the next tag
        self.arrival_tag = (self.tag + 1) % (tag_ub + 1)
        self.arrived: dict[int, tuple[int, int]] = {}  # peer -> its latest arrival
        self.announced = 0  # the last collective whose arrival this rank sent

    def send(self, seq: int, text: str, skip=()) -> None:
        buf = np.frombuffer(int(seq).to_bytes(8, "little", signed=True)
                            + text.encode()[:NOTE_BYTES], np.uint8).copy()
        peers = [p for p in range(self.t.size) if p != self.t.rank and p not in skip]
        gone = set(self.t.liveness.dead(peers))  # on this machine, by process id
        with self.t.lock:
            gone |= failed_ranks(self.comm)  # on any host, where MPI tells
            self.told = True
            for p in peers:
                if p in gone:
                    continue
                # to another machine bounded, where a dead rank can refuse it for
                # good; a refused notice is dropped (that rank takes no message)
                try:
                    req = (_bounded.post(self.comm.Isend, [buf, MPI.BYTE], p, self.tag)
                           if self.t.elsewhere[p] and _bounded.active()
                           else self.comm.Isend([buf, MPI.BYTE], p, self.tag))
                except MPI.Exception:  # p failed (Open MPI's fault-tolerant mode)
                    continue
                if req is not None:
                    self.sent.append((req, buf))

    def check(self, seq: int) -> None:
        """Receive what has come; raise the notice of a peer that gave up
        collective ``seq`` or an earlier one."""
        st = MPI.Status()
        with self.t.lock:
            while _iprobe_any(self.comm, self.tag, st):
                n, src = st.Get_count(MPI.BYTE), st.Get_source()
                buf = np.empty(max(n, 8), np.uint8)
                if n > 8 + NOTE_BYTES:
                    raise CollectiveError(f"corrupt notice from rank {src}: {n} bytes",
                                          ranks=[src])
                self.comm.Recv([buf[:n], MPI.BYTE], src, self.tag)
                if n >= 8:
                    self.heard.setdefault(src, (int(buf[:8].view(np.int64)[0]),
                                                buf[8:n].tobytes().decode("utf-8", "replace")))
        for p in sorted(self.heard):
            failed, text = self.heard[p]
            if 0 < failed <= seq:
                e = peer_notice(p, text)
                e.renumbered = self.whole
                raise e

    def arrive(self, seq: int, key: int) -> None:
        """Tell every peer of this host, once per collective, that this rank waits in
        collective ``seq`` with call key ``key``: a peer that waits in the
        same call with another key (the ranks disagree on a root, say, and
        each waits for the other) then raises ``mismatched`` instead of
        timing out.  Sent only by a wait without progress (off the fast path)."""
        if self.announced == seq:
            return
        self.announced = seq
        buf = np.array([seq, key], np.int64)
        # the peers of this host that are alive: MPICH's tcp netmod can spin
        # in MPI_Isend to a dead rank, and a rank of another host may be one
        t = self.t
        near = [p for p in range(t.size) if p != t.rank and not t.remote[p]]
        gone = set(t.liveness.dead(near))
        with t.lock:
            for p in near:
                if p not in gone:
                    try:
                        self.sent.append((self.comm.Isend([buf, MPI.BYTE], p,
                                                          self.arrival_tag), buf))
                    except MPI.Exception:  # p failed: its wait's own checks see it
                        pass
        self._reap()

    def drain(self) -> None:
        """Receive the arrivals that have come (each a peer's latest)."""
        st, buf = MPI.Status(), np.empty(2, np.int64)
        with self.t.lock:
            while _iprobe_any(self.comm, self.arrival_tag, st):
                src = st.Get_source()
                if st.Get_count(MPI.BYTE) != 16:
                    raise CollectiveError(f"corrupt arrival from rank {src}", ranks=[src])
                self.comm.Recv([buf, MPI.BYTE], src, self.arrival_tag)
                self.arrived[src] = (int(buf[0]), int(buf[1]))

    def _reap(self) -> None:
        """Drop the sends that have completed (arrivals are sent often)."""
        if len(self.sent) > 64:
            with self.t.lock:
                self.sent = [(r, b) for r, b in self.sent if not _settled(r)]

    def free(self, keep: bool = False) -> None:
        self.comm = _free(self.comm, self.t.lock, keep)


def _wrong_size(peer: int, got: int, rank: int, nbytes: int) -> CollectiveError:
    return CollectiveError(f"rank {peer} sent {got} bytes where rank {rank} expects {nbytes}",
                           ranks=[peer])


class _Req(Request):
    __slots__ = ("ep", "mpi", "peer", "nbytes", "sending", "acc", "op", "src", "scratch",
                 "finished", "later")

    def __init__(self, ep, mpi_req, peer, nbytes, sending, acc=None, op=None, scratch=None):
        self.ep, self.mpi, self.peer, self.nbytes = ep, mpi_req, peer, nbytes
        self.sending, self.acc, self.op, self.scratch = sending, acc, op, scratch
        self.src = acc  # what the received bytes are reduced with (irecv_reduce's src)
        self.finished = False
        self.later = None  # a send that MPI refused: its Isend arguments, until posted

    def test(self) -> bool:
        """Complete the request if MPI has: check the size, reduce, count."""
        if self.finished:
            return True
        ep = self.ep
        if ep.queued:  # sends MPI refused, to any peer: every poll posts what it can
            ep.flush()
            if self.mpi is None:
                return False
        status = None if self.sending else ep.status  # read under the lock, at once
        try:
            with ep.t.lock:
                ok = self.mpi.Test(status)
                got = ok and status is not None and status.Get_count(MPI.BYTE)
        except MPI.Exception as e:
            raise ep.failed(self.peer, e) from None
        if not ok:
            return False
        self.finished = True
        ep.live.discard(self)
        if self.sending:
            ep.count_sent(self.peer, self.nbytes)
            return True
        if got != self.nbytes:
            raise _wrong_size(self.peer, got, ep.rank, self.nbytes)
        ep.count_received(self.peer, self.nbytes)
        if self.op is not None:
            self.op(self.src, self.scratch, out=self.acc)
            ep.give_back(self.scratch)
        return True

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.test()


class MpiEndpoint(Endpoint):
    """``modulus``: the coll endpoint's (``key_modulus``), 0 on p2p."""

    def __init__(self, t: MpiTransport, comm, what: str, modulus: int = 0):
        self.t, self.comm, self.what = t, comm, what
        self.rank, self.size = t.rank, t.size
        self.modulus = modulus
        self.coll = what == "collective"
        self._pool: list[np.ndarray] = []  # receive-and-reduce buffers to reuse
        self._tmp = np.empty(_STEPS_TMP, np.uint8)  # steps' scratch for small messages
        self._plan_counts: dict = {}  # steps' plan -> what it moves (_counts)
        self._bounded = None  # whether steps' sends to other machines are bounded
        # sends to another machine that MPI refused (``_bounded``), per peer in
        # the order posted: a later send to that peer waits behind them, so
        # that messages between two ranks keep their order
        self.queued: dict[int, deque] = {}
        self.refusals = 0  # how many posts MPI has refused
        self.status = MPI.Status()  # a receive's, filled and read under the lock
        # requests posted and not yet completed: a call that fails leaves some
        # behind, and MPI may still fill or read their buffers, so they stay
        # referenced here until free() settles them
        self.live: set = set()
        self.handle = MPI._handleof(comm)  # for the compiled send-receive (_swap)
        # the bytes of the compiled small calls (lane) not yet in the counters
        self.lane_counts = array.array("q", [0, 0, 0, 0])

    def free(self, keep: bool = False) -> None:
        self._settle()
        self.comm = _free(self.comm, self.t.lock, keep)

    def _settle(self) -> None:
        """Cancel the receives a failed call left posted, and keep whatever
        MPI may still touch alive for good: MPICH reuses a freed
        communicator's context, and a stale receive matched by a later
        communicator's message would write into freed memory."""
        with self.t.lock:
            for r in self.live:
                if r.mpi is None:  # a refused send: never posted
                    continue
                if not r.sending:
                    try:
                        r.mpi.Cancel()
                        r.mpi.Wait()
                        continue
                    except MPI.Exception:
                        pass
                _ABANDONED.append((r.mpi, r.scratch, r.acc))
        self.live.clear()
        self.queued.clear()

    def _tag(self, tag):
        if tag is not None:
            return tag % (TAG_UB + 1)
        if self.modulus:  # the call size's residue above the sequence number
            return (self.tag & SEQ_MASK) | (self.call_bytes % self.modulus) << SEQ_BITS
        return self.tag & SEQ_MASK

    def _check_peer(self, peer: int) -> None:
        if not (0 <= peer < self.size) or peer == self.rank:
            raise ValueError(f"peer {peer} is not another rank of this communicator "
                             f"(size {self.size}, rank {self.rank})")

    def _post(self, start, buf, peer, tag, sending, acc=None, op=None) -> Request:
        self._check_peer(peer)
        # a contiguous numpy array is its own bytes (MPI.BYTE counts them)
        b = buf if type(buf) is np.ndarray and buf.flags.c_contiguous else as_bytes(buf)
        if sending and self.t.elsewhere[peer] and _bounded.active():
            r = _Req(self, None, peer, b.nbytes, True, scratch=buf)
            r.later = ([b, MPI.BYTE], peer, self._tag(tag))
            q = self.queued.get(peer)
            if q is not None:
                q.append(r)
            elif not self._post_bounded(r):
                self.queued[peer] = deque([r])
        else:
            req = self._call(peer, start, [b, MPI.BYTE], peer, self._tag(tag))
            r = _Req(self, req, peer, b.nbytes, sending, acc, op, buf)
        self.live.add(r)
        return r

    def _post_bounded(self, r: _Req) -> bool:
        """Post send ``r`` to another machine with MPI's retries bounded
        (``_bounded``): False where MPI refused it (the peer's queue stayed
        full, as a dead rank's does), and it stays to be posted later."""
        r.mpi = self._call(r.peer, _bounded.post, self.comm.Isend, *r.later)
        if r.mpi is None:
            self.refusals += 1
            return False
        r.later = None
        return True

    def flush(self) -> None:
        """Post the sends that MPI refused, to each peer in order up to the
        first that it refuses again.  Every poll of a request of this
        endpoint does (a rank that waits for a message from A may owe one
        to B, which waits for it)."""
        for peer, q in list(self.queued.items()):
            while q and self._post_bounded(q[0]):
                q.popleft()
            if not q:
                del self.queued[peer]

    def isend(self, buf, peer, tag=None) -> Request:
        return self._post(self.comm.Isend, buf, peer, tag, True)

    def irecv(self, out, peer, tag=None) -> Request:
        return self._post(self.comm.Irecv, out, peer, tag, False)

    def irecv_reduce(self, acc, peer, op: Reducer, tag=None, src=None) -> Request:
        acc = acc.reshape(-1)
        r = self._post(self.comm.Irecv, self._scratch(acc), peer, tag, False, acc, op)
        if src is not None:
            r.src = src.reshape(-1)
        return r

    def sendrecv(self, sbuf: np.ndarray, dst: int, rbuf: np.ndarray, src: int) -> None:
        """Posted and polled in one compiled call (``_swap``) where it can
        be; a late peer's requests go on to ``waitall`` as any others."""
        swap = _swap.swap(sbuf, rbuf)
        if swap is None or self.queued:
            return Endpoint.sendrecv(self, sbuf, dst, rbuf, src)
        self._check_peer(dst)
        self._check_peer(src)
        t = self.t
        with t.lock:
            res = swap(sbuf, dst, rbuf, src, self._tag(None), self.handle, _POLLS,
                       t.elsewhere[dst] and _bounded.active())
        if res is None:
            self.count_sent(dst, sbuf.nbytes)
            self.count_received(src, rbuf.nbytes)
            return None
        return self.waitall(self._swapped(res, sbuf, dst, rbuf, src))

    def _swapped(self, res, sbuf, dst, rbuf, src) -> list:
        """What a compiled send-receive that did not finish leaves: the
        counts of what is done, and the requests of what is not (a send that
        MPI refused is posted as ``isend`` does).  ``sbuf`` or ``rbuf`` is
        None for a step of ``steps`` without that message."""
        state, sh, rh, got, on_send = res
        reqs = []
        for h, peer, buf, sending in ((rh, src, rbuf, False), (sh, dst, sbuf, True)):
            if h:
                r = _Req(self, MPI.Request.fromhandle(h), peer, buf.nbytes, sending, scratch=buf)
                self.live.add(r)
                reqs.append(r)
        if state == _swap.FAILED:
            raise self.failed(dst if on_send else src, MPI.Exception(got))
        if not rh and rbuf is not None:
            if got != rbuf.nbytes:
                raise _wrong_size(src, got, self.rank, rbuf.nbytes)
            self.count_received(src, got)
        if state == _swap.REFUSED:
            reqs.append(self._post(self.comm.Isend, sbuf, dst, None, True))
        elif not sh and sbuf is not None:
            self.count_sent(dst, sbuf.nbytes)
        return reqs

    def steps(self, plan, src: np.ndarray, buf: np.ndarray, reducer, op: Reducer,
              unit: int = 0, dst: np.ndarray | None = None) -> bool:
        """Run ``plan`` (``schedule.Plan``) on ``buf`` in one compiled call
        (``mpi_steps``, transports/_native.c), whose copy steps take
        ``src`` and whose out steps fill ``dst``, a plan's unit being ``unit`` elements of ``buf`` (0: the
        whole buffer), its reductions by
        ``reducer`` (a kernel's capsule, transports/native_api.h; ``op`` is
        the same in Python).  A late peer's step goes on to ``waitall`` as
        any other.  False where the call does not take these buffers:
        nothing has moved."""
        run = (_swap._state or _swap._bound())[1]
        if (run is None or (reducer is None and plan.reduces) or self.queued
                or type(buf) is not np.ndarray or type(src) is not np.ndarray):
            return False
        t, nb = self.t, buf.nbytes
        ub = unit * buf.itemsize if unit else nb
        small = nb <= _STEPS_TMP  # the C call takes a larger scratch
        tmp = self._tmp if small else self._scratch(buf)
        tag = self._tag(None)
        bounded = self._bounds()
        try:
            with t.lock:
                res = run(reducer, plan.packed, src, buf, tmp, 0, tag, self.handle, _POLLS,
                          t.elsewhere_bytes, bounded, ub, dst)
        except (BufferError, ValueError):  # not C-contiguous, read-only, 2 GiB: nothing moved
            if not small:
                self.give_back(tmp)
            return False
        if res is None:  # most calls: every step done, counted at once
            sent, inter_sent, got, inter_got = self._plan_count(plan)
            self.sent_bytes += sent * ub
            self.inter_sent_bytes += inter_sent * ub
            self.recv_bytes += got * ub
            self.inter_recv_bytes += inter_got * ub
        else:
            self._late_steps(run, plan, res, src, buf, tmp, reducer, op, tag, bounded, ub, dst)
        if not small:
            self.give_back(tmp)
        return True

    def lane(self, plan, scratch, reducer, ub: int, key: int, seqs, cells, run: int, board,
             xbytes: int, dtype: np.dtype, oshape: tuple, inplace_at: int = -1):
        """A small call's compiled steps (transports/_native.c, ``lane_new``,
        run by ``mpi_lane``): ``plan`` from an x of ``xbytes`` into an
        output of ``oshape`` and ``dtype``, in units of ``ub`` bytes, through
        ``scratch`` (None: in the output itself), reduced by the kernel
        ``reducer``; ``key`` the call key, ``seqs``, ``cells``, ``run``,
        ``board`` the words that its calls read and move on (see there);
        ``inplace_at``: the byte offset in the output at which x may lie
        (an all_gather in place), else -1.
        None where the compiled steps are not bound, or MPI is not
        thread-multiple (a compiled call does not take the lock)."""
        state = _swap._state or _swap._bound()
        if len(state) < 3 or state[2] is None or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            return None
        sent, inter_sent, got, inter_got = self._plan_count(plan)
        bounded = self._bounds()
        arr, a, k = board or (None, 0, 0)
        keytag = (key % self.modulus) << SEQ_BITS if self.modulus else 0
        return state[2](seqs, cells, self.lane_counts, arr, a, k, plan.packed,
                        scratch, self._tmp, reducer, self.handle, _POLLS, self.t.elsewhere_bytes,
                        bounded, ub, run, key, keytag, SEQ_MASK, xbytes, dtype, tuple(oshape),
                        lambda: np.empty(oshape, dtype),
                        (sent * ub, inter_sent * ub, got * ub, inter_got * ub), inplace_at)

    def late_lane(self, plan, res: tuple, src, buf, reducer, op, ub: int, dst) -> None:
        """Finish a compiled small call (``lane``) that stopped at step
        ``res[0]`` (``res``: as ``mpi_steps`` returns it), once ``begin``
        has set its tag."""
        self._late_steps(_swap._native.mpi_steps, plan, res, src, buf, self._tmp, reducer, op,
                         self._tag(None), self._bounds(), ub, dst)

    def flush_lanes(self) -> None:
        """Add the compiled small calls' bytes (``lane``) to the counters."""
        c = self.lane_counts
        if c[0] or c[2]:
            self.sent_bytes += c[0]
            self.inter_sent_bytes += c[1]
            self.recv_bytes += c[2]
            self.inter_recv_bytes += c[3]
            c[0] = c[1] = c[2] = c[3] = 0

    def _bounds(self) -> bool:
        """Whether steps' sends to other machines are bounded (found once)."""
        if self._bounded is None:
            self._bounded = True in self.t.elsewhere and _bounded.active()
        return self._bounded

    def _plan_count(self, plan) -> tuple:
        """``_counts`` of a plan's steps, found once per plan."""
        counts = self._plan_counts.get(plan)
        if counts is None:
            counts = self._plan_counts[plan] = self._counts(plan.steps)
        return counts

    def _counts(self, steps) -> tuple:
        """What a whole schedule of ``steps`` sends and receives, in its
        units: (sent, to another host, received, from one)."""
        remote = self.t.remote
        sends = [(s[1], s[4]) for s in steps if s[0] in schedule.SENDS]
        recvs = [(s[2], s[6]) for s in steps if s[0] in schedule.RECEIVES]
        return (sum(u for _, u in sends), sum(u for p, u in sends if remote[p]),
                sum(u for _, u in recvs), sum(u for p, u in recvs if remote[p]))

    def _late_steps(self, run, plan, res, src, buf, tmp, reducer, op, tag, bounded, ub,
                    dst) -> None:
        """Go on with ``steps`` after the compiled call stopped at a step
        (``res``): count the steps done, finish that one through ``waitall``
        (a late peer, a refused send, a failure, a wrong size), and call
        the rest again."""
        t, steps, start = self.t, plan.steps, 0
        e = ub // buf.itemsize  # elements a unit
        flat = buf.reshape(-1)
        work = tmp.view(np.uint8)[:flat.nbytes].view(buf.dtype)
        while True:
            end = len(steps) if res is None else res[0]
            for kind, to, fro, _, sl, _, rl in steps[start:end]:
                if kind in schedule.SENDS:
                    self.count_sent(to, sl * ub)
                if kind in schedule.RECEIVES:
                    self.count_received(fro, rl * ub)
            if res is None:
                return
            kind, to, fro, so, sl, ro, rl = steps[end]
            at = flat[ro * e:(ro + rl) * e]
            into = work[:rl * e] if kind in schedule.REDUCES else at
            self.waitall(self._swapped(res[1:], flat[so * e:(so + sl) * e] if kind in schedule.SENDS
                                       else None, to,
                                       None if kind == schedule.SEND else into, fro))
            if kind in schedule.REDUCES:
                with np.errstate(all="ignore"):  # an overflow to inf is a result
                    op(at, into, out=at)
            start = end + 1
            with t.lock:
                res = run(reducer, plan.packed, src, buf, tmp, start, tag, self.handle, _POLLS,
                          t.elsewhere_bytes, bounded, ub, dst)

    def count_sent(self, peer: int, nbytes: int) -> None:
        """Count a completed send to ``peer`` (and to another host, where it is)."""
        self.sent_bytes += nbytes
        if self.t.remote[peer]:
            self.inter_sent_bytes += nbytes

    def count_received(self, peer: int, nbytes: int) -> None:
        """Count a completed receive from ``peer``."""
        self.recv_bytes += nbytes
        if self.t.remote[peer]:
            self.inter_recv_bytes += nbytes

    def sendrecv_reduce(self, sbuf: np.ndarray, dst: int, acc: np.ndarray, src: int,
                        op: Reducer) -> None:
        if _swap.swap(sbuf, acc) is None:
            return Endpoint.sendrecv_reduce(self, sbuf, dst, acc, src, op)
        acc = acc.reshape(-1)
        scratch = self._scratch(acc)
        self.sendrecv(sbuf, dst, scratch, src)
        op(acc, scratch, out=acc)
        self.give_back(scratch)
        return None

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
        """The error of a message to or from ``peer`` that MPI failed (``e``):
        in a collective, the notice of a peer that gave up this call or an
        earlier one (it raised, and the memory MPI was reading went as it
        unwound or left); PeerFailure where ``peer`` has died (on this host,
        its process is gone; elsewhere, MPI says so: MPI_ERR_PROC_FAILED, as
        Open MPI's fault-tolerant mode does); else MPI's reason, naming
        ``peer``."""
        for _ in range(50):  # a peer that is dying may take a moment to be gone
            if self.coll:
                try:
                    self.t.notices.check(self.tag)
                    if self.t.told_here is not None:
                        self.t.told_here(self.tag)
                except CollectiveError as told:
                    return told
                except MPI.Exception:
                    pass
            if self.t.liveness.dead([peer]) or _proc_failed(e):
                return PeerFailure(f"rank(s) [{peer}] died during {self.what}", ranks=[peer])
            time.sleep(0.01)
        return CollectiveError(f"message from rank {peer} failed: {mpi_reason(e)}",
                               ranks=[peer])

    def waitall(self, reqs: Iterable[Request]) -> None:
        pending = [r for r in reqs if not r.finished]
        dl = None  # set up once polls stop finding progress (most small waits never do)
        polls, nap = 0, 0.0
        while pending:
            refusals = self.refusals
            still = [r for r in pending if not r.test()]
            if not still:
                return
            if self.refusals != refusals:  # MPI spun in a send: look at the peers now
                polls = _POLLS
            if len(still) < len(pending):
                if dl is not None:
                    dl.progress()
                polls, nap = 0, 0.0
                pending = still
                continue
            polls += 1
            if polls < _POLLS:
                os.sched_yield()
                continue
            if dl is None:  # the clock starts once polls stop finding progress
                dl = Deadline(self.t.timeout, self.t.rank, self.t.grace, self.t.near)
            peers = sorted({r.peer for r in pending})
            dl.check(self.t.liveness, lambda: peers, lambda: peers, self.what,
                     self._watch if self.coll else None)
            nap = min(_NAP_MAX, nap * 2 or 2e-5)
            time.sleep(nap)

    def probe(self, peers: list[int], least: int = 0) -> dict[int, tuple[int, bool]]:
        """peer -> (bytes, False) of each peer's next message of this
        collective (MPI_Iprobe under the call's tag and MPI_Get_count) that
        has come, once all have (or ``least`` of them), waiting as
        ``waitall`` does: a peer's message of this call under another call
        size raises ``mismatched`` (``_watch``)."""
        least = least or len(peers)
        sizes: dict[int, tuple[int, bool]] = {}
        st, tag, dl = MPI.Status(), self._tag(None), None
        polls, nap = 0, 0.0
        while True:
            had = len(sizes)
            self.flush()  # this rank's sends that MPI refused may be what a peer waits for
            for p in peers:
                if p not in sizes and self._iprobe(p, tag, st):
                    sizes[p] = st.Get_count(MPI.BYTE), False
            if len(sizes) >= least:
                return sizes
            if len(sizes) > had:
                if dl is not None:
                    dl.progress()
                polls, nap = 0, 0.0
                continue
            polls += 1
            if polls < _POLLS:
                os.sched_yield()
                continue
            if dl is None:  # the clock starts once polls stop finding progress
                dl = Deadline(self.t.timeout, self.t.rank, self.t.grace, self.t.near)
            missing = [p for p in peers if p not in sizes]
            dl.check(self.t.liveness, lambda: missing, lambda: missing, self.what,
                     self._watch if self.coll else None)
            nap = min(_NAP_MAX, nap * 2 or 2e-5)
            time.sleep(nap)

    def _watch(self) -> None:
        """A collective's look at its peers: their notices, then their
        messages and arrivals (``Notices.arrive``) of this call with another
        call key; and this rank's arrival, once."""
        notices = self.t.notices
        notices.check(self.tag)
        if self.call_bytes == UNCHECKED:
            return
        if self.modulus:
            self._probe()
        notices.arrive(self.tag, self.call_bytes)
        notices.drain()
        for p, (seq, key) in notices.arrived.items():
            if seq == self.tag and key != self.call_bytes and key != UNCHECKED:
                raise mismatched(p, self.tag, key, self.rank, self.call_bytes)

    def _call(self, peer: int, fn, *args):
        """``fn(*args)``, an MPI call that involves ``peer`` (a post, a probe),
        under the lock; where MPI fails it (Open MPI's fault-tolerant mode
        refuses one that involves a failed process), ``failed``'s error."""
        try:
            with self.t.lock:
                return fn(*args)
        except MPI.Exception as e:
            raise self.failed(peer, e) from None

    def _iprobe(self, p: int, tag: int, st) -> bool:
        return self._call(p, self.comm.Iprobe, p, tag, st)

    def _probe(self) -> None:
        """Raise ``mismatched`` for a peer whose first pending message belongs
        to this collective but carries another call size in its tag (no
        receive here can match it)."""
        st, seq = MPI.Status(), self.tag & SEQ_MASK
        mine = self.call_bytes % self.modulus
        for p in range(self.size):
            if p == self.rank:
                continue
            found = self._iprobe(p, MPI.ANY_TAG, st)
            tag = st.Get_tag()
            if found and tag & SEQ_MASK == seq and tag >> SEQ_BITS != mine:
                raise mismatched(p, self.tag, tag >> SEQ_BITS, self.rank, self.call_bytes,
                                 self.modulus)
            back = (seq - tag) & SEQ_MASK
            if found and 0 < back < STRAY_CALLS:
                raise stray(p, self.tag - back)

    def strays(self) -> list[tuple[int, int, str]]:
        """(peer, call, words) for each peer's first message left unreceived here
        once this rank's calls are done (``close``): a call of that peer that
        differed from this rank's (``stray``; ``mismatched`` for the last)."""
        found, st, seq = [], MPI.Status(), self.tag & SEQ_MASK
        for p in range(self.size):
            if p == self.rank:
                continue
            try:
                if not self._iprobe(p, MPI.ANY_TAG, st):
                    continue
            except CollectiveError:  # p failed: it takes no word
                continue
            tag = st.Get_tag()
            back = (seq - tag) & SEQ_MASK
            if back == 0 and self.call_bytes != UNCHECKED:
                e = mismatched(p, self.tag, tag >> SEQ_BITS, self.rank, self.call_bytes,
                               self.modulus)
            elif back < STRAY_CALLS:
                e = stray(p, self.tag - back)
            else:
                continue
            found.append((p, self.tag - back, e.detail))
        return found
