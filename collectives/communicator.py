"""The Communicator: checks arguments, picks an algorithm, runs it in order."""
from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import weakref
from typing import Any, Callable

import numpy as np

from transports import CollectiveError, KINDS, Transport, open_transport
from transports.base import broken_error

from . import (all_gather, all_reduce, all_to_all, barrier, broadcast, debug, gather,
               reduce, reduce_scatter)
from . import validate as v
from .arrays import empty
from .ops import UFUNCS, Op, resolve
from .work import Executor, Work

DEFAULT_TIMEOUT = 300.0

# numpy 2 keeps its floating-point error state in a context variable: setting
# it directly costs 0.14 us where `with np.errstate(all="ignore")` costs 0.9 us
# (a fifth of a small all-reduce); np.errstate where that variable is not there
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    with np.errstate(all="ignore"):
        _IGNORE_ALL = _ERRSTATE.get()
except (ImportError, AttributeError):
    _ERRSTATE = None
SMALL_ALL_REDUCE_BYTES = 4096

# call name -> (algorithm table, default chooser(nbytes, size, shared)); shared:
# the transport's exchange() goes through shared memory (shm, host arrays)
_FAMILIES: dict[str, tuple[dict, Callable[[int, int, bool], str]]] = {
    "all_reduce": (all_reduce.ALGORITHMS, all_reduce.choose),
    "broadcast": (broadcast.ALGORITHMS, broadcast.choose),
    "reduce": (reduce.ALGORITHMS, reduce.choose),
    "all_gather": (all_gather.ALGORITHMS, all_gather.choose),
    "reduce_scatter": (reduce_scatter.ALGORITHMS, reduce_scatter.choose),
    "all_to_all": (all_to_all.ALGORITHMS, all_to_all.choose),
    "gather": (gather.GATHER, gather.choose),
    "scatter": (gather.SCATTER, gather.choose),
    "barrier": (barrier.ALGORITHMS, barrier.choose),
}


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Payload bytes this rank sent to and received from other ranks."""

    sent_bytes: int = 0
    recv_bytes: int = 0

    def __sub__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.sent_bytes - other.sent_bytes, self.recv_bytes - other.recv_bytes)

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.sent_bytes + other.sent_bytes, self.recv_bytes + other.recv_bytes)


_LIVE: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before mpi4py finalizes MPI
    for c in list(_LIVE):
        try:
            c.close()
        except Exception:
            pass


def init(transport: str = "auto", timeout: float | None = None,
         debug: bool | None = None) -> "Communicator":
    """Join the job launched by mpiexec and connect all its ranks.

    ``transport``: "auto" (shared memory when every rank is on one host, MPI
    otherwise), "shm", "mpi" or "cuda".  ``timeout``: seconds a rank waits
    for its peers without progress before CollectiveTimeout (default
    $COLLECTIVES_TIMEOUT, else 300).  ``debug``: check before every
    collective that all ranks called the same thing (default
    $COLLECTIVES_DEBUG=1; collectives/debug.py).
    """
    if debug is None:
        debug = os.environ.get("COLLECTIVES_DEBUG", "0") not in ("", "0")
    if transport not in KINDS:
        raise ValueError(f"init: transport must be one of {KINDS}, got {transport!r}")
    if timeout is None:
        env = os.environ.get("COLLECTIVES_TIMEOUT") or str(DEFAULT_TIMEOUT)
        try:
            timeout = float(env)
        except ValueError:
            raise ValueError(f"init: COLLECTIVES_TIMEOUT must be a number of seconds, "
                             f"got {env!r}") from None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"init: timeout must be a positive number of seconds, got {timeout!r}")
    from mpi4py import MPI
    _abort_on_uncaught(MPI)
    mpicomm = MPI.COMM_WORLD.Dup()
    try:
        t = open_transport(transport, mpicomm, float(timeout))
    except BaseException:
        mpicomm.Free()
        raise
    return Communicator(mpicomm, t, bool(debug))


def _abort_on_uncaught(MPI) -> None:
    """An exception that no code catches on one rank ends the whole job
    (MPI_Abort) instead of leaving the others waiting for it until their
    timeout; COLLECTIVES_ABORT_ON_EXCEPTION=0 turns this off.  Installed once,
    in front of whatever sys.excepthook was (which still prints the error)."""
    if getattr(sys.excepthook, "_collectives", False):
        return
    if os.environ.get("COLLECTIVES_ABORT_ON_EXCEPTION", "1") in ("0", ""):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        world = MPI.COMM_WORLD
        if MPI.Is_initialized() and not MPI.Is_finalized() and world.Get_size() > 1:
            sys.stderr.write(f"collectives: uncaught {kind.__name__} on rank {world.Get_rank()}: "
                             "aborting the job (MPI_Abort); set "
                             "COLLECTIVES_ABORT_ON_EXCEPTION=0 to let the other ranks wait\n")
            sys.stderr.flush()
            world.Abort(1)
    hook._collectives = True
    sys.excepthook = hook


class Communicator:
    """A group of ranks and every collective and point-to-point call among them.

    Arrays are numpy arrays of any shape, C-contiguous, of the dtypes in
    ``collectives.ops.DTYPES``; on the "cuda" transport CuPy arrays too.  Every collective takes ``async_op`` and
    (reducing and gathering calls) ``algorithm``; see API.md.
    """

    def __init__(self, mpicomm, transport: Transport, debug: bool = False):
        self._debug = debug
        self._alg_name = ""
        self._mpi = mpicomm
        self._t = transport
        self.rank: int = transport.rank
        self.size: int = transport.size
        self.timeout: float = transport.timeout
        # the CUDA device whose CuPy arrays this communicator takes (None: numpy only)
        self._device: int | None = getattr(transport, "device", None)
        # exchange() through shared memory: the defaults take the staged algorithms
        self._shared = transport.coll.xchg_bytes > 0 and self._device is None
        # all_reduce of up to this many bytes skips the scheduling (see there)
        self._small = SMALL_ALL_REDUCE_BYTES if self._shared and not debug and self.size > 1 else 0
        # (op, dtype) -> (ufunc, avg, ieee) for the pairs all_reduce has checked
        self._small_ok: dict = {}
        self._seq = 0
        self._exec = Executor(f"{transport.name}-{self.rank}")
        self._broken: BaseException | None = None
        self._p2p_broken: BaseException | None = None
        self._closed = False
        _LIVE.add(self)

    # -- properties -----------------------------------------------------------
    @property
    def transport(self) -> str:
        return self._t.name

    @property
    def traffic(self) -> Traffic:
        return Traffic(self._t.sent_bytes, self._t.recv_bytes)

    def algorithms(self, name: str) -> list[str]:
        """The names that ``algorithm=`` accepts for collective ``name``."""
        if name not in _FAMILIES:
            raise ValueError(f"algorithms: unknown collective {name!r}; expected one of "
                             f"{sorted(_FAMILIES)}")
        return list(_FAMILIES[name][0])

    def choose_algorithm(self, name: str, nbytes: int) -> str:
        """The algorithm that ``algorithm=None`` picks for ``name`` on a message of
        ``nbytes`` (the input's nbytes: x for most calls, buf for broadcast,
        one block for gather and scatter) on this communicator."""
        self.algorithms(name)
        return _FAMILIES[name][1](int(nbytes), self.size, self._shared)

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._t.name
        return f"<Communicator rank {self.rank} of {self.size} ({state})>"

    # -- machinery ------------------------------------------------------------
    def _open(self, call: str) -> None:
        if self._closed:
            raise ValueError(f"{call}: the communicator is closed")

    def _pick(self, call: str, algorithm, nbytes: int):
        table, choose = _FAMILIES[call]
        name = v.algorithm(call, algorithm, table) or choose(nbytes, self.size, self._shared)
        self._alg_name = name
        if nbytes == 0 and call != "barrier":
            return _nothing  # every rank holds 0 bytes too (as in MPI): nothing to move
        return table[name]

    def _on_device(self, a) -> bool:
        """Whether ``a`` (a checked array) is a CuPy array."""
        return self._device is not None and not isinstance(a, np.ndarray)

    def _run(self, call: str, body: Callable[[Any], Any], async_op: bool,
             on_device: bool = False, ieee: bool = False, sig: tuple = (0, None, None, None)):
        """Queue ``body(endpoint)`` as the next collective of this communicator.
        ``on_device``: the arrays are CuPy's; the transport orders the call's
        GPU work after the caller's and returns once it is done.  ``ieee``: a
        floating reduction, whose overflow to inf is a result (as in MPI and
        NCCL), not a warning numpy should print on some rank's worker thread."""
        if on_device:
            body = self._t.on_device(body, call)
        self._seq += 1
        seq = self._seq
        mine = None
        if self._debug:  # what every rank must agree on (collectives/debug.py)
            mine = debug.signature(call, seq, *sig, self._alg_name, self.algorithms(call))
        return self._exec.submit(lambda: self._execute(call, seq, body, ieee, mine), call,
                                 bool(async_op))

    def _execute(self, call: str, seq: int, body: Callable[[Any], Any], ieee: bool,
                 mine=None):
        """Run collective ``seq``'s ``body(endpoint)`` now (in order: the caller
        is the executor, or nothing is queued)."""
        if self._broken is not None:
            raise broken_error(self._broken)
        ep = self._t.coll
        ep.tag = seq
        ep.what = call  # named in stall reports and timeout errors
        self._t.set_arrived(seq)
        try:
            if mine is not None:
                debug.check(ep.exchange(mine), self.algorithms)
            if ieee:
                if _ERRSTATE is None:
                    with np.errstate(all="ignore"):
                        return body(ep)
                token = _ERRSTATE.set(_IGNORE_ALL)
                try:
                    return body(ep)
                finally:
                    _ERRSTATE.reset(token)
            return body(ep)
        except CollectiveError as e:
            e.call = e.call or call
            self._broken = e
            raise

    def _result(self, c: str, x: np.ndarray, out, shape: tuple, what: str,
                in_place_ok: bool) -> tuple[np.ndarray, bool]:
        """The array the result goes into: a new one, or the caller's checked
        ``out``; and whether that is ``x`` itself (in place)."""
        if out is None:
            return empty(shape, x), False
        v.out(c, out, shape, x, what, self._device)
        return out, v.no_overlap(c, x, out, in_place_ok)

    def _avg(self, op: Op, arr: np.ndarray) -> None:
        if op is Op.AVG and arr.size:
            np.true_divide(arr, self.size, out=arr)

    # -- collectives ----------------------------------------------------------
    def broadcast(self, buf: np.ndarray, root: int = 0, *, algorithm: str | None = None,
                  async_op: bool = False):
        """Fill ``buf`` on every rank with root's ``buf``; returns ``buf``."""
        c = "broadcast"
        self._open(c)
        v.array(c, "buf", buf, writable=True, device=self._device)
        root = v.rank(c, "root", root, self.size)
        alg = self._pick(c, algorithm, buf.nbytes)
        flat = buf.reshape(-1)

        def body(ep):
            alg(ep, flat, root)
            return buf
        return self._run(c, body, async_op, self._on_device(buf),
                         sig=(buf.size, buf.dtype, None, root))

    def scatter(self, x, out: np.ndarray, root: int = 0, *, algorithm: str | None = None,
                async_op: bool = False):
        """``out`` on rank i = root's ``x[i]``; ``x`` (shape (size, *out.shape)) on root only."""
        c = "scatter"
        self._open(c)
        v.array(c, "out", out, writable=True, device=self._device)
        root = v.rank(c, "root", root, self.size)
        xf = None
        if self.rank == root:
            v.array(c, "x", x, device=self._device)
            v.same_kind(c, x, out)
            if x.shape != (self.size, *out.shape) or x.dtype != out.dtype:
                raise ValueError(f"scatter: x on root has shape {x.shape} and dtype {x.dtype}, "
                                 f"expected {(self.size, *out.shape)} and {out.dtype} "
                                 "(size blocks shaped like out)")
            v.no_overlap(c, x, out, in_place_ok=False)
            xf = x.reshape(-1)
        alg = self._pick(c, algorithm, out.nbytes)
        of = out.reshape(-1)

        def body(ep):
            alg(ep, xf, of, root)
            return out
        return self._run(c, body, async_op, self._on_device(out),
                         sig=(out.size, out.dtype, None, root))

    def gather(self, x: np.ndarray, out: np.ndarray | None = None, root: int = 0, *,
               algorithm: str | None = None, async_op: bool = False):
        """On root, ``out[i]`` = rank i's ``x`` (shape (size, *x.shape)); None elsewhere."""
        c = "gather"
        self._open(c)
        v.array(c, "x", x, device=self._device)
        root = v.rank(c, "root", root, self.size)
        shape = (self.size, *x.shape)
        if self.rank == root:
            out, _ = self._result(c, x, out, shape, "(size, *x.shape)", in_place_ok=False)
        else:
            out = None
        alg = self._pick(c, algorithm, x.nbytes)
        xf, of = x.reshape(-1), None if out is None else out.reshape(-1)

        def body(ep):
            alg(ep, xf, of, root)
            return out
        return self._run(c, body, async_op, self._on_device(x),
                         sig=(x.size, x.dtype, None, root))

    def reduce(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", root: int = 0, *,
               algorithm: str | None = None, async_op: bool = False):
        """On root, the elementwise reduction of every rank's ``x``; None elsewhere."""
        c = "reduce"
        self._open(c)
        v.array(c, "x", x, device=self._device)
        o = resolve(op, x.dtype)
        root = v.rank(c, "root", root, self.size)
        in_place = False
        if self.rank == root:
            out, in_place = self._result(c, x, out, x.shape, "the shape of x", in_place_ok=True)
        else:
            out = None
        alg = self._pick(c, algorithm, x.nbytes)
        of = None if out is None else out.reshape(-1)
        xf = of if in_place else x.reshape(-1)  # the algorithm sees in place as x is out
        uf = UFUNCS[o]

        def body(ep):
            alg(ep, xf, of, uf, root)
            if of is not None:
                self._avg(o, of)
            return out
        return self._run(c, body, async_op, self._on_device(x), x.dtype.kind in "fc",
                         sig=(x.size, x.dtype, o, root))

    def all_gather(self, x: np.ndarray, out: np.ndarray | None = None, *,
                   algorithm: str | None = None, async_op: bool = False):
        """``out[i]`` = rank i's ``x`` on every rank (shape (size, *x.shape))."""
        c = "all_gather"
        self._open(c)
        v.array(c, "x", x, device=self._device)
        if out is None:
            out = empty((self.size, *x.shape), x)
        else:  # x may be out[rank] (in place)
            v.out(c, out, (self.size, *x.shape), x, "(size, *x.shape)", self._device)
            v.block_in_place(c, out, x, self.rank)
        alg = self._pick(c, algorithm, x.nbytes)
        xf, of = x.reshape(-1), out.reshape(-1)

        def body(ep):
            alg(ep, xf, of)
            return out
        return self._run(c, body, async_op, self._on_device(x),
                         sig=(x.size, x.dtype, None, None))

    def reduce_scatter(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", *,
                       algorithm: str | None = None, async_op: bool = False):
        """Block ``rank`` of the reduction of every rank's ``x`` (shape (size, *s)) -> shape s."""
        c = "reduce_scatter"
        self._open(c)
        v.array(c, "x", x, device=self._device)
        v.leading_size(c, x, self.size)
        o = resolve(op, x.dtype)
        if out is None:
            out = empty(x.shape[1:], x)
        else:  # out may be x[rank] (in place)
            v.out(c, out, x.shape[1:], x, "x.shape[1:]", self._device)
            v.block_in_place(c, x, out, self.rank)
        alg = self._pick(c, algorithm, x.nbytes)
        xf, of, uf = x.reshape(-1), out.reshape(-1), UFUNCS[o]

        def body(ep):
            alg(ep, xf, of, uf)
            self._avg(o, of)
            return out
        return self._run(c, body, async_op, self._on_device(x), x.dtype.kind in "fc",
                         sig=(x.size, x.dtype, o, None))

    def all_to_all(self, x: np.ndarray, out: np.ndarray | None = None, *,
                   algorithm: str | None = None, async_op: bool = False):
        """``out[j]`` = rank j's ``x[rank]``; x and out have shape (size, *s)."""
        c = "all_to_all"
        self._open(c)
        v.array(c, "x", x, device=self._device)
        v.leading_size(c, x, self.size)
        out, _ = self._result(c, x, out, x.shape, "the shape of x", in_place_ok=True)
        alg = self._pick(c, algorithm, x.nbytes)
        xf, of = x.reshape(-1), out.reshape(-1)

        def body(ep):
            alg(ep, xf, of)
            return out
        return self._run(c, body, async_op, self._on_device(x),
                         sig=(x.size, x.dtype, None, None))

    def all_reduce(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", *,
                   algorithm: str | None = None, async_op: bool = False):
        """The elementwise reduction of every rank's ``x``, on every rank."""
        c = "all_reduce"
        if self._small and type(x) is np.ndarray and 0 < x.nbytes <= self._small \
                and algorithm is None and not async_op and isinstance(op, str) \
                and not self._exec.pending:
            # a small message on shared memory: what the general path below
            # runs ("direct"), without its scheduling, for arguments it has
            # accepted before (anything else takes that path and its checks)
            ok = self._small_ok.get((op, x.dtype))
            if ok is not None and x.flags.c_contiguous and not self._closed and (
                    out is None or _plain_out(x, out)):
                if out is None:
                    out = np.empty(x.shape, x.dtype)
                self._alg_name = "direct"
                self._seq += 1
                uf, avg, ieee = ok
                return self._execute(c, self._seq, _SmallAllReduce(x, out, uf, avg), ieee)
        self._open(c)
        v.array(c, "x", x, device=self._device)
        o = resolve(op, x.dtype)
        out, in_place = self._result(c, x, out, x.shape, "the shape of x", in_place_ok=True)
        nb = x.nbytes
        if self._small and isinstance(x, np.ndarray):
            self._small_ok[op, x.dtype] = (UFUNCS[o], o is Op.AVG, x.dtype.kind in "fc")
        alg = self._pick(c, algorithm, nb)
        xf, of, uf = x.reshape(-1), out.reshape(-1), UFUNCS[o]
        takes_src = getattr(alg, "takes_src", False)

        def body(ep):
            if takes_src:
                alg(ep, of, uf, xf)
            else:
                if not in_place:
                    np.copyto(of, xf)
                alg(ep, of, uf)
            self._avg(o, of)
            return out
        return self._run(c, body, async_op, self._on_device(x), x.dtype.kind in "fc",
                         sig=(x.size, x.dtype, o, None))

    def barrier(self, *, algorithm: str | None = None, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        c = "barrier"
        self._open(c)
        alg = self._pick(c, algorithm, 0)

        def body(ep):
            alg(ep)
        return self._run(c, body, async_op)

    # -- point to point -------------------------------------------------------
    def _p2p(self, call: str, fn: Callable[[], Any]):
        """Run a point-to-point step; an error leaves the p2p endpoint unusable
        (collectives go on: they use their own endpoint)."""
        if self._p2p_broken is not None:
            raise broken_error(self._p2p_broken)
        try:
            return fn()
        except CollectiveError as e:
            e.call = e.call or call
            self._p2p_broken = e
            raise

    def _start_send(self, c: str, x, dst, tag) -> "_P2PWork":
        self._open(c)
        v.array(c, "x", x, device=self._device)
        dst = v.peer(c, "dst", dst, self.size, self.rank)
        tag = v.tag(c, tag)
        return _P2PWork(self, self._p2p(c, lambda: self._t.p2p.isend(x, dst, tag)), None, c)

    def _start_recv(self, c: str, out, src, tag) -> "_P2PWork":
        self._open(c)
        v.array(c, "out", out, writable=True, device=self._device)
        src = v.peer(c, "src", src, self.size, self.rank)
        tag = v.tag(c, tag)
        return _P2PWork(self, self._p2p(c, lambda: self._t.p2p.irecv(out, src, tag)), out, c)

    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Work:
        """Start sending ``x`` to ``dst``; ``wait()`` returns once x may be reused."""
        return self._start_send("isend", x, dst, tag)

    def irecv(self, out: np.ndarray, src: int, tag: int = 0) -> Work:
        """Start receiving into ``out`` from ``src``; ``wait()`` returns ``out``."""
        return self._start_recv("irecv", out, src, tag)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused."""
        self._start_send("send", x, dst, tag).wait()

    def recv(self, out: np.ndarray, src: int, tag: int = 0) -> np.ndarray:
        """Receive into ``out`` (the shape and dtype that ``src`` sent); returns ``out``."""
        return self._start_recv("recv", out, src, tag).wait()

    # -- sub-communicators and life cycle -----------------------------------
    def split(self, color: int, key: int | None = None) -> "Communicator | None":
        """Like MPI_Comm_split: ranks of one color form a communicator, ordered by
        ``key`` then parent rank.  A negative color gets None."""
        c = "split"
        self._open(c)
        color = v.integer(c, "color", color)
        key = self.rank if key is None else v.integer(c, "key", key)
        self._exec.drain()
        from mpi4py import MPI
        sub = self._mpi.Split(MPI.UNDEFINED if color < 0 else color, key)
        if sub == MPI.COMM_NULL:
            return None
        try:
            t = open_transport(self._t.name, sub, self.timeout)
        except BaseException:
            sub.Free()
            raise
        return Communicator(sub, t, self._debug)

    def close(self) -> None:
        """Finish pending calls and release the transport; idempotent."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        try:
            self._exec.stop()
        finally:
            self._t.close()
            try:
                self._mpi.Free()
            except Exception:
                pass

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain_out(x: np.ndarray, out) -> bool:
    """``out`` is a numpy array that all_reduce takes for ``x`` as it is: the
    same shape and dtype, contiguous, writable, and ``x`` itself or apart
    from it (anything else goes through the full checks)."""
    if type(out) is not np.ndarray or out.shape != x.shape or out.dtype != x.dtype:
        return False
    f = out.flags
    return f.c_contiguous and f.writeable and (out is x or not np.may_share_memory(x, out))


class _SmallAllReduce:
    """The body of a small all-reduce: one exchange, then every rank reduces
    the N contributions in rank order (all_reduce.direct, in one round)."""

    __slots__ = ("x", "out", "uf", "avg")

    def __init__(self, x, out, uf, avg):
        self.x, self.out, self.uf, self.avg = x, out, uf, avg

    def __call__(self, ep):
        v = ep.exchange(self.x)
        out, uf = self.out, self.uf
        of = out if out.ndim == 1 else out.reshape(-1)
        uf(v[0], v[1], of)
        for w in v[2:]:
            uf(of, w, of)
        if self.avg:
            np.true_divide(of, ep.size, out=of)
        return out


def _nothing(*args) -> None:
    """The algorithm of a collective whose payload is empty."""


class _P2PWork(Work):
    """Handle of isend/irecv: progress happens in ``wait``/``done``."""

    def __init__(self, comm: Communicator, req, result, name: str):
        super().__init__(None, name)
        self._comm, self._req, self._result = comm, req, result

    def done(self) -> bool:
        return self._comm._p2p(self.name, self._req.done)

    def wait(self, timeout: float | None = None):
        self._comm._p2p(self.name, self._req.wait)
        return self._result


__all__ = ["init", "Communicator", "Traffic"]
