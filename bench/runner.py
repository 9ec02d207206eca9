"""Timing: the memcpy reference, adaptive iteration counts, one collective's rows.

Every decision that changes what the ranks call (iteration counts, whether
MPI takes a dtype) is taken from values reduced over all ranks, so that
the ranks always run the same sequence of collectives.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Iterator, Optional

import numpy as np

from .cases import CASES, Call, Case

MEMCPY_BYTES = 64 << 20
WARMUP_BUDGET_S = 0.2   # default warm-up is cut to about this long
WARMUP_MIN_S = 0.02     # and lengthened to about this long (short calls: the
                        # first size of a run otherwise pays for the scheduler
                        # settling 4+ ranks on the cores, ours and MPI's alike)
MAX_ITERS = 1000        # adaptive iteration count bounds
MIN_ITERS = 3


@dataclasses.dataclass
class Settings:
    """What the runner needs from the command line."""

    sizes: list[int]
    dtype: np.dtype
    op: str
    root: int
    algorithms: list[Optional[str]]  # None: the library's own choice
    iters: Optional[int]              # None: adaptive
    warmup: int
    warmup_given: bool
    budget_s: float
    check: bool


@dataclasses.dataclass
class Row:
    """One line of the table (one size, one algorithm).

    The unprefixed figures are the out-of-place call's; the ``inplace_``
    ones the in-place call's (None where the call has no in-place form:
    ``inplace == "none"``; the out-of-place figures again where the call is
    in place already: ``inplace == "same"``); the ``mpi_`` ones the
    baseline's, out of place.
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

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Timing:
    seconds: float  # per call, max over ranks
    iters: int


class Clock:
    """Times loops of calls: barrier, loop, max over ranks of the per-call mean."""

    def __init__(self, mpicomm):
        from mpi4py import MPI
        self.mpicomm = mpicomm
        self._max = MPI.MAX

    def per_call(self, fn: Call, iters: int) -> float:
        self.mpicomm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = (time.perf_counter() - t0) / iters
        return float(self.mpicomm.allreduce(dt, op=self._max))

    def measure(self, fn: Call, s: Settings) -> Timing:
        """Warm up, choose the iteration count, then time the loop."""
        warm = s.warmup
        est = None
        if warm > 0 or s.iters is None:
            est = self.per_call(fn, 1)
            warm -= 1
            if not s.warmup_given:  # at least WARMUP_MIN_S, at most WARMUP_BUDGET_S
                per = max(est, 1e-9)
                warm = min(max(warm, int(WARMUP_MIN_S / per)), int(WARMUP_BUDGET_S / per))
            if warm > 0:
                est = self.per_call(fn, warm)
        if s.iters is not None:
            iters = s.iters
        else:
            iters = int(s.budget_s / max(est, 1e-9))
            iters = max(MIN_ITERS, min(MAX_ITERS, iters))
        return Timing(self.per_call(fn, iters), iters)


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


def auto_name(case: Case) -> str:
    """The algorithm the library picks by default for ``case`` ("?" if unknown)."""
    return case.comm.choose_algorithm(case.name, case.choose_nbytes())


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
    """Measure collective ``name`` over ``s.sizes``, yielding rows as they are done;
    the baseline is NCCL's collective where ``nccl`` is given, else MPI's."""
    clock = Clock(mpicomm)
    for nbytes in effective_sizes(name, s.sizes, comm.size, s.dtype):
        case = CASES[name](comm, mpicomm, nbytes, s.dtype, s.op, s.root)
        mfn = case.baseline(nccl)
        mpi_t: Optional[Timing] = None
        if mpi_supported(mfn, mpicomm):
            mpi_t = clock.measure(mfn, s)
        for alg in s.algorithms:
            out = _timed(clock, case, case.ours(alg), False, s)
            inp: Optional[tuple[Timing, Optional[int]]] = None
            if case.in_place == "own":
                inp = _timed(clock, case, case.ours_in_place(alg), True, s)
            elif case.in_place == "same":
                inp = out
            yield _row(case, alg, out, inp, mpi_t)
        del case


def _timed(clock: Clock, case: Case, fn: Call, in_place: bool, s: Settings
           ) -> tuple[Timing, Optional[int]]:
    """The call's timing, and with ``s.check`` the mismatches (summed over
    ranks) of one more call made on reset buffers."""
    from mpi4py import MPI
    t = clock.measure(fn, s)
    wrong = None
    if s.check:
        case.reset(in_place)
        clock.mpicomm.Barrier()
        fn()
        wrong = int(clock.mpicomm.allreduce(case.wrong(in_place), op=MPI.SUM))
    return t, wrong


def _row(case: Case, alg: Optional[str], out: tuple[Timing, Optional[int]],
         inp: Optional[tuple[Timing, Optional[int]]], mpi_t: Optional[Timing]) -> Row:
    factor = case.factor()

    def bw(t: Timing) -> float:  # algbw, GB/s
        return case.nbytes / t.seconds / 1e9

    t, wrong = out
    ip: dict = dict.fromkeys(("inplace_iters", "inplace_time_us", "inplace_algbw",
                              "inplace_busbw", "inplace_wrong"))
    if inp is not None:
        it, iw = inp
        ip = {"inplace_iters": it.iters, "inplace_time_us": it.seconds * 1e6,
              "inplace_algbw": bw(it), "inplace_busbw": bw(it) * factor, "inplace_wrong": iw}
    mpi_time_us = mpi_busbw = ratio = None
    if mpi_t is not None:
        mpi_time_us = mpi_t.seconds * 1e6
        mpi_busbw = bw(mpi_t) * factor
        ratio = mpi_t.seconds / t.seconds
    return Row(bytes=case.nbytes, count=case.count,
               algorithm=alg if alg is not None else auto_name(case), auto=alg is None,
               iters=t.iters, time_us=t.seconds * 1e6, algbw=bw(t), busbw=bw(t) * factor,
               wrong=wrong, inplace=case.in_place, **ip, mpi_time_us=mpi_time_us,
               mpi_busbw=mpi_busbw, ratio=ratio)
