"""Timing in interleaved rounds: warm-up, iteration counts, the slowest rank's time.

This machine changes speed from minute to minute (docs/performance.md), so
a call timed once and its baseline timed a second later may be timed in
different states.  Every call of a size is therefore timed ``repeat``
times, in turn with the others: round k times each call once (a loop of
``iters`` calls) before round k+1 starts, so all of them see the same drift,
and a round's figures are compared with each other only.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Hashable, Optional

import numpy as np

Call = Callable[[], object]

WARMUP_BUDGET_S = 0.2   # default warm-up is cut to about this long
WARMUP_MIN_S = 0.02     # and lengthened to about this long (short calls: the
                        # first size of a run otherwise pays for the scheduler
                        # settling 4+ ranks on the cores, ours and MPI's alike)
MAX_ITERS = 1000        # adaptive iteration count bounds (per round)
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
    budget_s: float                   # timed loop per call and size, all rounds together
    check: bool
    repeat: int = 3                   # rounds
    alloc: str = "numpy"              # our buffers: "numpy", or "comm" (comm.empty)
    twin: bool = False                # time a second copy of every named algorithm


@dataclasses.dataclass
class Series:
    """One call's rounds: per round, the slowest rank's mean time per call."""

    iters: int
    seconds: list[float] = dataclasses.field(default_factory=list)

    @property
    def median(self) -> float:
        return float(statistics.median(self.seconds))


def ratios(num: Series, den: Series) -> list[float]:
    """Round by round, ``num``'s time over ``den``'s."""
    return [a / b for a, b in zip(num.seconds, den.seconds)]


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

    def calibrate(self, fn: Call, s: Settings) -> int:
        """Warm up, then choose the iteration count of one round: about
        ``budget_s / repeat`` seconds of calls (the estimate is the slowest
        rank's, so every rank picks the same count)."""
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
            return s.iters
        iters = int(s.budget_s / s.repeat / max(est, 1e-9))
        return max(MIN_ITERS, min(MAX_ITERS, iters))

    def interleaved(self, calls: dict[Hashable, Call], s: Settings) -> dict[Hashable, Series]:
        """Each call warmed up and counted in the order given, then timed in
        ``s.repeat`` rounds, each round timing every call once in that order."""
        out = {k: Series(self.calibrate(fn, s)) for k, fn in calls.items()}
        for _ in range(s.repeat):
            for k, fn in calls.items():
                out[k].seconds.append(self.per_call(fn, out[k].iters))
        return out
