"""The narrow interface every transport implements, and what they share.

A transport connects the ranks of one communicator.  It has two endpoints
that never mix: ``coll`` carries the collectives (messages between a pair
arrive in the order sent, and every rank runs the same schedule, so they
match in order) and ``p2p`` carries the user's ``send``/``recv`` (matched by
tag, like MPI).

Traffic is counted in the endpoints and nowhere else: each counts the
payload bytes of the messages it completes and of its exchanges (one thread
drives an endpoint, so no count is lost), and the transport's
``sent_bytes``/``recv_bytes`` add the two.  Of those, the bytes to and from
ranks of other hosts (``Transport.remote``, set by ``place``) are counted
again in ``inter_sent_bytes``/``inter_recv_bytes``: only a transport whose
peers may be on other hosts (MPI) has any.  The one thing an endpoint cannot
see is how much of a contribution to ``exchange()`` its peers read where
they read it straight out of shared memory; the algorithms that read only
part (``sent``/``recv`` of ``exchange()``) say so, and the endpoint counts
that figure instead of the whole.

All buffers handed to an endpoint are 1-D, C-contiguous numpy arrays (or,
on the cuda transport, CuPy arrays); a receive must be given exactly the
number of bytes that the sender sends.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable, Iterable, Sequence

import numpy as np

from .errors import CollectiveError, CollectiveTimeout, PeerFailure, describe
from .hosts import Hosts, single

log = logging.getLogger("collectives")


def _stall_warn() -> float:
    env = os.environ.get("COLLECTIVES_STALL_WARN") or "30"
    try:
        return float(env)
    except ValueError:
        raise ValueError(f"COLLECTIVES_STALL_WARN must be a number of seconds, got {env!r}") from None


# seconds a rank waits (in one wait) before it logs where it is stuck, once
STALL_WARN = _stall_warn()

Reducer = Callable[..., np.ndarray]  # a binary numpy ufunc used as op(acc, x, out=acc)

# The largest tag a transport must carry: the least upper bound on tags that
# MPI guarantees (MPI_TAG_UB is at least 32767), so a tag means the same on
# every transport.
TAG_UB = 32767


# The call size of debug mode's signature exchange, the same on every rank: sizes
# are compared by the signatures then, and probes for mismatched sizes wait.
UNCHECKED = -1


def env_int(name: str, default: int) -> int:
    """The integer in environment variable ``name``; ``default`` if unset or empty."""
    v = os.environ.get(name)
    return int(v) if v else default


def as_bytes(a):
    """The bytes of a contiguous array (numpy or CuPy), as a flat uint8 view."""
    return a.reshape(-1).view(np.uint8)


class Request:
    """A pending send or receive: ``wait()`` blocks until it completes."""

    def wait(self) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError


class Endpoint:
    """Point-to-point primitives on which every algorithm is written."""

    rank: int
    size: int
    tag: int = 0  # the tag of the collective in progress (coll endpoint)
    # the collective's call size (coll endpoint): the bytes that every rank's
    # call moves alike (x.nbytes for most calls), carried by each message
    # and exchange so that a receiver tells a mismatched call from its own;
    # UNCHECKED while the ranks compare debug mode's signatures
    call_bytes: int = 0
    # the largest contribution exchange() moves through shared memory in one
    # copy (0: exchange() is point-to-point messages)
    xchg_bytes: int = 0
    # peers can read a source where it lies (``expose``): the one-copy algorithms
    one_copy: bool = False
    sent_bytes: int = 0
    recv_bytes: int = 0
    inter_sent_bytes: int = 0  # of sent_bytes, those to ranks of other hosts
    inter_recv_bytes: int = 0

    def isend(self, buf: np.ndarray, peer: int, tag: int | None = None) -> Request:
        raise NotImplementedError

    def irecv(self, out: np.ndarray, peer: int, tag: int | None = None) -> Request:
        raise NotImplementedError

    def probe(self, peers: list[int], least: int = 0) -> dict[int, tuple[int, bool]]:
        """peer -> (bytes, whether it comes by rendezvous) of the next message
        of this collective from each of ``peers`` that has begun to arrive
        (MPI_Probe's count), without receiving it; waiting until every one
        has, or, with ``least``, until that many have.  Only where the
        transport can (shm, mpi)."""
        raise NotImplementedError(f"{type(self).__name__} has no probe")

    def isend_read(self, buf: np.ndarray, peer: int) -> Request:
        """``isend`` whose receiver copies ``buf`` straight out of this
        process where the transport can (a rendezvous: one copy, not two;
        ``buf`` is not to change until the send completes); else ``isend``."""
        return self.isend(buf, peer)

    def irecv_reduce(self, acc: np.ndarray, peer: int, op: Reducer,
                     tag: int | None = None, src: np.ndarray | None = None) -> Request:
        """Receive ``acc.nbytes`` bytes and reduce them into ``acc`` in place;
        with ``src`` (``acc``'s shape and dtype, apart from it) ``acc``
        becomes ``op(src, received)`` instead, and nothing is copied first."""
        raise NotImplementedError

    def waitall(self, reqs: Iterable[Request]) -> None:
        raise NotImplementedError

    # Blocking forms and the pairwise exchange that ring steps are made of.
    def send(self, buf: np.ndarray, peer: int, tag: int | None = None) -> None:
        self.waitall([self.isend(buf, peer, tag)])

    def recv(self, out: np.ndarray, peer: int, tag: int | None = None) -> np.ndarray:
        self.waitall([self.irecv(out, peer, tag)])
        return out

    def recv_reduce(self, acc: np.ndarray, peer: int, op: Reducer,
                    tag: int | None = None, src: np.ndarray | None = None) -> np.ndarray:
        self.waitall([self.irecv_reduce(acc, peer, op, tag, src)])
        return acc

    def exchange(self, buf, root: int | None = None, sent: int | None = None,
                 recv: int | None = None, sink: int | None = None) -> list[np.ndarray]:
        """Every rank contributes ``buf``, an array or a list of arrays of one
        dtype taken as their concatenation (the same nbytes on every rank); returns
        all N contributions in rank order, as arrays of ``buf``'s dtype that do
        not alias ``buf`` and stay valid until this endpoint's next call.
        ``root``: only that rank's contribution counts (a broadcast: the
        others' rows are undefined).  ``sink``: only that rank reads (a
        reduce): its own row is undefined, and on every other rank the
        result is undefined (this form returns no rows there).

        Bytes counted: (N-1)*S sent and received ((N-1)*S sent by root and S
        received by the others with ``root``).  Transports with shared
        memory override this with a single copy in and direct reads, where a
        peer may read only part of a contribution: ``sent`` and ``recv``,
        given by an algorithm whose peers do, are the bytes the peers read
        of this rank's contribution and this rank reads of theirs, and are
        counted instead (without ``root``); this form moves every byte and
        ignores them.
        """
        n, r = self.size, self.rank
        if isinstance(buf, (list, tuple)):
            buf = buf[0] if len(buf) == 1 else np.concatenate([p.reshape(-1) for p in buf])
        flat = buf.reshape(-1)
        if sink is not None and r != sink:
            self.send(flat, sink)
            return []
        # empty_like: a CuPy buffer gets CuPy rows (numpy dispatches to CuPy)
        out = np.empty_like(flat, shape=(n, flat.size))
        rows = [out[p] for p in range(n)]
        if root is not None:
            if r == root:
                np.copyto(rows[r], flat)
                self.waitall([self.isend(flat, p) for p in range(n) if p != r])
            else:
                self.recv(rows[root], root)
            return rows
        if sink is not None:  # this rank is the sink
            self.waitall([self.irecv(rows[p], p) for p in range(n) if p != r])
            return rows
        np.copyto(out[r], flat)
        reqs = [self.irecv(rows[p], p) for p in range(n) if p != r]
        reqs += [self.isend(flat, p) for p in range(n) if p != r]
        self.waitall(reqs)
        return rows

    def expose(self, buf, huge: bool = False):
        """Publish where ``buf`` (a contiguous array, or None) lies so that the
        peers read it in place; returns, once every peer has published its
        own, an object with ``read(peer, offset, dest)``, ``piece(peer,
        offset, nbytes, scratch)``, ``huge(share)`` (with ``huge``: whether
        huge pages back that share of every rank's source) and
        ``finish(sent)``, which blocks until every peer has finished too
        (transports/shm/one_copy.py).  Only where ``one_copy``
        is true."""
        raise NotImplementedError(f"{type(self).__name__} has no one-copy path")

    def gather_blocks(self, x, out, nb: int, off: int, own_off: int, own: int,
                      only: int = -1) -> bool:
        """Where the transport can: publish ``x`` (``expose``; None: nothing),
        fill block p of ``out`` (``nb`` bytes at byte ``p * nb``) with bytes
        [off, off + nb) of every peer p's source and (``own``: 1 plain, 2
        with streaming stores) this rank's block with x's ``nb`` bytes from
        ``own_off`` (``only``, a rank: ``out`` itself, from rank only's
        source alone), then ``finish``, in one compiled call
        (transports/shm/one_copy.py, ``OneCopy.gather``); True once done.  False, having done nothing,
        elsewhere: the caller runs the same steps through ``expose``."""
        return False

    def chunk_bytes(self, a) -> int:
        """The most bytes of arrays like ``a`` that one exchange() moves through
        shared memory (0: exchange() is messages, of any size)."""
        return self.xchg_bytes

    def stage(self, count: int, like: np.ndarray) -> np.ndarray:
        """An array of ``count`` elements of ``like``'s kind to fill and then
        hand to exchange(); transports with shared memory return their
        exchange buffer itself, so that exchange() needs no copy."""
        return np.empty_like(like, shape=count)

    def sendrecv(self, sbuf: np.ndarray, dst: int, rbuf: np.ndarray, src: int) -> None:
        self.waitall([self.irecv(rbuf, src), self.isend(sbuf, dst)])

    def sendrecv_reduce(self, sbuf: np.ndarray, dst: int, acc: np.ndarray, src: int,
                        op: Reducer) -> None:
        self.waitall([self.irecv_reduce(acc, src, op), self.isend(sbuf, dst)])

    def begin(self, tag: int, call_bytes: int, what: str) -> None:
        """A collective starts: its tag, call size and name (coll endpoint)."""
        self.tag, self.call_bytes, self.what = tag, call_bytes, what

    def steps(self, plan, src: np.ndarray, buf: np.ndarray, reducer, op: Reducer,
              unit: int = 0, dst: np.ndarray | None = None) -> bool:
        """Run a schedule of send-receives, reductions and copies
        (``schedule.Plan``) in one compiled call where the transport has one (mpi:
        ``MpiEndpoint.steps``); False here: the caller runs it in Python."""
        return False


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a transport offers the layer above, declared by each transport
    (``Transport.caps``) instead of found by probing its attributes.

    ``shared_exchange``: ``coll.exchange()`` goes through shared memory (a
    peer reads only the part of a stage it needs): the staged algorithms.
    ``one_copy``: and ``coll.expose()`` lets peers read and write each other's
    arrays where they lie (process_vm_readv): the one-copy algorithms.
    ``regions``: communicator-allocated arrays that every rank maps
    (``Transport.regions``).  ``device``: the CUDA device whose CuPy arrays
    the transport carries (None: numpy only).  ``relays_deaths``: a rank that
    finds a peer dead in a collective tells the others, who would otherwise
    wait on it until their timeout (mpi, whose waits watch only the peers of
    pending requests; shm's collective endpoint watches every peer itself).
    ``relays_timeouts``: and a rank that times out on peers tells the
    others too (hier: the ranks of its host, who wait on it, then name the
    ranks it waited for on another host instead of it).
    ``hier``: the collective endpoint has the parts (``local``, ``cross``,
    ``flat``) that the hierarchical algorithms run on."""

    shared_exchange: bool = False
    one_copy: bool = False
    regions: bool = False
    device: int | None = None
    relays_deaths: bool = False
    relays_timeouts: bool = False
    hier: bool = False


class Transport:
    """Owns the endpoints of one communicator and its byte counters."""

    name = "?"
    coll: Endpoint
    p2p: Endpoint
    caps: Capabilities = Capabilities()
    # communicator-allocated arrays (caps.regions): allocate(shape, dtype)
    regions = None
    # set by the communicator when one of its calls failed here: close() then
    # keeps what a late message may still reach (transports/mpi.py, _KEPT)
    broken = False

    def __init__(self, rank: int, size: int, timeout: float,
                 pids: Sequence[int], local: Sequence[bool]):
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        self.liveness = Liveness(pids, local)
        self.place(single(size, rank))

    def place(self, hosts: Hosts) -> None:
        """Tell the transport which host each rank is on (``open_transport``
        does, before any byte moves): ``remote[p]``, rank p is on another host."""
        self.hosts = hosts
        self.remote = hosts.remote

    @property
    def sent_bytes(self) -> int:
        return self.coll.sent_bytes + self.p2p.sent_bytes

    @property
    def recv_bytes(self) -> int:
        return self.coll.recv_bytes + self.p2p.recv_bytes

    @property
    def inter_sent_bytes(self) -> int:
        return self.coll.inter_sent_bytes + self.p2p.inter_sent_bytes

    @property
    def inter_recv_bytes(self) -> int:
        return self.coll.inter_recv_bytes + self.p2p.inter_recv_bytes

    def set_arrived(self, seq: int, call_bytes: int = 0) -> None:
        """Note that this rank entered collective ``seq`` of call size ``call_bytes``
        (for timeout reports, and for peers to compare sizes)."""

    def arrival_board(self):
        """Where ``set_arrived`` writes in memory on every call, for a
        compiled call that notes its own arrival (transports/_native.c,
        ``mpi_lane``): (an int64 array, the index of this rank's arrival
        word in it, of its call size's), or None where it writes nothing
        there (mpi: only every 64th call looks at the peers' notices, which
        such a call leaves to Python)."""
        return None

    def unclaimed(self, seq: int) -> None:
        """After collective ``seq``, in which this rank only sent: raise
        ``mismatched`` for a peer whose message of this call with another
        call key is waiting here (ranks that disagree on a root each send to
        the other and receive nothing), and a peer's notice.  Each transport
        looks where it is cheap to."""

    def left_over(self) -> None:
        """Before a close after calls that all returned: tell the senders of
        what their calls left unreceived here (mpi, where a sender may wait on
        such a message, as a rendezvous send does, or on a peer that waits on
        it; shm's ranks read each other's arrival boards and slots)."""

    def name_hosts(self, e: CollectiveError) -> None:
        """Add the hosts of the ranks that error ``e`` names to its words,
        where the communicator spans several (hier)."""

    def notify(self, seq: int, text: str, skip: Sequence[int] = ()) -> None:
        """Tell every peer that this rank gave up collective ``seq`` on an
        error it detected (``text``: what the peers raise, as ``peer_notice``),
        but the ranks of ``skip`` (those it found dead or silent: a message
        to a dead rank can stall MPI, as MPICH's tcp netmod's send does).  Only
        on the failure path: it never waits and never raises."""

    def close(self) -> None:
        pass


class Liveness:
    """Tells whether the processes of peers on this host are still alive."""

    def __init__(self, pids: Sequence[int], local: Sequence[bool]):
        self.pids, self.local = list(pids), list(local)

    def dead(self, ranks: Iterable[int]) -> list[int]:
        return [r for r in ranks if self.local[r] and not _alive(self.pids[r])]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited but is not reaped yet
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class Deadline:
    """The time a rank may still wait without any progress from its peers.

    ``progress()`` restarts the clock: a large transfer that keeps moving
    never times out, a peer that stops for ``timeout`` seconds does.
    """

    CHECK_EVERY = 0.05  # seconds between liveness checks

    def __init__(self, timeout: float, rank: int | None = None, grace: float = 0.0,
                 near: Callable[[list[int]], bool] | None = None):
        """``grace``, ``near``: where the timeout expires while ``near(late)``
        (ranks of this host, alive, are among those waited for: they wait on
        someone themselves), wait ``grace`` seconds more, once, for their
        word on whom they wait for."""
        self.timeout, self.rank = timeout, rank
        self.grace, self.near = grace, near
        now = time.monotonic()
        self.started = now
        self.expires = now + timeout
        self.next_check = now + self.CHECK_EVERY
        self.warned = False

    def progress(self) -> None:
        self.expires = time.monotonic() + self.timeout

    def remaining(self) -> float:
        return self.expires - time.monotonic()

    def check(self, liveness: Liveness, peers: Callable[[], Iterable[int]],
              missing: Callable[[], list[int]], what: str,
              watch: Callable[[], None] | None = None) -> None:
        """Raise PeerFailure for a dead peer or CollectiveTimeout once expired.
        ``watch()``: the endpoint's own look at its peers (a notice of an
        error, a mismatched call), which raises what it finds; run here so
        that it costs nothing while messages move."""
        now = time.monotonic()
        if now < self.next_check and now < self.expires:
            return
        self.next_check = now + self.CHECK_EVERY
        dead = liveness.dead(peers())
        if watch is not None:
            watch()  # a peer that gave up, then ended, said why first
        if dead:
            raise PeerFailure(f"rank(s) {dead} died during {what}", ranks=dead)
        if not self.warned and now - self.started >= STALL_WARN:
            self.warned = True  # once per wait
            who = "this rank" if self.rank is None else f"rank {self.rank}"
            log.warning("%s has waited %.0f s in %s for rank(s) %s (pid %d; the timeout is %g s)",
                        who, now - self.started, what, missing(), os.getpid(), self.timeout)
        if now >= self.expires:
            late = missing()
            if self.grace and self.near is not None and self.near(late):
                self.expires, self.grace = now + self.grace, 0.0
                return
            raise CollectiveTimeout(
                f"timed out after {self.timeout:g}s in {what}: no progress from rank(s) {late}",
                ranks=late)


def broken_error(reason: BaseException, call: str | None = None) -> CollectiveError:
    """The error of ``call``, refused on a communicator that an earlier error
    broke: of the earlier error's class (a PeerFailure stays a PeerFailure),
    naming that error and its call ("barrier: the communicator is unusable
    after an earlier error in all_reduce: ...")."""
    kind = type(reason) if isinstance(reason, CollectiveError) else CollectiveError
    earlier = getattr(reason, "call", None)
    where = f" in {earlier}" if earlier else ""
    return kind(f"the communicator is unusable after an earlier error{where}: "
                f"{describe(reason)}", call=call, ranks=getattr(reason, "ranks", ()))
