"""Conformance cases, run under mpiexec by the test modules.

    mpiexec -n N python tests/conformance.py TRANSPORT OUTDIR [FAMILY ...]

Every rank runs the cases of each family and checks its own result against
a numpy reference that it computes from all ranks' (deterministic) inputs
(``bench.data``), and, for the reducing calls, the bits the algorithm
promises: the same on every rank (all_reduce), those of the rank-order
reference (``RANK_ORDER``).  Each family runs on three communicators in turn
(``COMMS``), each over a fresh ``cc.init()``:

- ``world``: the communicator ``init`` gives, with every case of the family;
- ``dup``: ``world.split(0, rank)``, every rank in the same order (the
  library has no ``dup``), with a representative part of the family
  (``plan(..., lite=True)``: every algorithm, a few dtypes, ops, roots and
  counts, every out mode);
- ``split``: ``world.split(rank % 2, -rank)``, two halves at once with their
  ranks in reverse order, with the same part.

Under an emulated layout of hosts (tests/emulate.py) TRANSPORT is "hier",
and $CONFORMANCE_LITE makes ``world`` run the lite plan too.

Inputs depend on the communicator (``SALT``; the two halves of ``split``
differ), so a message that strays into another communicator gives a wrong
result.  Each rank writes OUTDIR/rank<r>.json: ``{family: {"cases": k,
"failures": [...], "seconds": t, "comms": {"world": k, "dup": k, "split":
k}}}``; every failure starts with the communicator it happened on, and this
rank's rank and size there.  A family that raises (a desynchronised job) is
recorded as an error and the next one starts on a fresh communicator.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import time
import traceback
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from bench.data import (DTYPES, expect, expect_bits, host, make, ops_for,  # noqa: E402
                        poison, reduced, stacked)
from expected_traffic import ring_all_reduce_uneven  # noqa: E402

BIG = (1 << 20) + 3  # "over a million elements"
MODES = ("new", "inplace", "out")
FULL_N = 3  # up to this size every root x op x dtype x out mode is run; above, a sample
SWEEP_N = 5  # up to this size every algorithm takes every dtype with every op; above, one op
# CONFORMANCE_NO_SWEEP (main): no dtype x op sweep, for jobs whose settings
# change nothing below 4 KiB (the sweep's cases are a few hundred bytes)
NO_SWEEP = False
COMMS = ("world", "dup", "split")
SALT = {"world": 0, "dup": 100_000, "split": 200_000}  # + 100,000 x color for split
# set (not empty): the world communicator runs the lite plan too (the
# emulated layouts of test_hosts.py sample the heavier ones so)
LITE_ENV = "CONFORMANCE_LITE"
LITE = [("float32", "sum"), ("int32", "max"), ("float64", "avg"), ("uint8", "prod"),
        ("int16", "min"), ("complex64", "sum")]  # the dtypes and ops of a lite plan

# The array module of the inputs and results: numpy, or CuPy for the "cuda"
# transport (the references are numpy arrays either way).
xp = np


def dev(a: np.ndarray):
    """``a`` on the side the transport under test moves (a copy on the GPU for cuda)."""
    return a if xp is np else xp.asarray(a)


LARGE = 100_000  # elements from which inputs and references are kept (``kept``)
_kept: dict = {}


def kept(fn, *args) -> np.ndarray:
    """``fn(*args)`` (make, reduced or stacked), read-only.  The large cases
    have the same inputs for every algorithm (``plan``), so their arrays are
    computed once per family and communicator (``run_family`` empties this)."""
    key = (fn.__name__, *args)
    v = _kept.get(key)
    if v is None:
        v = fn(*args)
        if v.size >= LARGE:
            v.flags.writeable = False
            _kept[key] = v
    return v


def block(shape: tuple) -> int:
    """The elements of one block of a blocked shape (N, ...)."""
    return int(np.prod(shape[1:], dtype=np.int64))


def mk(dtype, shape, rank: int, seed: int, op: str = "sum"):
    """Rank ``rank``'s input, a writable array of the module under test."""
    a = kept(make, dtype, shape, rank, seed, op)
    return dev(a) if xp is not np else a.copy() if not a.flags.writeable else a


def check(got, want: np.ndarray, what: str = "result") -> None:
    """``expect`` for a result of the array module under test."""
    if xp is not np:
        assert isinstance(got, xp.ndarray), f"{what} is {type(got).__name__}, not a CuPy array"
        got = xp.asnumpy(got)
    expect(got, want, what)


def unchanged(x, x0, what="x"):
    assert bool(xp.array_equal(x, x0)), f"{what} was modified"


# -- the bits that algorithms promise (docs/testing.md, "Bits") -----------------------

# The algorithms that reduce in rank order, ((x_0 op x_1) op x_2) op ..., so
# that their results are bit for bit ``reduced`` (docs/algorithms.md).  Checked
# on numpy arrays (a GPU need not round float16 as numpy's float32 route does).
RANK_ORDER = {"all_reduce": ("direct", "two_shot", "one_copy"), "reduce": ("direct", "one_copy"),
              "reduce_scatter": ("direct", "one_copy")}
# all_reduce algorithms in which each element is reduced on one rank and copied
COPIED = ("ring", "halving_doubling", "two_shot", "one_copy")


def complex_prod(dtype, op) -> bool:
    """numpy's complex multiplication is not reproducible bit for bit: its
    SIMD loops fuse multiply and add, other paths do not, and which one an
    element takes depends on the operands' layout (a·b and b·a differ; so
    can the same product in a 1-element and a 513-element array)."""
    return np.dtype(dtype).kind == "c" and op == "prod"


def in_rank_order(call: str, alg: str, dtype, op) -> bool:
    """Whether ``alg``'s result must be ``reduced``'s bits."""
    return xp is np and alg in RANK_ORDER.get(call, ()) and not complex_prod(dtype, op)


def same_bits_everywhere(alg: str, dtype, op) -> bool:
    """Whether all_reduce ``alg`` gives every rank the same bits: every
    algorithm does, but for complex ``prod`` only those that reduce each
    element once and copy it (``COPIED``): elsewhere ranks multiply for
    themselves, with operands swapped (``recursive_doubling``) or laid out
    differently (``complex_prod``)."""
    return alg in COPIED or not complex_prod(dtype, op)


def digest(a) -> np.ndarray:
    """A uint64 hash of the bytes of array ``a`` (None: of nothing)."""
    b = b"" if a is None else np.ascontiguousarray(host(a)).tobytes()
    return np.frombuffer(hashlib.blake2b(b, digest_size=8).digest(), np.uint64).copy()


def other_bits(comm, got) -> list[int]:
    """Collective (every rank calls it, whatever its result): the ranks whose
    ``got`` differs in any bit from rank 0's, by an all-gather of digests."""
    d = comm.all_gather(digest(got))
    return [p for p in range(comm.size) if d[p, 0] != d[0, 0]]


class Recorder:
    """Counts and collects the failures of one family on one communicator."""

    def __init__(self, label: str):
        self.label, self.where = label, label
        self.salt, self.mpicomm = SALT[label], None
        self.lite = label != "world" or bool(os.environ.get(LITE_ENV))
        self.cases = 0
        self.failures: list[str] = []

    def on(self, comm, mpicomm, color: int = 0) -> None:
        """The communicator under test (and an mpi4py one over the same ranks, in
        the same order, for what must not go through the library)."""
        self.mpicomm = mpicomm
        self.salt += 100_000 * color
        self.where = f"{self.label}: rank {comm.rank} of {comm.size}"

    def check(self, desc: str, fn) -> None:
        self.cases += 1
        try:
            fn()
        except AssertionError as e:
            self.failures.append(f"[{self.where}] {desc}: {str(e).strip()[:600]}")


# -- the plan: which cases a family runs --------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    dtype: np.dtype
    op: Optional[str]    # None: the call takes no op
    shape: tuple
    root: Optional[int]  # None: the call takes no root
    mode: str
    seed: int = 0        # of the inputs, before the communicator's SALT


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a call's plan varies."""

    modes: tuple              # its out modes
    reducing: bool
    rooted: bool
    blocked: bool             # x (or the result) is N blocks: count shapes are (N, *c)
    sweep: Callable[[int], tuple]  # the shape of the dtype x op sweep at size N
    count_dtypes: tuple       # the dtypes of the counts
    big: Callable[[int], list]     # [(dtype, op, shape, root)] of about a million elements


def counts(n: int) -> list:
    return [0, 1, 7, 3 * n + 1, 1000, (2, 3, 5)]


def shape_of(c) -> tuple:
    return c if isinstance(c, tuple) else (c,)


SPECS = {
    "all_reduce": Spec(MODES, True, False, False, lambda n: (3 * n + 1,), ("float32", "int64"),
                       lambda n: [("float32", "sum", (BIG,), None),
                                  ("int32", "max", (BIG,), None)]),
    "reduce": Spec(MODES, True, True, False, lambda n: (3 * n + 1,), ("float32", "int16"),
                   lambda n: [("float64", "sum", (BIG,), n // 2)]),
    "reduce_scatter": Spec(MODES, True, False, True, lambda n: (n, 3), ("float32", "uint8"),
                           lambda n: [("float32", "sum", (n, BIG // n + 1), None)]),
    "broadcast": Spec(("inplace",), False, True, False, lambda n: (3 * n + 1,),
                      ("float32", "int8"),
                      lambda n: [("float32", None, (BIG,), 0), ("uint16", None, (BIG,), n - 1)]),
    "all_gather": Spec(MODES, False, False, False, lambda n: (3,), ("float64", "int32"),
                       lambda n: [("float32", None, (BIG // n + 1,), None)]),
    "all_to_all": Spec(MODES, False, False, True, lambda n: (n, 3), ("complex64", "int8"),
                       lambda n: [("float32", None, (n, BIG // n + 1), None)]),
    "gather": Spec(MODES, False, True, False, lambda n: (3,), ("float32", "uint64"),
                   lambda n: [("float32", None, (BIG // n + 1,), n // 2)]),
    "scatter": Spec(("inplace", "out"), False, True, False, lambda n: (3,), ("float16", "int64"),
                    lambda n: [("float32", None, (BIG // n + 1,), n // 2)]),
}


def plan(spec: Spec, n: int, alg_index: int, lite: bool) -> list[Case]:
    """The cases of one algorithm of a call at size ``n``.

    Full (``lite`` False): every dtype with every op it takes at the sweep
    shape; the counts in two dtypes at every root; the cases of about a
    million elements, each in one mode, turning with the algorithm.  At
    ``n <= FULL_N`` the sweep and the counts at every root in every out mode;
    above, the sweep takes one root and one mode a case (every seventh case
    every mode), turning so that each dtype sees every mode where it has as
    many ops, and the counts one mode a case.  Above ``SWEEP_N`` the sweep
    takes each dtype with one op, turning with the dtype and the algorithm,
    and the counts one root a case.  ``NO_SWEEP``: no sweep.  Lite:
    the dtype/op pairs of ``LITE`` at the sweep shape and two counts,
    turning through the roots 0, n//2, n-1 and the modes.  Every plan has
    every out mode of the call.

    Seeds differ between the cases of all algorithms, but for the large
    cases, whose inputs (expensive to make on every rank) are the same for
    every algorithm.
    """
    modes = spec.modes
    roots = list(range(n)) if spec.rooted else [None]
    dt = np.dtype
    if lite:
        few = sorted({0, n // 2, n - 1}) if spec.rooted else [None]
        picks = [(d, op, spec.sweep(n)) for d, op in LITE]
        picks += [("float32", "sum", (n, c) if spec.blocked else (c,)) for c in (0, 1000)]
        cases = [Case(dt(d), op if spec.reducing else None, shape, few[i % len(few)],
                      modes[i % len(modes)]) for i, (d, op, shape) in enumerate(picks)]
        return [dataclasses.replace(c, seed=10_000 * alg_index + i) for i, c in enumerate(cases)]
    full = n <= FULL_N
    cases: list[Case] = []
    pairs = [(d, k, dtype, op) for d, dtype in enumerate(DTYPES)
             for k, op in enumerate(ops_for(dtype) if spec.reducing else [None])]
    if NO_SWEEP:
        pairs = []
    elif n > SWEEP_N:  # each dtype with one op, turning with the algorithm
        pairs = [(d, k, dtype, op) for d, k, dtype, op in pairs
                 if (k - d - alg_index) % len(ops_for(dtype) if spec.reducing else [None]) == 0]
    for i, (d, k, dtype, op) in enumerate(pairs):
        if full:
            cases += [Case(dtype, op, spec.sweep(n), root, mode)
                      for root in roots for mode in modes]
        else:
            root = roots[len(cases) % len(roots)]
            some = modes if i % 7 == 0 else [modes[(d + k) % len(modes)]]
            cases += [Case(dtype, op, spec.sweep(n), root, mode) for mode in some]
    for c in counts(n):
        shape = (n, *shape_of(c)) if spec.blocked else shape_of(c)
        for d in spec.count_dtypes:
            # above SWEEP_N one root a count and dtype, turning (the sweep
            # above has taken every root)
            for root in roots if n <= SWEEP_N else [roots[len(cases) % len(roots)]]:
                some = modes if full else [modes[len(cases) % len(modes)]]
                cases += [Case(dt(d), "sum" if spec.reducing else None, shape, root, mode)
                          for mode in some]
    cases = [dataclasses.replace(c, seed=10_000 * alg_index + i) for i, c in enumerate(cases)]
    for j, (d, op, shape, root) in enumerate(spec.big(n)):
        cases.append(Case(dt(d), op, shape, root, modes[(j + alg_index) % len(modes)],
                          seed=9_999 - j))
    return cases


def describe(call: str, alg: str, c: Case) -> str:
    parts = [call, f"alg={alg}", f"dtype={c.dtype}"]
    parts += [f"op={c.op}"] if c.op is not None else []
    parts += [f"shape={c.shape}"]
    parts += [f"root={c.root}"] if c.root is not None else []
    return " ".join(parts + [f"mode={c.mode}"])


# -- one case of each call: inputs, the call in its out mode, the checks -------------

def out_for(want: np.ndarray):
    """A separate ``out``: poisoned, so that an element left unwritten is wrong."""
    return dev(poison(want))


def returned(got, o, want: np.ndarray, receives: bool = True) -> None:
    """The call's result: ``want``, in ``o`` where one was passed; None on a rank
    that receives nothing."""
    if not receives:
        assert got is None, "non-root got a result"
        return
    assert o is None or got is o, "the out passed (x, in place) was not returned"
    check(got, want)


def ran(comm, call: str, alg):
    """The algorithm that the call just made ran: ``alg``, or the one the
    default ran (its chooser's history, kept for this job by ``run_family``;
    the small all_reduce fast path records nothing and runs ``direct``)."""
    if alg is not None:
        return alg
    h = comm._choose.history
    name = h[-1][1] if h and h[-1][0] == call else "direct"
    h.clear()
    return name


def run_all_reduce(comm, alg, c: Case, seed: int) -> None:
    """Also: every rank holds the same bits (where the algorithm promises it;
    ``alg`` None: the one the library picks), and those of ``reduced`` where
    the algorithm reduces in rank order."""
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed, c.op)
    x0, want = x.copy(), kept(reduced, n, c.dtype, c.shape, c.op, seed)
    o = x if c.mode == "inplace" else out_for(want) if c.mode == "out" else None
    got = comm.all_reduce(x, out=o, op=c.op, algorithm=alg)
    name = ran(comm, "all_reduce", alg)
    differ = other_bits(comm, got)
    if o is not x:
        unchanged(x, x0)
    returned(got, o, want)
    if in_rank_order("all_reduce", name, c.dtype, c.op):
        expect_bits(host(got), want, f"result of {name} (rank order)")
    assert not differ or not same_bits_everywhere(name, c.dtype, c.op), \
        f"ranks {differ} hold other bits than rank 0"


def run_reduce(comm, alg, c: Case, seed: int) -> None:
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed, c.op)
    x0, want = x.copy(), kept(reduced, n, c.dtype, c.shape, c.op, seed)
    o = None
    if r == c.root:  # off the root there is no out: every mode is the plain call
        o = x if c.mode == "inplace" else out_for(want) if c.mode == "out" else None
    got = comm.reduce(x, out=o, op=c.op, root=c.root, algorithm=alg)
    name = ran(comm, "reduce", alg)
    if o is not x:
        unchanged(x, x0)
    returned(got, o, want, r == c.root)
    if r == c.root and in_rank_order("reduce", name, c.dtype, c.op):
        expect_bits(got, want, f"result of {name} (rank order)")


def run_reduce_scatter(comm, alg, c: Case, seed: int) -> None:
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed, c.op)
    # block r of the reduction alone (make's offset: its elements r*blk on)
    want = kept(reduced, n, c.dtype, c.shape[1:], c.op, seed, r * block(c.shape))
    x0 = x.copy()
    o = x[r] if c.mode == "inplace" else out_for(want) if c.mode == "out" else None
    got = comm.reduce_scatter(x, out=o, op=c.op, algorithm=alg)
    name = ran(comm, "reduce_scatter", alg)
    if c.mode == "inplace":  # the rest of x is left as it was
        x0[r] = x[r]
    unchanged(x, x0)
    returned(got, o, want)
    if in_rank_order("reduce_scatter", name, c.dtype, c.op):
        expect_bits(got, want, f"result of {name} (rank order)")


def run_broadcast(comm, alg, c: Case, seed: int) -> None:
    want = kept(make, c.dtype, c.shape, c.root, seed)
    buf = dev(want.copy()) if comm.rank == c.root else out_for(want)
    got = comm.broadcast(buf, root=c.root, algorithm=alg)
    assert got is buf, "broadcast did not return buf"
    check(got, want)


def run_all_gather(comm, alg, c: Case, seed: int) -> None:
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed)
    x0, want = x.copy(), kept(stacked, n, c.dtype, c.shape, seed)
    if c.mode == "inplace":  # x is this rank's block of out
        o = out_for(want)
        o[r] = x
        got = comm.all_gather(o[r], out=o, algorithm=alg)
    else:
        o = out_for(want) if c.mode == "out" else None
        got = comm.all_gather(x, out=o, algorithm=alg)
        unchanged(x, x0)
    returned(got, o, want)


def run_all_to_all(comm, alg, c: Case, seed: int) -> None:
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed)
    x0 = x.copy()
    want = np.stack([kept(make, c.dtype, c.shape[1:], j, seed, "sum", r * block(c.shape))
                     for j in range(n)])  # block r of every rank's x alone
    o = x if c.mode == "inplace" else out_for(want) if c.mode == "out" else None
    got = comm.all_to_all(x, out=o, algorithm=alg)
    if o is not x:
        unchanged(x, x0)
    returned(got, o, want)


def run_gather(comm, alg, c: Case, seed: int) -> None:
    n, r = comm.size, comm.rank
    x = mk(c.dtype, c.shape, r, seed)
    x0, want = x.copy(), kept(stacked, n, c.dtype, c.shape, seed)
    o = out_for(want) if c.mode != "new" and r == c.root else None
    if o is not None and c.mode == "inplace":  # root's x is its block of out
        o[r] = x
        x = o[r]
    got = comm.gather(x, out=o, root=c.root, algorithm=alg)
    unchanged(x, x0)
    returned(got, o, want, r == c.root)


def run_scatter(comm, alg, c: Case, seed: int) -> None:
    r = comm.rank
    full = kept(stacked, comm.size, c.dtype, c.shape, seed)
    x = dev(full.copy()) if r == c.root else None
    # in place, root's out is its block of x (which then holds root's block)
    o = x[r] if x is not None and c.mode == "inplace" else out_for(full[r])
    got = comm.scatter(x, o, root=c.root, algorithm=alg)
    if x is not None:
        unchanged(x, dev(full))
    returned(got, o, full[r])


RUNS = {"all_reduce": run_all_reduce, "reduce": run_reduce,
        "reduce_scatter": run_reduce_scatter, "broadcast": run_broadcast,
        "all_gather": run_all_gather, "all_to_all": run_all_to_all, "gather": run_gather,
        "scatter": run_scatter}


def planned(call: str):
    """The family of ``call``: every algorithm, each with its plan."""
    spec, run = SPECS[call], RUNS[call]

    def family(comm, rec: Recorder) -> None:
        for a, alg in enumerate(comm.algorithms(call)):
            # one_copy_or_staged on the suite's plain arrays is the staged
            # choice after one publication: the lite plan covers that decision
            # (its reads from regions are tests/regions_check.py's)
            for c in plan(spec, comm.size, a, rec.lite or alg == "one_copy_or_staged"):
                rec.check(describe(call, alg, c),
                          lambda alg=alg, c=c: run(comm, alg, c, rec.salt + c.seed))
    family.__name__ = f"fam_{call}"
    return family


# -- the library's own choice of algorithm ---------------------------------------------

SMALL = 4096  # bytes: collectives/small.py's fast path takes all_reduce up to this
# float32 elements (of a block): on either side of most choosers' switch points
# (docs/algorithms.md); all_reduce also past its largest (256 KiB on shm)
DEFAULT_COUNTS = (5, 20_000)
DEFAULT_LARGE = 100_000


def fam_default(comm, rec):
    """``algorithm=None``.  all_reduce: every dtype with every op it takes
    (lite: ``LITE``), four calls in a row with different inputs and out
    modes: 3N+1 elements twice, exactly SMALL bytes, one element more.  On
    shared memory the first call of an (op, dtype) takes the general path,
    the next two the fast path (collectives/small.py), the last the general
    path again, so a slip of the fast path, or state kept between calls,
    shows.  The bits are checked as in the all_reduce family, for the
    algorithm the library picks.  Every other call: float32 at counts
    on either side of the choosers' switch points, the out modes turning."""
    n, s = comm.size, rec.salt + 50_000
    pairs = LITE if rec.lite else [(d, op) for i, d in enumerate(DTYPES)
                                   for k, op in enumerate(ops_for(d))
                                   if n <= SWEEP_N or (k - i) % len(ops_for(d)) == 0]
    k = 0
    for dtype, op in pairs:
        dt = np.dtype(dtype)
        for call, count in enumerate((3 * n + 1, 3 * n + 1, SMALL // dt.itemsize,
                                      SMALL // dt.itemsize + 1)):
            c = Case(dt, op, (count,), None, MODES[k % len(MODES)])
            rec.check(f"all_reduce alg=None call #{call + 1} dtype={dt} op={op} count={count} "
                      f"mode={c.mode}", lambda c=c, k=k: run_all_reduce(comm, None, c, s + k))
            k += 1
    for call, spec in SPECS.items():
        if call == "all_reduce" and rec.lite:
            continue
        counts = DEFAULT_COUNTS + ((DEFAULT_LARGE,) if call == "all_reduce" else ())
        for j, m in enumerate(counts):
            shape = (n, m) if spec.blocked else (m,)
            c = Case(np.dtype("float32"), "sum" if spec.reducing else None, shape,
                     (j + k) % n if spec.rooted else None, spec.modes[(j + k) % len(spec.modes)])
            rec.check(describe(call, "None", c),
                      lambda call=call, c=c, k=k: RUNS[call](comm, None, c, s + k))
            k += 1


# -- barrier, point to point, async, split --------------------------------------------

def fam_barrier(comm, rec):
    n, r = comm.size, comm.rank
    for i, alg in enumerate(comm.algorithms("barrier") * 3):
        def run(i=i, alg=alg):
            time.sleep(0.002 * ((r + i) % n))
            t_in = time.time()
            assert comm.barrier(algorithm=alg) is None
            t_out = time.time()
            times = comm.all_gather(np.array([t_in, t_out]))
            assert times[:, 1].min() >= times[:, 0].max(), \
                f"a rank left the barrier before another entered: {times.tolist()}"
        rec.check(f"barrier alg={alg} #{i}", run)


def fam_p2p(comm, rec):
    n, r, s = comm.size, comm.rank, rec.salt
    if n == 1:  # no peer to talk to: a message to oneself is refused
        def alone():
            try:
                comm.send(xp.ones(3), 0)
            except ValueError as e:
                assert "dst" in str(e)
            else:
                raise AssertionError("send to self was accepted")
        rec.check("p2p in a world of one", alone)
        return
    right, left = (r + 1) % n, (r - 1) % n
    sizes = (0, 1, 1000) if rec.lite else (0, 1, 1000, 300_001)  # lite: exchange() is large
    for i, (dt, c) in enumerate(itertools.product(("float32", "int8", "complex128"), sizes)):
        def run(dt=dt, c=c, i=s + i):
            a, b = mk(dt, (c,), r, i), mk(dt, (c + 1,), r, i + 1)
            ra, rb = xp.zeros((c,), dt), xp.zeros((c + 1,), dt)
            sa = comm.isend(a, right, tag=1)
            hb = None
            if c < 1000:  # tag 2 is received first although it is sent second (a
                # blocking send of a large message would wait for the receive of tag 1)
                comm.send(b, right, tag=2)
                hb = comm.irecv(rb, left, tag=2)
            got_a = comm.recv(ra, left, tag=1)
            sa.wait()
            assert sa.done()
            check(got_a, make(dt, (c,), left, i), "tag 1")
            if hb is not None:
                check(hb.wait(), make(dt, (c + 1,), left, i + 1), "tag 2")
        rec.check(f"p2p ring dtype={dt} count={c}", run)

    def exchange():  # both directions at once, larger than the slots
        x = mk("float64", (600_000,), r, s + 5)
        out = xp.empty_like(x)
        hs = [comm.isend(x, right, tag=7), comm.irecv(out, left, tag=7)]
        for h in hs:
            h.wait()
        check(out, make("float64", (600_000,), left, s + 5))
    rec.check("p2p isend/irecv exchange", exchange)

    def ordered():  # one pair, one tag: arrival in send order
        if r == 0:
            for k in range(5):
                comm.send(xp.full(10, k, np.int32), 1, tag=3)
        if r == 1:
            for k in range(5):
                check(comm.recv(xp.empty(10, np.int32), 0, tag=3), np.full(10, k, np.int32))
        comm.barrier()
    rec.check("p2p order within a tag", ordered)


def fam_async(comm, rec):
    n, r, s = comm.size, comm.rank, rec.salt

    def returns_before_peers_call():
        # Every rank but 0 issues an all_reduce, which cannot finish without
        # rank 0; rank 0 issues its own only after the others' calls have
        # returned (a barrier outside the library).
        x = mk("float64", (1000,), r, s)
        h, early = None, None
        try:
            if r != 0:
                h = comm.all_reduce(x, async_op=True)
                early = h.done()
        finally:  # even if the call raised: the ranks must not hang in the barrier
            rec.mpicomm.Barrier()
        if r == 0:
            h = comm.all_reduce(x, async_op=True)
        got = h.wait()
        assert early is not True, "done() before rank 0 had called"
        assert h.done(), "not done() after wait()"
        check(got, reduced(n, "float64", (1000,), "sum", s))
    if n > 1:
        rec.check("async call returns before the peers call", returns_before_peers_call)

    def mixed():
        xs = [mk("float32", (5000 * (k + 1),), r, s + k) for k in range(4)]
        hs = [comm.all_reduce(x, async_op=True) for x in xs]
        hb = comm.broadcast(mk("int32", (77,), r, s + 9), root=n - 1, async_op=True)
        hg = comm.all_gather(mk("int8", (5,), r, s + 10), async_op=True)
        for _ in range(5):  # compute while they move
            np.sum(np.sqrt(np.arange(20000.0)))
        for k, h in enumerate(hs):
            check(h.wait(), reduced(n, "float32", (5000 * (k + 1),), "sum", s + k))
            assert h.done()
        check(hb.wait(), make("int32", (77,), n - 1, s + 9))
        check(hg.wait(), stacked(n, "int8", (5,), s + 10))
        y = comm.all_reduce(np.ones(3), op="sum")  # a blocking call after async ones
        expect(y, np.full(3, float(n)))
    rec.check("async mixed calls complete in order", mixed)

    def barrier_async():
        h = comm.barrier(async_op=True)
        assert h.wait() is None and h.done()
    rec.check("async barrier", barrier_async)


def fam_split(comm, rec):
    n, r = comm.size, comm.rank

    def run():
        color = r % 2
        sub = comm.split(color, key=-r)
        try:
            members = sorted((p for p in range(n) if p % 2 == color), reverse=True)
            assert sub.size == len(members), f"sub.size {sub.size} != {len(members)}"
            assert sub.rank == members.index(r), "key order not honoured"
            before, parent = sub.traffic, comm.traffic
            got = sub.all_reduce(dev(np.array([r], np.int64)), algorithm="ring")
            check(got, np.array([sum(members)], np.int64))
            g = sub.all_gather(dev(np.array([r], np.int64)), algorithm="ring")
            check(g, np.array([[p] for p in members], np.int64))
            d, dp = sub.traffic - before, comm.traffic - parent
            # the ring all-reduce of one 8-byte element, then N-1 blocks of 8 bytes
            m, q = sub.size, sub.rank
            sent = ring_all_reduce_uneven(q, m, 1, 8) + 8 * (m - 1)
            recv = ring_all_reduce_uneven((q - 1) % m, m, 1, 8) + 8 * (m - 1)
            assert (d.sent_bytes, d.recv_bytes) == (sent, recv), \
                f"sub traffic (sent, received) {(d.sent_bytes, d.recv_bytes)} != {(sent, recv)}"
            assert (dp.sent_bytes, dp.recv_bytes) == (0, 0), \
                f"the sub-communicator's bytes were counted on its parent: {dp}"
        finally:
            sub.close()
        none = comm.split(-1 if r == 0 else 0)
        assert (none is None) == (r == 0), "negative color must give None"
        if none is not None:
            expect(none.all_reduce(np.ones(2)), np.full(2, float(n - 1)))
            none.close()
    rec.check("split by parity, reversed keys, its own traffic, negative color", run)


FAMILIES = {name: planned(name) for name in
            ("all_reduce", "reduce", "reduce_scatter", "broadcast", "all_gather",
             "all_to_all", "gather", "scatter")}
FAMILIES.update({f.__name__[4:]: f for f in [fam_default, fam_barrier, fam_p2p, fam_async,
                                              fam_split]})


# -- the job ----------------------------------------------------------------------------

def run_family(name: str, transport: str, label: str) -> Recorder:
    """Family ``name`` on communicator ``label`` (of COMMS) over a fresh init."""
    from mpi4py import MPI
    rec = Recorder(label)
    _kept.clear()
    try:
        with cc.init(transport=transport) as world:
            assert world.transport == transport
            r = world.rank
            color = r % 2 if label == "split" else 0
            if label == "world":
                comm, mpicomm = world, MPI.COMM_WORLD
            else:
                key = r if label == "dup" else -r
                comm, mpicomm = world.split(color, key), MPI.COMM_WORLD.Split(color, key)
            rec.on(comm, mpicomm, color)
            comm._choose.history = collections.deque(maxlen=1)  # what the default ran (ran)
            try:
                FAMILIES[name](comm, rec)
            finally:
                if comm is not world:
                    comm.close()
                    mpicomm.Free()
    except Exception:
        rec.failures.append(f"[{rec.where}] {name} raised:\n{traceback.format_exc()}")
    return rec


def main(argv: list[str]) -> int:
    transport, outdir, *names = argv
    names = names or list(FAMILIES)
    if os.environ.get("CONFORMANCE_NO_SWEEP"):
        global NO_SWEEP
        NO_SWEEP = True
    if os.environ.get("CONFORMANCE_GATHER_SPLIT"):
        # gather's one_copy at N = 2 shares the copy of every block, not only
        # of blocks from 4 MiB: the small cases here run its split too
        from collectives import selection
        selection.SPLIT_BLOCK_BYTES = 1
    if transport == "cuda":  # CuPy arrays; each rank on a GPU of its own where there are enough
        global xp, DTYPES
        from collectives.dtypes import DEVICE_DTYPES  # CuPy has no bfloat16
        DTYPES = tuple(d for d in DTYPES if d in DEVICE_DTYPES)
        import cupy
        from mpi4py import MPI
        cupy.cuda.Device(MPI.COMM_WORLD.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
        xp = cupy
    results = {}
    for name in names:
        t0 = time.perf_counter()
        recs = [run_family(name, transport, label) for label in COMMS]
        results[name] = {"cases": sum(rec.cases for rec in recs),
                         "failures": [f for rec in recs for f in rec.failures],
                         "seconds": round(time.perf_counter() - t0, 3),
                         "comms": {rec.label: rec.cases for rec in recs}}
    from mpi4py import MPI
    with open(os.path.join(outdir, f"rank{MPI.COMM_WORLD.Get_rank()}.json"), "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
