"""The Communicator: checks arguments, picks an algorithm, runs it in order."""
from __future__ import annotations

import array
import math
import weakref
from typing import Any, Callable

import numpy as np

from transports import (CollectiveError, CollectiveTimeout, KINDS, PeerFailure, Transport,
                        open_transport)
from transports.base import UNCHECKED, Endpoint, broken_error
from transports.errors import describe

from . import arguments as args
from . import callkey, debug, kernels, objects, prefix, regions, runtime, selection, variable
from . import validate as v
from .debug import CollectiveMismatch
from . import tuning as tuning_file
from .adapt import Choice, Chooser
from . import all_gather as _all_gather
from . import reduce_scatter as _reduce_scatter
from .all_reduce import doubling_plan, recursive_doubling
from .families import FAMILIES, MORE, offered
from .topology import HostsInfo
from .dtypes import is_inexact
from .ops import REDUCERS, Op, divide, quietly, resolve
from .p2p import PointToPoint
from .small import Lane, Quick, SmallAllReduce, SmallByMessages, plain_out
from .arrays import adopt, empty
from .callkey import BYTES_AT
from .traffic import Traffic
from .work import Executor, Work
from transports import _native
_lane = getattr(_native, "mpi_lane", None)  # None where the compiled steps are not built


def init(transport: str = "auto", timeout: float | None = None,
         debug: bool | None = None, tuning=None) -> "Communicator":
    """Join the job launched by mpiexec and connect all its ranks.

    ``transport``: "auto", "shm", "mpi", "cuda" or "hier" (docs/api.md,
    "Hosts").  "auto" takes "cuda" where every rank is on one host, has
    imported CuPy and sees a GPU; "shm" on one host otherwise; "hier"
    across hosts (shared memory within each, MPI between them), or "mpi"
    where shared memory is not supported (transports/__init__.py).
    ``timeout``: seconds a rank waits
    for its peers without progress before CollectiveTimeout (default
    $COLLECTIVES_TIMEOUT, else 300).  ``debug``: check before every
    collective that all ranks called the same thing (default
    $COLLECTIVES_DEBUG=1; collectives/debug.py).  ``tuning``: a tuning file
    written by ``python -m bench tune`` (default $COLLECTIVES_TUNING;
    collectives/tuning.py): its choices take precedence over the built-in
    selection table where it was made for this job's ranks and hosts.
    """
    if transport not in KINDS:
        raise ValueError(f"init: transport must be one of {KINDS}, got {transport!r}")
    timeout, debug = runtime.settings(timeout, debug)
    tuned = runtime.tuning(tuning)  # a malformed file fails here, before any connection
    from mpi4py import MPI
    runtime.abort_on_uncaught(MPI)
    mpicomm = MPI.COMM_WORLD.Dup()
    try:
        t = open_transport(transport, mpicomm, timeout)
    except BaseException:
        mpicomm.Free()
        raise
    return Communicator(mpicomm, t, debug, tuned, warn=True)


KINDS_KEPT = 16  # arrays whose kind a communicator remembers (Communicator._kind)


class Communicator(HostsInfo):
    """A group of ranks and every collective and point-to-point call among them.

    Arrays are numpy arrays of any shape, C-contiguous, of the dtypes in
    ``collectives.DTYPES``; on the "cuda" transport CuPy arrays too (of those
    dtypes but bfloat16, which CuPy cannot reduce).  Every
    collective takes ``async_op`` and ``algorithm``; see docs/api.md.
    """

    def __init__(self, mpicomm, transport: Transport, debug: bool = False, tuning=None,
                 warn: bool = False):
        self._debug = debug
        self._mpi = mpicomm
        self._t = transport
        self.rank: int = transport.rank
        self.size: int = transport.size
        self.timeout: float = transport.timeout
        caps = transport.caps  # what the transport offers (transports/base.py)
        # the CUDA device whose CuPy arrays this communicator takes (None: numpy only)
        self._device: int | None = caps.device
        # exchange() through shared memory: the defaults take the staged algorithms
        self._shared = caps.shared_exchange
        # the hier transport's host layout (None elsewhere): its algorithms and choice
        self._hosts = transport.hosts if caps.hier else None
        # and peers read each other's arrays where they lie (one_copy.py)
        self._one_copy = caps.one_copy
        # call -> the algorithms offered here, by name (families.offered)
        self._tables = offered(caps, self._hosts)
        # all_to_all_v without recv_counts learns them in its first round
        # (variable.all_to_all_v_learned), which reads the rest in place where offered
        a2a = self._tables["all_to_all_v"]
        self._learns = None if self.size == 1 or "staged" not in a2a else \
            "one_copy_or_staged" in a2a
        # the variable-count calls without counts learn them from their
        # messages' sizes where the collective endpoint can probe them (shm,
        # mpi; all_gather_v and all_to_all_v on shm learn them in a round)
        self._probes = self.size > 1 and type(transport.coll).probe is not Endpoint.probe
        # the default choices: the selection table, a tuning file, adaptation
        hosts = transport.hosts
        layout = tuple(hosts.host_of.count(h) for h in range(hosts.hosts))
        self._tuning = tuning
        fits = tuning_file.fitting(tuning, self.size, layout, transport.name,
                                   warn and self.rank == 0)
        where = selection.Where(self.size, self._shared, self._one_copy, caps.hier,
                                hosts.equal, hosts.local_size)
        self._choose = Chooser(where, self._tables, fits, runtime.adapting(fits),
                               one_clock=hosts.one_clock)
        self._uncounted = Traffic()  # the agreements of adaptation (adapt.py)
        # id(array) -> (a weak reference to it, its kind): the kinds of the
        # arrays the default was last asked about (an array's kind is fixed
        # while it lives; finding it costs a walk of the regions)
        self._kinds: dict = {}
        # all_reduce of up to this many bytes skips the scheduling (see there)
        self._small = selection.SMALL_ALL_REDUCE_BYTES if not debug and self.size > 1 \
            and transport.name != "cuda" else 0
        # (op, dtype) -> (ufunc, avg, ieee, call key's fields) for the pairs
        # all_reduce has checked
        self._small_ok: dict = {}
        # where messages move (mpi, hier): the endpoint of the small calls'
        # compiled steps (_planned; hier's flat part, whose ranks are the
        # communicator's), all_reduce's recursive doubling plan there, and
        # whether the defaults are adaptation's current choices (Chooser.quick)
        self._msgs = transport.coll.flat if caps.hier else transport.coll
        self._plan = doubling_plan(self.rank, self.size)
        self._quick_ok = self._choose.adapt
        # all_gather and reduce_scatter of up to _small bytes take such a way
        # too where messages move (_small_call), for the (call, op, dtype,
        # shape) the general path has accepted: -> small.Lane
        self._lanes = bool(self._small) and not self._shared
        self._fast: dict = {}
        self._forms = (Chooser.forms("plain", False), Chooser.forms("plain", True))
        self._lows: dict = {}  # (call, dtype, op, root) -> its call key's fields
        # the sequence number of the last collective, and whether compiled
        # small calls (small.Lane's ``c``) may run: not while calls are
        # queued, after a failure, once closed (_small_call opens it)
        self._seqs = array.array("q", [0, 0])
        self._where = (self.rank, self.size, self._device)  # what arguments.py checks against
        self._exec = Executor(f"{transport.name}-{self.rank}")
        self._broken: BaseException | None = None
        self._p2p = PointToPoint(transport.p2p, self.rank, self.size, self._device)
        self._closed = False
        runtime.track(self)

    @property
    def _seq(self) -> int:
        return self._seqs[0]

    @_seq.setter
    def _seq(self, n: int) -> None:
        self._seqs[0] = n

    # -- properties -----------------------------------------------------------
    @property
    def transport(self) -> str:
        return self._t.name

    @property
    def adaptive(self) -> bool:
        """Whether ``algorithm=None`` adapts its choice at run time
        (collectives/adapt.py; off with COLLECTIVES_ADAPT=0,
        COLLECTIVES_DETERMINISTIC=1 or a tuning file's "adapt": false)."""
        return self._choose.adapt

    @property
    def traffic(self) -> Traffic:
        return self._counters() - self._uncounted

    def _counters(self) -> Traffic:
        """The transport's byte counters, the compiled small calls' included."""
        if self._lanes:
            self._msgs.flush_lanes()
        return Traffic.of(self._t)

    def algorithms(self, name: str) -> list[str]:
        """The names that ``algorithm=`` accepts for collective ``name`` on this
        communicator, in table order: what its transport offers
        (``transports.base.Capabilities``; docs/algorithms.md)."""
        return list(self._family("algorithms", name))

    def choose_algorithm(self, name: str, nbytes: int, kind: str | None = None) -> Choice:
        """The algorithm that ``algorithm=None`` picks for ``name`` on a message of
        ``nbytes`` (the input's nbytes: x for most calls, buf for broadcast,
        one block for gather and scatter) on arrays of ``kind`` ("plain",
        "allocated": from ``comm.empty``/``zeros``, "device": CuPy's; default
        plain) on this communicator: a str whose ``source`` says where the
        choice came from ("table", "tuning" or "adapted"; collectives/adapt.py)."""
        self._family("choose_algorithm", name)
        nbytes = v.integer("choose_algorithm", "nbytes", nbytes)
        if nbytes < 0:
            raise ValueError(f"choose_algorithm: nbytes must be >= 0, got {nbytes}")
        kind = "plain" if kind is None else kind
        if kind not in selection.KINDS:
            raise ValueError(f"choose_algorithm: kind must be one of {selection.KINDS}, "
                             f"got {kind!r}")
        return self._choose.current(name, nbytes, kind)

    def _family(self, call: str, name: str) -> dict:
        """The algorithms offered here for collective ``name`` (``call``: the
        method asking, named in the error)."""
        if name not in self._tables:
            raise ValueError(f"{call}: unknown collective {name!r}; expected one of "
                             f"{sorted(self._tables)}")
        return self._tables[name]

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._t.name
        return f"<Communicator rank {self.rank} of {self.size} ({state})>"

    # -- machinery ------------------------------------------------------------
    def _open(self, call: str) -> None:
        if self._closed:
            raise ValueError(f"{call}: the communicator is closed")

    def _pick(self, call: str, algorithm, nbytes: int, a=None, o=None
              ) -> tuple[str | None, Callable]:
        """The algorithm ``call`` runs: its name (for the debug signature; None
        for the default) and ``run(ep, *args)`` (collectives/algorithm.py: one
        shape per family; a communicator of one rank runs the family's
        ``alone``).  The default is chosen when the call runs, in order
        (adapt.py); ``a``: the array whose kind it takes into account, ``o``
        the result array (the call is in place where they overlap)."""
        family = FAMILIES[call]
        name = v.algorithm(call, algorithm, self._tables[call], family)
        if nbytes == 0 and call != "barrier":
            return name, self._meet()
        if name is not None:
            return name, lambda ep, *args: family.run(name, ep, *args)
        kind = self._kind(a)
        in_place = o is not None and kind != "device" and (o is a or np.may_share_memory(a, o))
        choose = self._choose
        return None, lambda ep, *args: choose.run(call, nbytes, kind, in_place, ep, args,
                                                  self._agree)

    def _meet(self) -> Callable:
        """What an empty call runs: it moves nothing, but its ranks meet in a
        barrier (under the call's key), so that a rank whose peers pass
        elements raises with them, as for any other difference in size,
        instead of returning."""
        bar, meet = FAMILIES["barrier"], self._choose.base("barrier", 0)
        return lambda ep, *args: bar.run(meet, ep)

    def _kind(self, a) -> str:
        """The array kind of ``a`` (selection.KINDS), remembered for the
        last few arrays (by a weak reference: a remembered array may go)."""
        if a is None:
            return "plain"
        kinds = self._kinds
        seen = kinds.get(id(a))
        if seen is not None and seen[0]() is a:
            return seen[1]
        if self._on_device(a):
            kind = "device"
        else:
            regions = self._t.regions
            kind = "allocated" if regions is not None and regions.locate(a) is not None \
                else "plain"
        if len(kinds) >= KINDS_KEPT:
            kinds.clear()
        try:
            kinds[id(a)] = (weakref.ref(a), kind)
        except TypeError:  # an array type without weak references: not kept
            pass
        return kind

    def _agree(self, ep, vec: np.ndarray) -> None:
        """The all-reduce (max, in place) by which adaptation's ranks agree
        (adapt.py), left out of the traffic counters."""
        before = self._counters()
        alg = selection.choose("all_reduce", vec.nbytes, self.size, self._shared)
        FAMILIES["all_reduce"].run(alg, ep, vec, vec, REDUCERS[Op.MAX])
        self._uncounted += self._counters() - before

    def _on_device(self, a) -> bool:
        """Whether ``a`` (a checked array) is a CuPy array."""
        return self._device is not None and not isinstance(a, np.ndarray)

    def _run(self, call: str, body: Callable[[Any], Any], async_op: bool, sig: tuple,
             on_device: bool = False, ieee: bool = False, counts: tuple | None = None):
        """Queue ``body(endpoint)`` as the next collective of this communicator.
        ``sig``: (count, dtype, op, root, algorithm name), what the ranks
        compare in debug mode.  ``on_device``: the arrays are CuPy's; the
        transport orders the call's GPU work after the caller's and returns
        once it is done.  ``ieee``: a floating reduction, run with numpy's
        floating-point warnings off (ops.quietly).  ``counts``: a
        variable-count call's counts, which its call key holds (a hash)."""
        if on_device:
            body = self._t.on_device(body, call)
        self._seq += 1
        seq = self._seq
        mine = None
        if self._debug:  # what every rank must agree on (collectives/debug.py)
            mine = debug.signature(call, seq, *sig)
        count, dtype, op, root = sig[:4]
        # the call key: what every rank's call must agree on (callkey.py)
        low = self._lows.get((call, dtype, op, root))
        if low is None:
            if len(self._lows) > 4096:
                self._lows.clear()
            low = self._lows[call, dtype, op, root] = callkey.low(call, dtype, op, root)
        if counts is not None:
            low = callkey.counted(low, counts)
        key = callkey.key(count * dtype.itemsize if dtype is not None else 0, low)
        rooted = call in _ROOTED
        if async_op:  # the worker may be in MPI: no compiled small call meanwhile
            self._seqs[1] = 0
        return self._exec.submit(lambda: self._execute(call, seq, body, ieee, mine, key, rooted),
                                 call, bool(async_op))

    def _move(self, call: str, alg: Callable, args: tuple, result, async_op: bool,
              sig: tuple, like=None, counts: tuple | None = None):
        """``_run`` of a call that moves data without reducing it: ``alg(ep,
        *args)``, then ``result``; ``like``: one of the call's arrays (whether
        they are CuPy's)."""
        def body(ep):
            alg(ep, *args)
            return result
        return self._run(call, body, async_op, sig, like is not None and self._on_device(like),
                         counts=counts)

    def _execute(self, call: str, seq: int, body: Callable[[Any], Any], ieee: bool,
                 mine=None, key: int = 0, rooted: bool = False):
        """Run collective ``seq``'s ``body(endpoint)`` now (in order: the caller
        is the executor, or nothing is queued).  ``key``: its call key (the
        bytes that every rank's call moves alike, with its call, dtype, op,
        root and counts: callkey.py): the transport carries it on every
        message and exchange, so that a rank whose call differs is caught
        without debug mode.  ``rooted``: a call in which a rank may only
        send, which then looks for what a disagreeing peer sent it."""
        if self._broken is not None:
            raise broken_error(self._broken, call)
        ep = self._t.coll
        # debug mode compares sizes in its signatures first (UNCHECKED meanwhile)
        ep.begin(seq, key if mine is None else UNCHECKED, call)
        self._t.set_arrived(seq, ep.call_bytes)
        try:
            if mine is not None:
                debug.check(ep.exchange(mine))
                ep.call_bytes = key
            if not rooted:
                return quietly(body, ep) if ieee else body(ep)
            got = ep.recv_bytes
            result = quietly(body, ep) if ieee else body(ep)
            if ep.recv_bytes == got:  # this rank only sent: did a peer refuse it?
                self._t.unclaimed(seq)
            return result
        except BaseException as e:
            self._failed(e, call, seq)
            raise

    def _failed(self, e: BaseException, call: str, seq: int) -> None:
        """Collective ``seq`` raised ``e``: name the call in it; unless it is
        a mismatch, the communicator is broken from here on, and the other
        ranks are told where they would otherwise wait for this one."""
        if isinstance(e, CollectiveMismatch):
            # found on every rank before any payload moves: the ranks are
            # still in step, and the communicator stays usable
            e.call = e.call or call
            return
        if isinstance(e, CollectiveError):
            e.call = e.call or call
            self._t.name_hosts(e)
        self._broken = e
        self._seqs[1] = 0
        self._t.broken = True
        own = not getattr(e, "relayed", False)
        caps = self._t.caps
        if _news(e) or (own and isinstance(e, PeerFailure) and caps.relays_deaths) or \
                (own and isinstance(e, CollectiveTimeout) and caps.relays_timeouts):
            # the other ranks would wait for this one until their timeout
            what = describe(e)
            at = getattr(e, "seq", seq)  # an earlier call's stray concerns that call
            where = f"{call} #{at}" if at == seq else f"collective #{at}"
            self._t.notify(at, f"rank {self.rank} detected an error in {where}: {what}",
                           skip=_lost(e))

    def _lane_of(self, call: str, op, x: np.ndarray, oshape: tuple, o) -> None:
        """Note a small all_gather or reduce_scatter (``op`` as given, ``o``
        resolved; None for all_gather) that the general path has accepted
        on ``x``, for ``_small_call``: where messages move, on a numpy
        array of up to ``_small`` bytes."""
        if not (self._lanes and type(x) is np.ndarray and 0 < x.nbytes <= self._small) \
                or (call, op, x.dtype, x.shape) in self._fast:
            return
        if len(self._fast) > 4096:
            self._fast.clear()
        uf = None if o is None else REDUCERS[o]
        self._fast[call, op, x.dtype, x.shape] = Lane(
            call, x.nbytes, callkey.key(x.nbytes, callkey.low(call, x.dtype, o)), is_inexact(x.dtype),
            o is Op.AVG, uf, None if uf is None else kernels.fused(uf.name, x.dtype), oshape,
            x.size // self.size if o is not None else x.size, x.dtype)

    def _small_call(self, ln: Lane, x: np.ndarray, out):
        """A small all_gather or reduce_scatter on arrays like those the
        general path accepted (``ln``), that its compiled call did not take:
        a try's algorithm as one compiled call where adaptation runs one
        (``_lane_try``); out of place, the current choice
        (adapt.py, ``Chooser.quick``), as one compiled call where it is a
        plan (``_way``); where adaptation has more to do (a try, a timed
        call, an agreement), ``Chooser.run``; with adaptation off, the
        settled choice (``Chooser.steady``).  None where the arrays call for
        the general path."""
        if ln.ids:  # a try's algorithm, compiled (_lane_try)
            ran = self._lane_try(ln, x, out)
            if ran is not None:
                return ran
        if not x.flags.c_contiguous or self._exec.pending or self._closed:
            return None
        if out is None:
            out = np.empty(ln.oshape, x.dtype)
        elif not plain_out(x, out, ln.oshape):
            return None
        # the current choice, counted as run: adaptation's (Chooser.quick),
        # else the settled one (Chooser.steady)
        arm = self._choose.quick(ln.call, ln.nbytes, self._forms[False]) if self._quick_ok \
            else self._choose.steady(ln.call, ln.nbytes)
        args = (x, out) if ln.uf is None else (x, out, ln.uf)
        if arm is None:
            # a try, a timed call, an agreement: adaptation's own way
            # (Chooser.run), as the general path's, without its layers, so
            # that tries are timed as the calls around them run
            choose, agree, call, nbytes = self._choose, self._agree, ln.call, ln.nbytes
            self._seq += 1
            return self._execute(call, self._seq, Quick(
                lambda ep, *a: choose.run(call, nbytes, "plain", False, ep, a, agree,
                                          lambda name, a: self._by_plan(ln, name, a)),
                args, out, ln.avg), ln.ieee, key=ln.key)
        way = ln.ways.get(arm.run)
        if way is None:
            way = ln.ways[arm.run] = self._way(ln, arm.run)
        plan, scratch = way or (None, None)
        if plan is not None and ln.run is not arm.run:
            self._compile(ln, arm.run, plan, scratch)
        if self._broken is None:
            self._seqs[1] = 1
        return self._planned(ln.call, ln.key, ln.ieee, ln.avg, arm.run, args, out, plan, x,
                             out if scratch is None else scratch, ln.red, ln.unit,
                             None if scratch is None else out)

    def _compile(self, ln: Lane, run, plan, scratch) -> None:
        """Make ``run``'s plan ``ln``'s compiled call (``ln.c``): the next
        calls like it are one C call (``_capsule``)."""
        ln.run, ln.c = run, self._capsule(ln, run, plan, scratch)

    def _capsule(self, ln: Lane, run, plan, scratch):
        """``ln``'s compiled steps of algorithm ``run`` (transports/_native.c,
        ``mpi_lane``: ``plan`` through ``scratch``, or in the output where
        None), made once: None where the transport has none, the kernel
        (if any) is not compiled, or the op is the average (a division after)."""
        if run in ln.caps:
            return ln.caps[run]
        c = None
        if _lane is not None and not ln.avg and (ln.uf is None or (
                ln.red is not None and kernels.compiled())):
            ln.cells = self._choose.cells(ln.call, ln.nbytes)
            # an all_gather's x may be its own block of out (in place): the
            # plans read x in their first copy alone
            c = self._msgs.lane(plan, scratch, ln.red, ln.unit * ln.dtype.itemsize, ln.key,
                                self._seqs, ln.cells, id(run), self._t.arrival_board(),
                                ln.nbytes, ln.dtype, ln.oshape,
                                self.rank * ln.nbytes if ln.call == "all_gather" else -1)
            if c is not None:
                ln.ids[id(run)] = (c, run)
        ln.caps[run] = c
        return c

    def _lane_try(self, ln: Lane, x: np.ndarray, out):
        """A compiled call of the algorithm that adaptation has ``ln``'s
        size class run now where that is not ``ln.run`` (a try's calls:
        adapt.py, ``_Class.sync``), as ``mpi_lane`` answers; None where it
        has no compiled steps here or does not take the call."""
        hit = ln.ids.get(ln.cells[2])
        if hit is None or hit[0] is ln.c:
            return None
        ran = _lane(hit[0], x, out)
        return ran if type(ran) is not tuple else self._lane_late(ln, x, ran, hit[1])

    def _lane_late(self, ln: Lane, x: np.ndarray, res: tuple, run=None):
        """Go on with a compiled small call of ``run`` (``ln.run`` where
        None: ``_compile``) that stopped at an unfinished step: ``res`` is
        (out, seq, step, its state...)."""
        out, seq = res[0], res[1]
        self._t.coll.begin(seq, ln.key, ln.call)
        try:
            self._go_on(ln, ln.run if run is None else run, x, out, res[2:])
            return out
        except BaseException as e:
            self._failed(e, ln.call, seq)
            raise

    def _go_on(self, ln: Lane, run, x, out, res: tuple) -> None:
        """Finish ``run``'s compiled steps (``_capsule``) on ``x`` into ``out``
        in Python from the step where they stopped (``res``: as
        ``mpi_steps`` returns it)."""
        plan, scratch = ln.ways[run]
        self._msgs.late_lane(plan, res, x, out if scratch is None else scratch, ln.red, ln.uf,
                             ln.unit * ln.dtype.itemsize, None if scratch is None else out)

    def _doubling_lane(self, op: str, x: np.ndarray, key: int, ieee: bool, uf, red) -> None:
        """Give a small all_reduce of ``op`` on arrays like ``x`` (out of
        place) recursive doubling's compiled steps, as the small
        all_gather's (``_compile``): the next such calls are one C call."""
        k = ("all_reduce", op, x.dtype, x.shape)
        ln = self._fast.get(k)
        if ln is None:
            if len(self._fast) > 4096:
                self._fast.clear()
            ln = self._fast[k] = Lane("all_reduce", x.nbytes, key, ieee, False, uf, red, x.shape,
                                      x.size, x.dtype)
            ln.ways[recursive_doubling] = (self._plan, None)
        if ln.run is not recursive_doubling:
            self._compile(ln, recursive_doubling, self._plan, None)
        if self._broken is None:
            self._seqs[1] = 1

    def _doubling(self, red):
        """The small all_reduce's ``compiled`` for Chooser.run: recursive
        doubling as its plan, as ``_planned`` runs the current choice."""
        if red is not None and not kernels.compiled():
            red = None

        def compiled(name: str, args: tuple) -> bool:
            return name == "recursive_doubling" and red is not None and \
                self._msgs.steps(self._plan, args[0], args[1], red, args[2])
        return compiled

    def _by_plan(self, ln: Lane, name: str, args: tuple) -> bool:
        """Run algorithm ``name`` of ``ln``'s call on ``args`` (x and out,
        flat; the ufunc) as the calls of the current choice run (a try of
        adaptation's times that, not the algorithm's Python): its compiled
        steps (``_capsule``) in the collective begun, else its plan through
        ``Endpoint.steps``; False where it has no plan, or the transport no
        such call: nothing has moved."""
        run = FAMILIES[ln.call][name].run
        way = ln.ways.get(run)
        if way is None:
            way = ln.ways[run] = self._way(ln, run)
        if not way:
            return False
        x, out = args[0], args[1]
        c = self._capsule(ln, run, *way)
        if c is not None:
            res = _lane(c, x, out, True)
            if type(res) is tuple:
                self._go_on(ln, run, x, out, res[2:])
            if res is not None:
                return True
        plan, scratch = way
        red = ln.red if kernels.compiled() else None
        return self._msgs.steps(plan, x, out if scratch is None else scratch, red, ln.uf,
                                ln.unit, None if scratch is None else out)

    def _way(self, ln: Lane, run):
        """``run``'s plan for ``ln`` and its scratch buffer (None: the plan
        fills the result), or False where ``run`` is not written as a plan."""
        r, n = self.rank, self.size
        if ln.uf is None:
            if run is _all_gather.recursive_doubling:
                return _all_gather.doubling_plan(r, n), None
            plan = run is _all_gather.bruck and _all_gather.bruck_plan(r, n)
        elif run is _reduce_scatter.recursive_halving:
            plan = _reduce_scatter.halving_plan(r, n)
        else:
            plan = run is _reduce_scatter.recursive_doubling and _reduce_scatter.doubling_plan(r, n)
        return plan and (plan, np.empty(ln.unit * n, ln.dtype))  # block i of the whole

    def _planned(self, call: str, key: int, ieee: bool, avg: bool, run, args: tuple, result,
                 plan=None, src=None, buf=None, red=None, unit: int = 0, dst=None):
        """A small call of the current choice ``run`` on ``args`` (arrays
        contiguous) with ``_execute``'s bookkeeping and none of the layers
        around the algorithm: ``plan`` (plans.py) from ``src`` on ``buf``
        into ``dst``, reduced by the kernel ``red``, in one compiled call
        where the transport has one (``Endpoint.steps``); else ``run``.
        Then the average's division (``avg``), ``result``."""
        self._seq += 1
        seq = self._seq
        if self._broken is not None:
            raise broken_error(self._broken, call)
        t = self._t
        ep = t.coll
        ep.begin(seq, key, call)
        t.set_arrived(seq, key)
        if red is not None and not kernels.compiled():  # kernels.use("numpy") since
            red = None
        try:
            if plan is not None and self._msgs.steps(plan, src, buf, red,
                                                     args[2] if len(args) > 2 else None, unit, dst):
                if avg:
                    divide(args[1], self.size)
            else:
                body = Quick(run, args, result, avg)
                quietly(body, ep) if ieee else body(ep)
            return result
        except BaseException as e:
            self._failed(e, call, seq)
            raise

    def _avg(self, op: Op, arr: np.ndarray) -> None:
        if op is Op.AVG:
            divide(arr, self.size)

    # -- collectives ----------------------------------------------------------
    def broadcast(self, buf: np.ndarray, root: int = 0, *, algorithm: str | None = None,
                  async_op: bool = False):
        """Fill ``buf`` on every rank with root's ``buf``; returns ``buf``."""
        c = "broadcast"
        self._open(c)
        buf = adopt(buf)
        v.array(c, "buf", buf, writable=True, device=self._device)
        root = v.rank(c, "root", root, self.size)
        name, alg = self._pick(c, algorithm, buf.nbytes, buf)
        flat = buf.reshape(-1)

        return self._move(c, alg, (flat, root), buf, async_op,
                          (buf.size, buf.dtype, None, root, name), buf)

    def scatter(self, x, out: np.ndarray, root: int = 0, *, algorithm: str | None = None,
                async_op: bool = False):
        """``out`` on rank i = root's ``x[i]``; ``x`` (shape (size, *out.shape)) on root
        only, where ``out`` may be ``x[root]`` (in place)."""
        c = "scatter"
        self._open(c)
        x, out = adopt(x), adopt(out)
        root, xf = args.scatter(x, out, root, *self._where)
        name, alg = self._pick(c, algorithm, out.nbytes, out)
        return self._move(c, alg, (xf, out.reshape(-1), root), out, async_op,
                          (out.size, out.dtype, None, root, name), out)

    def gather(self, x: np.ndarray, out: np.ndarray | None = None, root: int = 0, *,
               algorithm: str | None = None, async_op: bool = False):
        """On root, ``out[i]`` = rank i's ``x`` (shape (size, *x.shape)), where ``x`` may
        be ``out[root]`` (in place); None elsewhere."""
        c = "gather"
        self._open(c)
        x, out = adopt(x), adopt(out)
        root, out = args.gather(x, out, root, *self._where)
        name, alg = self._pick(c, algorithm, x.nbytes, x, out)
        of = None if out is None else out.reshape(-1)
        return self._move(c, alg, (x.reshape(-1), of, root), out, async_op,
                          (x.size, x.dtype, None, root, name), x)

    def reduce(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", root: int = 0, *,
               algorithm: str | None = None, async_op: bool = False):
        """On root, the elementwise reduction of every rank's ``x``; None elsewhere."""
        c = "reduce"
        self._open(c)
        x, out = adopt(x), adopt(out)
        v.array(c, "x", x, device=self._device)
        o = resolve(op, x.dtype)
        root = v.rank(c, "root", root, self.size)
        in_place = False
        if self.rank == root:
            out, in_place = args.result(c, x, out, x.shape, "the shape of x", self._device)
        else:
            out = None
        name, alg = self._pick(c, algorithm, x.nbytes, x, out)
        of = None if out is None else out.reshape(-1)
        xf = of if in_place else x.reshape(-1)  # the algorithm sees in place as x is out
        uf = REDUCERS[o]

        def body(ep):
            alg(ep, xf, of, uf, root)
            if of is not None:
                self._avg(o, of)
            return out
        return self._run(c, body, async_op, (x.size, x.dtype, o, root, name),
                         self._on_device(x), is_inexact(x.dtype))

    def all_gather(self, x: np.ndarray, out: np.ndarray | None = None, *,
                   algorithm: str | None = None, async_op: bool = False):
        """``out[i]`` = rank i's ``x`` on every rank (shape (size, *x.shape))."""
        c = "all_gather"
        if self._lanes and type(x) is np.ndarray and algorithm is None and not async_op:
            # a small message where messages move, on arrays like those the
            # general path accepted: the current choice without its checks
            # and scheduling (_small_call)
            ln = self._fast.get((c, None, x.dtype, x.shape))
            if ln is not None:
                if ln.c is not None:  # one compiled call (_compile), or None: not now
                    ran = _lane(ln.c, x, out)
                    if ran is not None:
                        return ran if type(ran) is not tuple else self._lane_late(ln, x, ran)
                ran = self._small_call(ln, x, out)
                if ran is not None:
                    return ran
        self._open(c)
        x, out = adopt(x), adopt(out)
        v.array(c, "x", x, device=self._device)
        out = args.rows(c, x, out, *self._where)  # x may be out[rank] (in place)
        self._lane_of(c, None, x, out.shape, None)
        name, alg = self._pick(c, algorithm, x.nbytes, x, out)
        return self._move(c, alg, (x.reshape(-1), out.reshape(-1)), out, async_op,
                          (x.size, x.dtype, None, None, name), x)

    def reduce_scatter(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", *,
                       algorithm: str | None = None, async_op: bool = False):
        """Block ``rank`` of the reduction of every rank's ``x`` (shape (size, *s)) -> shape s."""
        c = "reduce_scatter"
        if self._lanes and type(x) is np.ndarray and algorithm is None and not async_op \
                and type(op) is str:
            ln = self._fast.get((c, op, x.dtype, x.shape))  # as all_gather's
            if ln is not None:
                if ln.c is not None:
                    ran = _lane(ln.c, x, out)
                    if ran is not None:
                        return ran if type(ran) is not tuple else self._lane_late(ln, x, ran)
                ran = self._small_call(ln, x, out)
                if ran is not None:
                    return ran
        self._open(c)
        x, out = adopt(x), adopt(out)
        v.array(c, "x", x, device=self._device)
        v.leading_size(c, x, self.size)
        o = resolve(op, x.dtype)
        out = args.reduce_scatter_out(x, out, *self._where)  # out may be x[rank] (in place)
        if type(op) is str:
            self._lane_of(c, op, x, out.shape, o)
        name, alg = self._pick(c, algorithm, x.nbytes, x, out)
        xf, of, uf = x.reshape(-1), out.reshape(-1), REDUCERS[o]

        def body(ep):
            alg(ep, xf, of, uf)
            self._avg(o, of)
            return out
        return self._run(c, body, async_op, (x.size, x.dtype, o, None, name),
                         self._on_device(x), is_inexact(x.dtype))

    def all_to_all(self, x: np.ndarray, out: np.ndarray | None = None, *,
                   algorithm: str | None = None, async_op: bool = False):
        """``out[j]`` = rank j's ``x[rank]``; x and out have shape (size, *s)."""
        c = "all_to_all"
        self._open(c)
        x, out = adopt(x), adopt(out)
        v.array(c, "x", x, device=self._device)
        v.leading_size(c, x, self.size)
        out, in_place = args.result(c, x, out, x.shape, "the shape of x", self._device)
        name, alg = self._pick(c, algorithm, x.nbytes, x, out)
        of = out.reshape(-1)
        xf = of if in_place else x.reshape(-1)  # the algorithm sees in place as x is out
        return self._move(c, alg, (xf, of), out, async_op,
                          (x.size, x.dtype, None, None, name), x)

    def all_reduce(self, x: np.ndarray, out: np.ndarray | None = None, op="sum", *,
                   algorithm: str | None = None, async_op: bool = False):
        """The elementwise reduction of every rank's ``x``, on every rank."""
        c = "all_reduce"
        if self._lanes and type(x) is np.ndarray and algorithm is None and not async_op \
                and type(op) is str:
            ln = self._fast.get((c, op, x.dtype, x.shape))  # _doubling_lane
            if ln is not None and ln.c is not None:
                ran = _lane(ln.c, x, out)
                if ran is not None:
                    return ran if type(ran) is not tuple else self._lane_late(ln, x, ran)
        if self._small and type(x) is np.ndarray and 0 < x.nbytes <= self._small \
                and algorithm is None and not async_op and isinstance(op, str) \
                and not self._exec.pending:
            # a small message on shared memory: what the general path below
            # runs ("direct", one round), without its scheduling, for arguments
            # it has accepted before (anything else takes that path and its
            # checks); collectives/small.py
            ok = self._small_ok.get((op, x.dtype))
            if ok is not None and x.flags.c_contiguous and not self._closed and (
                    out is None or plain_out(x, out)):
                if out is None:
                    out = np.empty(x.shape, x.dtype)
                uf, avg, ieee, low, red = ok
                key = low | x.nbytes << BYTES_AT  # callkey.key
                if self._shared:
                    body = SmallAllReduce(x, out, uf, avg)
                else:
                    # most calls run the current choice (adapt.py, Chooser.quick;
                    # the settled one, adaptation off)
                    arm = self._choose.quick(c, x.nbytes, self._forms[x is out]) \
                        if self._quick_ok else self._choose.steady(c, x.nbytes)
                    if arm and arm.run is recursive_doubling:
                        if self._lanes and x is not out and not avg:
                            self._doubling_lane(op, x, key, ieee, uf, red)
                        return self._planned(c, key, ieee, avg, recursive_doubling, (x, out, uf),
                                             out, self._plan, x, out, red)
                    body = SmallByMessages(x, out, uf, avg, self._choose, self._agree,
                                           arm.run if arm else None,
                                           None if arm else self._doubling(red))
                self._seq += 1
                return self._execute(c, self._seq, body, ieee, key=key)
        self._open(c)
        x, out = adopt(x), adopt(out)
        v.array(c, "x", x, device=self._device)
        o = resolve(op, x.dtype)
        out, in_place = args.result(c, x, out, x.shape, "the shape of x", self._device)
        nb = x.nbytes
        if self._small and isinstance(x, np.ndarray):
            uf = REDUCERS[o]
            self._small_ok[op, x.dtype] = (uf, o is Op.AVG, is_inexact(x.dtype),
                                           callkey.low(c, x.dtype, o), kernels.fused(uf.name, x.dtype))
        name, alg = self._pick(c, algorithm, nb, x, out)
        of, uf = out.reshape(-1), REDUCERS[o]
        xf = of if in_place else x.reshape(-1)  # the algorithm sees in place as x is out

        def body(ep):
            alg(ep, xf, of, uf)
            self._avg(o, of)
            return out
        return self._run(c, body, async_op, (x.size, x.dtype, o, None, name),
                         self._on_device(x), is_inexact(x.dtype))

    # -- variable counts (collectives/variable.py) ---------------------------
    def all_gather_v(self, x, counts=None, out=None, *, algorithm: str | None = None,
                     async_op: bool = False):
        """Every rank's ``x`` (rank i's has ``counts[i]`` rows) concatenated in
        rank order along the first axis, on every rank: shape (sum(counts),
        *x.shape[1:]).  ``counts`` None: on shm the first round tells every
        rank every count, on mpi the sizes of the messages do
        (``_all_gather_v_learned``); elsewhere the ranks agree them first
        (one small all_reduce).  ``x`` may be this rank's block of ``out``
        (in place)."""
        c = "all_gather_v"
        name, x, out = self._begin(c, algorithm, x, out)
        if counts is None and name is None and (self._learns is not None or self._probes) \
                and _row(x) and isinstance(x, np.ndarray):
            return self._all_gather_v_learned(c, x, out, async_op)
        cs = self._counts(c, counts, x)
        rest, row = x.shape[1:], _row(x)
        out = args.rows_out(c, x, out, sum(cs), rest, self._device, "(sum(counts), *x.shape[1:])")
        b = variable.bounds(cs, row)
        args.block_at(c, out, x, b[self.rank])
        of = out.reshape(-1)
        twin = (x.reshape(-1), of)
        return self._variable(c, name, cs, x, out, twin,
                              (x.reshape(-1), of, b), out, async_op,
                              (b[-1], x.dtype, None, None, name))

    def _all_gather_v_learned(self, c: str, x, out, async_op: bool):
        """The default ``all_gather_v`` without counts, no round of agreement
        before it: where the exchange goes through shared memory one
        collective whose first round tells every rank every count
        (variable.all_gather_v_learned), on mpi the sizes of the messages
        (variable.all_gather_v_probed); ``out``, where given, is checked here but for
        its rows, and for where ``x`` lies in it, which that round checks on
        every rank."""
        row = _row(x)
        own_at = args.offset_in(c, out, x) if self._learned_out(
            c, x, out, "(sum(counts), *x.shape[1:])") else -1
        xf, base = x.reshape(-1), self._choose.base
        if self._learns is None:  # mpi: each block's size from its message; a row's bytes in the key
            return self._learned(c, x, out, async_op, lambda ep, of, make:
                                 variable.all_gather_v_probed(ep, xf, of, row, own_at, make),
                                 (row, x.dtype, None, None, None))

        def how(nbytes: int) -> str:  # the rest of the longest block, as all_gather would
            return _REST.get(base("all_gather", nbytes), "staged")
        return self._learned(c, x, out, async_op, lambda ep, of, make:
                             variable.all_gather_v_learned(ep, xf, of, row, own_at, make, how))

    def gather_v(self, x, counts=None, out=None, root: int = 0, *,
                 algorithm: str | None = None, async_op: bool = False):
        """On root, every rank's ``x`` (rank i's has ``counts[i]`` rows)
        concatenated in rank order: shape (sum(counts), *x.shape[1:]); None
        elsewhere.  ``counts`` None: on shm and mpi root learns them from each
        rank's message (``_gather_v_learned``), elsewhere they are agreed first.  On
        root ``x`` may be root's block of ``out`` (in place)."""
        c = "gather_v"
        name, x, out = self._begin(c, algorithm, x, out)
        root = v.rank(c, "root", root, self.size)
        if counts is None and name is None and self._probes and _row(x) \
                and isinstance(x, np.ndarray):
            return self._gather_v_learned(c, x, out, root, async_op)
        cs = self._counts(c, counts, x)
        b = variable.bounds(cs, _row(x))
        of = None
        if self.rank == root:
            out = args.rows_out(c, x, out, sum(cs), x.shape[1:], self._device,
                                "(sum(counts), *x.shape[1:])")
            args.block_at(c, out, x, b[root])
            of = out.reshape(-1)
        else:
            out = None
        twin = (x.reshape(-1), of, root)
        return self._variable(c, name, cs, x, out, twin, (x.reshape(-1), of, b, root), out, async_op,
                              (b[-1], x.dtype, None, root, name))

    def _gather_v_learned(self, c: str, x, out, root: int, async_op: bool):
        """The default ``gather_v`` without counts where the collective
        endpoint probes its messages' sizes (shm, mpi): each rank sends root
        its block, whose size tells root its count (variable.gather_v_learned),
        no round of agreement before it;
        root's ``out``, where given, is checked here but for its rows, which
        root checks against the counts it receives.  The call key holds the
        bytes of a row (every rank's rows alike)."""
        row, own_at = _row(x), -1
        if self.rank == root:
            if self._learned_out(c, x, out, "(sum(counts), *x.shape[1:])"):
                own_at = args.offset_in(c, out, x)
        else:
            out = None
        xf = x.reshape(-1)
        return self._learned(c, x, out, async_op, lambda ep, of, make:
                             variable.gather_v_learned(ep, xf, of, row, own_at, root, make),
                             (row, x.dtype, None, root, None))

    def scatter_v(self, x, counts, out=None, root: int = 0, *, algorithm: str | None = None,
                  async_op: bool = False):
        """Rank i gets rows ``sum(counts[:i])`` to ``sum(counts[:i+1])`` of
        root's ``x``: shape (counts[i], *x.shape[1:]).  ``x`` is read on root
        only; elsewhere pass ``out``, or an ``x`` of the dtype and row shape
        of the result (its values unread), from which ``out`` is made.  On
        root ``out`` may be root's block of ``x`` (in place)."""
        c = "scatter_v"
        self._open(c)
        x, out = adopt(x), adopt(out)
        name = self._vname(c, algorithm)
        root = v.rank(c, "root", root, self.size)
        cs = args.counts(c, "counts", counts, self.size)
        me = self.rank
        if out is None:
            if x is None:
                raise ValueError(f"{c}: pass out, or an x whose dtype and row shape the "
                                 "result takes (on ranks other than root its values are unread)")
            v.array(c, "x", x, device=self._device)
            args.has_rows(c, "x", x)
            out = args.rows_out(c, x, None, cs[me], x.shape[1:], self._device, "")
        v.array(c, "out", out, writable=True, device=self._device)
        args.has_rows(c, "out", out)
        args.own_count(c, "counts", cs, me, out, "out")
        b = variable.bounds(cs, _row(out))
        xf = None
        if me == root:
            v.array(c, "x", x, device=self._device)
            v.same_kind(c, x, out)
            if x.shape != (sum(cs), *out.shape[1:]) or x.dtype != out.dtype:
                raise ValueError(f"{c}: x on root has shape {x.shape} and dtype {x.dtype}, "
                                 f"expected {(sum(cs), *out.shape[1:])} and {out.dtype} "
                                 "(sum(counts) rows shaped like out's)")
            args.block_at(c, x, out, b[root])
            xf = x.reshape(-1)
        twin = (xf, out.reshape(-1), root)
        return self._variable(c, name, cs, out, out, twin, (xf, out.reshape(-1), b, root), out,
                              async_op, (b[-1], out.dtype, None, root, name))

    def all_to_all_v(self, x, send_counts, recv_counts=None, out=None, *,
                     algorithm: str | None = None, async_op: bool = False):
        """``x`` holds the blocks for ranks 0..N-1 in order (``send_counts[j]``
        rows for rank j); the result the blocks from ranks 0..N-1
        (``recv_counts[j]`` rows from rank j), shape (sum(recv_counts),
        *x.shape[1:]).  ``recv_counts`` None: on shm the default's first round
        tells each rank what it receives (``_all_to_all_v_learned``), on mpi
        the sizes of its messages do; elsewhere the ranks agree every count
        first (one small all_reduce), and run the fixed-count all_to_all
        where all are equal."""
        c = "all_to_all_v"
        name, x, out = self._begin(c, algorithm, x, out)
        sc = args.counts(c, "send_counts", send_counts, self.size)
        args.rows_sum(c, "send_counts", sc, x)
        row = _row(x)
        if recv_counts is None and name is None and self._learns is not None and row:
            return self._all_to_all_v_learned(c, x, sc, row, out, async_op)
        if recv_counts is None and name is None and self._probes and row and \
                isinstance(x, np.ndarray):
            return self._all_to_all_v_learned(c, x, sc, row, out, async_op, probed=True)
        n, matrix = self.size, None
        if recv_counts is None:  # every rank's send_counts, to every rank
            matrix = self._every(sc).tolist()
            rc = tuple(int(matrix[j][self.rank]) for j in range(n))
        else:
            rc = args.counts(c, "recv_counts", recv_counts, self.size)
        out, in_place = args.result(c, x, out, (sum(rc), *x.shape[1:]),
                                    "(sum(recv_counts), *x.shape[1:])", self._device)
        if in_place:  # any other overlap is refused by args.result
            raise ValueError(f"{c}: out overlaps x; all_to_all_v has no in-place form")
        xf, of = x.reshape(-1), out.reshape(-1)
        vargs = (xf, of, variable.bounds(sc, row), variable.bounds(rc, row))
        if matrix is None:  # each rank knows its row and column of the matrix alone
            return self._move(c, self._more(c, name, 0), vargs, out, async_op,
                              (0, x.dtype, None, None, name), x)
        # the fixed-count twin where every count is equal; the counts in the
        # call key, which every rank knows
        flat = tuple(k for r in matrix for k in r)
        return self._variable(c, name, flat, x, out, (xf, of), vargs, out, async_op,
                              (sum(flat) * row, x.dtype, None, None, name),
                              equal=len(set(flat)) == 1)

    def _all_to_all_v_learned(self, c: str, x, sc: tuple, row: int, out, async_op: bool,
                              probed: bool = False):
        """The default ``all_to_all_v`` without ``recv_counts``, no round of
        agreement before it: where the exchange goes through shared memory,
        one collective whose first round tells each rank what it receives
        (variable.all_to_all_v_learned); elsewhere where the collective
        endpoint probes (``probed``: mpi), each rank takes what it receives
        from its messages' sizes (variable.all_to_all_v_probed).  ``out``,
        where given, is checked here but for its rows, which the call checks
        (``row``: the elements of a row of ``x``)."""
        if self._learned_out(c, x, out, "(sum(recv_counts), *x.shape[1:])") and \
                np.may_share_memory(x, out):
            raise ValueError(f"{c}: out overlaps x; all_to_all_v has no in-place form")
        sb, xf, read = variable.bounds(sc, row), x.reshape(-1), self._learns
        if probed:  # the call key carries a row's bytes
            return self._learned(c, x, out, async_op, lambda ep, of, make:
                                 variable.all_to_all_v_probed(ep, xf, of, sb, row, make),
                                 (row, x.dtype, None, None, None))
        return self._learned(c, x, out, async_op, lambda ep, of, make:
                             variable.all_to_all_v_learned(ep, xf, of, sb, row, make, read))

    def _learned_out(self, c: str, x, out, what: str) -> bool:
        """The checks of a learned call's ``out`` (where given: whether it
        is) but for its rows, which the call's first round checks on every
        rank."""
        if out is None:
            return False
        v.array(c, "out", out, writable=True, device=self._device)
        args.has_rows(c, "out", out)
        v.out(c, out, (out.shape[0], *x.shape[1:]), x, what, self._device)
        return True

    def _learned(self, c: str, x, out, async_op: bool, run: Callable,
                 sig: tuple | None = None):
        """Queue a call that learns in itself what each rank receives (the
        variable-count calls without counts): ``run(ep, out's flat
        view or None, make)`` returns the result, which ``make(elements)``
        makes (a new array shaped like ``x``'s rows, and its flat view)
        where ``out`` is None.  ``sig``: the call's (count, dtype, op, root,
        name) for its key (default: no count, x's dtype)."""
        rest, row = x.shape[1:], _row(x)
        of = None if out is None else out.reshape(-1)

        def make(elements: int):
            o = empty((elements // row, *rest), x)
            return o, o.reshape(-1)

        def body(ep):
            got = run(ep, of, make)
            return out if out is not None else got
        return self._run(c, body, async_op, sig or (0, x.dtype, None, None, None),
                         self._on_device(x))

    def reduce_scatter_v(self, x, counts, out=None, op="sum", *,
                         algorithm: str | None = None, async_op: bool = False):
        """Rank r gets block r (``counts[r]`` rows, from row sum(counts[:r]))
        of the elementwise reduction of every rank's ``x`` (sum(counts) rows).
        ``out`` may be this rank's block of ``x`` (in place)."""
        c = "reduce_scatter_v"
        name, x, out = self._begin(c, algorithm, x, out)
        o = resolve(op, x.dtype)
        cs = args.counts(c, "counts", counts, self.size)
        args.rows_sum(c, "counts", cs, x)
        me = self.rank
        out = args.rows_out(c, x, out, cs[me], x.shape[1:], self._device,
                            "(counts[rank], *x.shape[1:])")
        b = variable.bounds(cs, _row(x))
        args.block_at(c, x, out, b[me])
        xf, of, uf = x.reshape(-1), out.reshape(-1), REDUCERS[o]
        alg, twin = self._route(c, name, len(set(cs)) == 1, x, out, x.nbytes)
        run_args = (xf, of, uf) if twin else (xf, of, b, uf)

        def body(ep):
            alg(ep, *run_args)
            self._avg(o, of)
            return out
        return self._run(c, body, async_op, (b[-1], x.dtype, o, None, name),
                         self._on_device(x), is_inexact(x.dtype), counts=cs)

    # -- prefix reductions (collectives/prefix.py) -----------------------------
    def scan(self, x, out=None, op="sum", *, algorithm: str | None = None,
             async_op: bool = False):
        """On rank r, the elementwise reduction of the ``x`` of ranks 0 to r
        (inclusive), in rank order."""
        return self._prefix("scan", x, out, op, algorithm, async_op)

    def exscan(self, x, out=None, op="sum", *, algorithm: str | None = None,
               async_op: bool = False):
        """On rank r, the elementwise reduction of the ``x`` of ranks 0 to
        r - 1; on rank 0 the op's identity (``prefix.identity``: 0, 1, and
        for max and min the dtype's lowest and highest value, -inf and inf
        for floats)."""
        return self._prefix("exscan", x, out, op, algorithm, async_op)

    def _prefix(self, c: str, x, out, op, algorithm, async_op: bool):
        self._open(c)
        x, out = adopt(x), adopt(out)
        name = self._vname(c, algorithm)
        v.array(c, "x", x, device=self._device)
        o = resolve(op, x.dtype)
        if o is Op.AVG:
            raise ValueError(f"{c}: op 'avg' has no prefix form; use 'sum' and divide rank "
                             "r's result by r + 1")
        out, in_place = args.result(c, x, out, x.shape, "the shape of x", self._device)
        exclusive = c == "exscan"
        of = out.reshape(-1)
        # in place, an exclusive result overwrites x before it is sent on
        xf = (x.reshape(-1).copy() if exclusive else of) if in_place else x.reshape(-1)
        ident = prefix.identity(o.value, x.dtype) if exclusive else None
        uf = REDUCERS[o]
        alg = self._meet() if x.nbytes == 0 else self._more(c, name, x.nbytes)

        def body(ep):
            alg(ep, xf, of, uf, exclusive, ident)
            return out
        return self._run(c, body, async_op, (x.size, x.dtype, o, None, name),
                         self._on_device(x), is_inexact(x.dtype))

    # -- Python objects (collectives/objects.py: pickled; every call blocks) ----
    def broadcast_object(self, obj=None, root: int = 0):
        """Root's ``obj`` on every rank (root gets its own back)."""
        return objects.broadcast(self, obj, root)

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        return objects.all_gather(self, obj)

    def gather_object(self, obj, root: int = 0) -> list | None:
        """On root, every rank's ``obj`` in rank order; None elsewhere."""
        return objects.gather(self, obj, root)

    def scatter_object(self, objs=None, root: int = 0):
        """Rank i gets root's ``objs[i]`` (a sequence of one object per rank,
        read on root only)."""
        return objects.scatter(self, objs, root)

    def _vname(self, call: str, algorithm) -> str | None:
        return v.algorithm(call, algorithm, self._tables[call], MORE[call])

    def _begin(self, call: str, algorithm, x, out) -> tuple:
        """A variable-count call's first checks: the algorithm's name, and
        ``x`` (an array with rows) and ``out`` as arrays."""
        self._open(call)
        x, out = adopt(x), adopt(out)
        name = self._vname(call, algorithm)
        v.array(call, "x", x, device=self._device)
        args.has_rows(call, "x", x)
        return name, x, out

    def _counts(self, call: str, counts, x) -> tuple[int, ...]:
        """The ranks' counts: the caller's (checked against ``x``'s rows), or,
        for None, agreed now (``_every``)."""
        if counts is None:
            return tuple(self._every((x.shape[0],)).reshape(-1).tolist())
        cs = args.counts(call, "counts", counts, self.size)
        args.own_count(call, "counts", cs, self.rank, x)
        return cs

    def _every(self, mine: tuple) -> np.ndarray:
        """Every rank's ``mine`` (ints, as many on every rank), row by rank: an
        all_reduce (sum) of int64 rows, each rank filling its own: one round
        of the small all-reduce for up to 4 KiB of counts."""
        rows = np.zeros((self.size, len(mine)), np.int64)
        rows[self.rank] = mine
        return self.all_reduce(rows, out=rows)

    def _more(self, call: str, name, nbytes: int) -> Callable:
        """``run(ep, *args)`` of algorithm ``name`` of a call of ``MORE``, or
        of the table's where None (``nbytes``: the same on every rank: a
        variable-count call's whole concatenation)."""
        chosen = name or self._choose.base(call, nbytes)  # the table's row, remembered
        fam = MORE[call]
        return lambda ep, *args: fam.run(chosen, ep, *args)

    def _route(self, call: str, name, equal: bool, a, twin_out, nbytes: int) -> tuple:
        """A variable-count call's ``run(ep, *args)``, and whether it is its
        fixed-count twin's (with that call's choice, adaptation included):
        where every count is ``equal`` and no algorithm is named; else
        ``_more``.  ``a``: the array whose size and kind the twin's choice
        takes, ``twin_out`` its result."""
        if equal and name is None:
            return self._pick(variable.TWIN[call], None, a.nbytes, a, twin_out)[1], True
        return self._more(call, name, nbytes), False

    def _variable(self, call: str, name, cs, a, twin_out, twin_args: tuple, vargs: tuple,
                  result, async_op: bool, sig: tuple, equal: bool | None = None):
        """Queue variable-count call ``call`` (``_route``): its twin on
        ``twin_args``, or its own algorithm on ``vargs``; ``equal``: whether
        every count is (default: every one of ``cs``)."""
        if equal is None:
            equal = len(set(cs)) == 1
        alg, twin = self._route(call, name, equal, a, twin_out, sig[0] * sig[1].itemsize)
        return self._move(call, alg, twin_args if twin else vargs, result, async_op, sig, a, cs)

    def barrier(self, *, algorithm: str | None = None, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        c = "barrier"
        self._open(c)
        name, alg = self._pick(c, algorithm, 0)
        return self._move(c, alg, (), None, async_op, (0, None, None, None, name))

    # -- communicator-allocated arrays (collectives/regions.py) --------------
    def empty(self, shape, dtype=np.float64) -> np.ndarray:
        """A new C-contiguous array of ``shape`` and ``dtype`` that this host's
        peers read in place; collective: every rank calls it with the same
        shape and dtype.  Its contents are undefined."""
        return self._allocate("empty", shape, dtype, zero=False)

    def zeros(self, shape, dtype=np.float64) -> np.ndarray:
        """``empty``, filled with zeros."""
        return self._allocate("zeros", shape, dtype, zero=True)

    def _allocate(self, call: str, shape, dtype, zero: bool) -> np.ndarray:
        self._open(call)
        self._exec.drain()  # no call in flight while the ranks allocate
        if self._broken is not None:
            raise broken_error(self._broken, call)
        return regions.allocate(call, shape, dtype, zero, self._mpi, self._t)

    # -- point to point (collectives/p2p.py) ---------------------------------
    def isend(self, x: np.ndarray, dst: int, tag: int = 0) -> Work:
        """Start sending ``x`` to ``dst``; ``wait()`` returns once x may be reused."""
        self._open("isend")
        return self._p2p.send("isend", x, dst, tag)

    def irecv(self, out: np.ndarray, src: int, tag: int = 0) -> Work:
        """Start receiving into ``out`` from ``src``; ``wait()`` returns ``out``."""
        self._open("irecv")
        return self._p2p.recv("irecv", out, src, tag)

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> None:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused."""
        self._open("send")
        self._p2p.send("send", x, dst, tag).wait()

    def recv(self, out: np.ndarray, src: int, tag: int = 0) -> np.ndarray:
        """Receive into ``out`` (the shape and dtype that ``src`` sent); returns ``out``."""
        self._open("recv")
        return self._p2p.recv("recv", out, src, tag).wait()

    # -- sub-communicators and life cycle -----------------------------------
    def split(self, color: int, key: int | None = None) -> "Communicator | None":
        """Like MPI_Comm_split: ranks of one color form a communicator, ordered by
        ``key`` then parent rank.  A negative color gets None."""
        c = "split"
        self._open(c)
        color = v.integer(c, "color", color)
        key = self.rank if key is None else v.integer(c, "key", key)
        self._exec.drain()
        # MPI_Comm_split waits for a dead peer without a timeout: a barrier of
        # ours first (PeerFailure or CollectiveTimeout, never a hang), so that
        # the ranks enter it together and only a death inside it can hang
        self.barrier()
        from mpi4py import MPI
        sub = self._mpi.Split(MPI.UNDEFINED if color < 0 else color, key)
        if sub == MPI.COMM_NULL:
            return None
        try:
            t = open_transport(self._t.name, sub, self.timeout)
        except BaseException:
            sub.Free()
            raise
        return Communicator(sub, t, self._debug, self._tuning)

    def close(self) -> None:
        """Finish pending calls and release the transport; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._seqs[1] = 0
        if self._lanes:  # the lanes hold views of the transport's memory
            self._msgs.flush_lanes()
            self._fast.clear()
        runtime.untrack(self)
        try:
            self._exec.stop()
            if self._broken is None:
                self._t.left_over()
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


# the calls in which a rank's part may be only to send (a root, a leaf, the
# first of a chain): such a rank looks, once done, for what a peer that
# disagrees with it on the call (its root, say) sent it (Transport.unclaimed)
_ROOTED = frozenset(("broadcast", "scatter", "gather", "reduce", "gather_v", "scatter_v",
                     "scan", "exscan"))


# how all_gather_v_learned moves the rest of blocks longer than its first
# round, by all_gather's choice at the longest block's size
_REST = {"one_copy": "read", "one_copy_or_staged": "regions"}


def _row(x) -> int:
    """Elements per row of ``x`` (along its first axis)."""
    return math.prod(x.shape[1:])


def _lost(e: BaseException) -> list[int]:
    """The ranks that error ``e`` found dead or silent: a notice is not sent
    them (a message to a dead rank can stall MPI's send); the ranks of any
    other error are alive and are told."""
    return list(e.ranks) if isinstance(e, (PeerFailure, CollectiveTimeout)) else []


def _news(e: BaseException) -> bool:
    """Whether the other ranks of a call learn of error ``e`` only if this rank
    tells them: not a timeout or a dead peer, which each waiting rank finds
    for itself, nor what a peer told this rank."""
    return not isinstance(e, (CollectiveTimeout, PeerFailure, CollectiveMismatch)) and \
        not getattr(e, "relayed", False)


__all__ = ["init", "Communicator", "Traffic"]
