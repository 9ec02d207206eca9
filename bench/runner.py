"""One collective's rows: the cases of each size timed in rounds, and the memcpy reference.

Every decision that changes what the ranks call (iteration counts, whether
MPI takes a dtype) is taken from values reduced over all ranks, so that
the ranks always run the same sequence of collectives.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Iterator, Optional

import numpy as np

from .cases import CASES, Call, Case
from .timing import Clock, Series, Settings, ratios

MEMCPY_BYTES = 64 << 20


@dataclasses.dataclass
class Row:
    """One line of the table (one size, one algorithm).

    The unprefixed figures are the out-of-place call's; the ``inplace_``
    ones the in-place call's (None where the call has no in-place form:
    ``inplace == "none"``; the out-of-place figures again where the call is
    in place already: ``inplace == "same"``); the ``mpi_`` ones the
    baseline's, out of place; the ``copy_`` ones a local copy of the
    message's bytes.  Times are medians over the rounds; the ``*_times_us``
    lists hold each round's (the slowest rank's mean per call), ``ratios``
    each round's MPI time over our out-of-place time, and ``ratio`` their
    median.  ``pct_copy`` is the median over rounds of busbw as a percentage
    of the round's copy bandwidth.  ``auto`` rows time the library's default:
    ``algorithm`` is what it chose (asked after the size's rounds) and
    ``source`` where the choice came from.
    """

    bytes: int
    count: int
    algorithm: str
    auto: bool
    iters: int
    time_us: float
    algbw: float
    busbw: float
    wrong: Optional[int]
    inplace: str
    inplace_iters: Optional[int]
    inplace_time_us: Optional[float]
    inplace_algbw: Optional[float]
    inplace_busbw: Optional[float]
    inplace_wrong: Optional[int]
    mpi_time_us: Optional[float]
    mpi_busbw: Optional[float]
    ratio: Optional[float]
    repeat: int
    times_us: list[float]
    inplace_times_us: Optional[list[float]]
    mpi_times_us: Optional[list[float]]
    ratios: Optional[list[float]]
    copy_times_us: Optional[list[float]]
    copy_gbps: Optional[float]
    pct_copy: Optional[float]
    # the default's rows: where its choice came from (comm.choose_algorithm's
    # .source: "table", "tuning" or "adapted"; None where the library does not say)
    source: Optional[str] = None
    # with several algorithms (--algorithm all): the median over the rounds
    # of this row's out-of-place time / the fastest named algorithm's, and
    # each round's such ratio
    over_best: Optional[float] = None
    over_best_ratios: Optional[list[float]] = None
    # a twin's row (--twin): a second copy of the fastest named algorithm,
    # timed in the same rounds; its over_best is the noise floor of ÷best
    twin: bool = False

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def memcpy_gbps(mpicomm, nbytes: int = MEMCPY_BYTES, reps: int = 5) -> float:
    """One core's copy bandwidth (GB/s), measured on rank 0 while the others idle.

    The best of ``reps`` ``np.copyto`` calls between two touched buffers;
    bytes copied (not read + written) per second.
    """
    gbps = 0.0
    if mpicomm.Get_rank() == 0:
        src = np.ones(nbytes, np.uint8)
        dst = np.zeros(nbytes, np.uint8)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            best = min(best, time.perf_counter() - t0)
        gbps = nbytes / best / 1e9
        del src, dst
    quiet_barrier(mpicomm)
    return float(mpicomm.bcast(gbps, root=0))


def quiet_barrier(mpicomm, poll_s: float = 0.001) -> None:
    """A barrier that sleeps instead of spinning (leaves the cores to rank 0)."""
    req = mpicomm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


# the default's calls at a size before its warm-up, beyond its first tries (learn)
LEARN_EXTRA = 8
# learn() goes on while more learning is due within this many calls (a look
# back, a confirmation: not the steady tries, MIN_INTERVAL calls apart), at most
# LEARN_MORE bursts
LEARN_HORIZON = 16
LEARN_MORE = 64


def mpi_supported(fn: Optional[Call], mpicomm) -> bool:
    """Whether every rank's MPI accepts the call (one untimed call; agreed by all)."""
    from mpi4py import MPI
    ok = 0
    if fn is not None:
        try:
            fn()
            ok = 1
        except Exception:  # unsupported datatype or op: raised locally on every rank
            ok = 0
    return bool(mpicomm.allreduce(ok, op=MPI.MIN))


def array_kind(case: Case, alloc: str = "numpy") -> str:
    """The kind of array (``comm.choose_algorithm``'s ``kind``) of ``case``'s
    buffers: "allocated" with ``alloc`` "comm" (comm.empty), "device" for the
    CuPy buffers of the cuda transport, else "plain"; the barrier, which
    takes no array, "plain"."""
    if case.factor_kind == "none":
        return "plain"
    if alloc == "comm":
        return "allocated"
    return "device" if case.comm.transport == "cuda" else "plain"


def auto_choice(case: Case, alloc: str = "numpy") -> str:
    """The algorithm the library picks by default for ``case`` on its buffers;
    the ``str`` that ``comm.choose_algorithm`` returns, whose ``source``
    says where the choice came from."""
    return case.comm.choose_algorithm(case.name, case.choose_nbytes(),
                                      kind=array_kind(case, alloc))


def effective_sizes(name: str, sizes: list[int], n: int, dtype: np.dtype) -> list[int]:
    """The sizes actually measured: rounded as the case rounds them, duplicates dropped."""
    cls = CASES[name]
    if cls.factor_kind == "none":
        return [0]
    isz = np.dtype(dtype).itemsize
    unit = isz * n if cls.blocked else isz
    out: list[int] = []
    for s in sizes:
        e = s // unit * unit
        if e not in out:
            out.append(e)
    return out


def run_collective(name: str, comm, mpicomm, s: Settings, nccl=None) -> Iterator[Row]:
    """Measure collective ``name`` over ``s.sizes``, yielding rows as each size
    is done; the baseline is NCCL's collective where ``nccl`` is given, else
    MPI's.  Per size, every call is timed in ``s.repeat`` interleaved rounds
    (``bench.timing``): each algorithm out of place and in place, then the
    baseline, then a local copy of the message's bytes."""
    clock = Clock(mpicomm)
    for nbytes in effective_sizes(name, s.sizes, comm.size, s.dtype):
        case = CASES[name](comm, mpicomm, nbytes, s.dtype, s.op, s.root)
        if s.alloc == "comm":
            case.in_regions()
        calls: dict = {}
        for alg in s.algorithms:
            calls["out", alg] = case.ours(alg)
            if s.twin and alg is not None:
                calls["twin", alg] = case.ours(alg)
        mfn = case.baseline(nccl)
        if mpi_supported(mfn, mpicomm):
            calls["mpi"] = mfn
        cfn = case.copy()
        if cfn is not None:
            calls["copy"] = cfn
        inplace = {("in", alg): case.ours_in_place(alg) for alg in s.algorithms} \
            if case.in_place == "own" else {}
        # out of place (against the baseline), then in place: each form's
        # default learns and is timed on its own calls, as in a program that
        # calls it in one form (calls of both forms between two agreements
        # share one choice: collectives/adapt.py)
        timed = {}
        for group in (calls, inplace):
            if ("out", None) in group or ("in", None) in group:
                learn(case, [group.get(("out", None)) or group[("in", None)]], mpicomm)
            if group:
                timed.update(clock.interleaved(group, s))
        calls.update(inplace)
        best = _fastest(timed, s.algorithms)
        for alg in s.algorithms:
            out = timed["out", alg]
            inp = out if case.in_place == "same" else timed.get(("in", alg))
            wrong = _checked(clock, case, calls["out", alg], False, s)
            iwrong = wrong if case.in_place == "same" else \
                _checked(clock, case, calls["in", alg], True, s) if inp is not None else None
            row = _row(case, alg, (out, wrong), (inp, iwrong) if inp is not None else None,
                       timed.get("mpi"), timed.get("copy"), s.repeat,
                       auto_choice(case, s.alloc) if alg is None else None)
            if best is not None:
                row.over_best_ratios = [t / b for t, b in zip(out.seconds, best)]
                row.over_best = float(statistics.median(row.over_best_ratios))
            yield row
        if best is not None and s.twin:
            yield _twin_row(case, timed, s, best, clock, calls)
        del case, calls


def learn(case: Case, fns: list, mpicomm) -> None:
    """Before the default is timed at a size, let it learn, untimed, on
    its calls ``fns`` (one form: out of place or in place) in turn, as the
    timed rounds call them: as many calls as its
    first tries take (collectives/adapt.py: its first choice's first calls,
    then FIRST_TRIES tries of BURST calls of every other offered algorithm,
    each after WATCH calls of the current one)
    and LEARN_EXTRA more; then on while, on any rank, more of its learning
    is due within LEARN_HORIZON calls (a look back at the old choice after a
    switch, a confirmation: ``Chooser.settling``), at most LEARN_MORE times
    BURST calls.  Nothing where it does not adapt."""
    from mpi4py import MPI
    from collectives import adapt
    comm = case.comm
    if not getattr(comm, "adaptive", False):
        return
    others = len(comm.algorithms(case.name)) - 1
    mpicomm.Barrier()
    for _ in range(adapt.FIRST_RUNS + others * adapt.FIRST_TRIES * (adapt.BURST + adapt.WATCH)
                   + LEARN_EXTRA):
        for fn in fns:
            fn()
    nbytes, chooser = case.choose_nbytes(), comm._choose
    for _ in range(LEARN_MORE):
        if not mpicomm.allreduce(chooser.settling(case.name, nbytes, LEARN_HORIZON), op=MPI.LOR):
            break
        for _ in range(adapt.BURST):
            for fn in fns:
                fn()


def _twin_row(case: Case, timed: dict, s: Settings, best: list[float], clock: Clock,
              calls: dict) -> Row:
    """The row of the fastest named algorithm's twin (by median time): what
    ÷best shows for a default that always ran the fastest algorithm, given
    this cell's noise; labelled ``twin:X``, out of place only."""
    named = [a for a in s.algorithms if a is not None]
    fastest = min(named, key=lambda a: timed["out", a].median)
    t = timed["twin", fastest]
    wrong = _checked(clock, case, calls["twin", fastest], False, s)
    row = _row(case, fastest, (t, wrong), None, timed.get("mpi"), timed.get("copy"), s.repeat)
    row.algorithm, row.twin, row.inplace = f"twin:{fastest}", True, "none"
    row.over_best_ratios = [x / b for x, b in zip(t.seconds, best)]
    row.over_best = float(statistics.median(row.over_best_ratios))
    return row


def _fastest(timed: dict, algorithms: list[Optional[str]]) -> Optional[list[float]]:
    """Round by round, the fastest named algorithm's out-of-place time, where
    ``algorithms`` holds more than one call (the default counts as one, not
    as a named algorithm); None otherwise."""
    named = [a for a in algorithms if a is not None]
    if len(algorithms) < 2 or not named:
        return None
    return [min(rounds) for rounds in zip(*(timed["out", a].seconds for a in named))]


def _checked(clock: Clock, case: Case, fn: Call, in_place: bool, s: Settings
             ) -> Optional[int]:
    """With ``s.check``, the mismatches (summed over ranks) of one more call
    made on reset buffers; None without."""
    from mpi4py import MPI
    wrong = None
    if s.check:
        case.reset(in_place)
        clock.mpicomm.Barrier()
        fn()
        wrong = int(clock.mpicomm.allreduce(case.wrong(in_place), op=MPI.SUM))
    return wrong


def _us(t: Series) -> list[float]:
    return [x * 1e6 for x in t.seconds]


def _row(case: Case, alg: Optional[str], out: tuple[Series, Optional[int]],
         inp: Optional[tuple[Series, Optional[int]]], mpi_t: Optional[Series],
         copy_t: Optional[Series], repeat: int, choice: Optional[str] = None) -> Row:
    """``alg`` None: the default's row, ``choice`` what it chose."""
    factor = case.factor()

    def bw(seconds: float) -> float:  # algbw, GB/s
        return case.nbytes / seconds / 1e9

    t, wrong = out
    ip: dict = dict.fromkeys(("inplace_iters", "inplace_time_us", "inplace_algbw",
                              "inplace_busbw", "inplace_wrong", "inplace_times_us"))
    if inp is not None:
        it, iw = inp
        ip = {"inplace_iters": it.iters, "inplace_time_us": it.median * 1e6,
              "inplace_algbw": bw(it.median), "inplace_busbw": bw(it.median) * factor,
              "inplace_wrong": iw, "inplace_times_us": _us(it)}
    mp: dict = dict.fromkeys(("mpi_time_us", "mpi_busbw", "ratio", "mpi_times_us", "ratios"))
    if mpi_t is not None:
        per_round = ratios(mpi_t, t)  # MPI's time / ours = our busbw / MPI's
        mp = {"mpi_time_us": mpi_t.median * 1e6, "mpi_busbw": bw(mpi_t.median) * factor,
              "ratio": float(statistics.median(per_round)), "mpi_times_us": _us(mpi_t),
              "ratios": per_round}
    cp: dict = dict.fromkeys(("copy_times_us", "copy_gbps", "pct_copy"))
    if copy_t is not None and factor > 0:
        # busbw / copy bandwidth = factor * copy time / our time, round by round
        cp = {"copy_times_us": _us(copy_t), "copy_gbps": bw(copy_t.median),
              "pct_copy": 100 * factor * float(statistics.median(ratios(copy_t, t)))}
    return Row(bytes=case.nbytes, count=case.count,
               algorithm=alg if alg is not None else str(choice), auto=alg is None,
               iters=t.iters, time_us=t.median * 1e6, algbw=bw(t.median),
               busbw=bw(t.median) * factor, wrong=wrong, inplace=case.in_place, **ip, **mp,
               repeat=repeat, times_us=_us(t), **cp,
               source=getattr(choice, "source", None) if alg is None else None)
