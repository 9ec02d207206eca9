"""Adaptation under mpiexec: every rank runs the same algorithm at every
call, whatever its own clock says, and follows the slowest rank's times.

Each rank's clock is replaced by one that makes up a call's time from the
algorithm about to run (the chooser's history), differently on every rank:

- ``random``: each rank draws its own times; left to itself each rank would
  pick differently.  Every rank's sequence of algorithms must be the same,
  the results right, and the default must have switched at least once.
- ``slowest``: rank 0 finds ``ring`` fast and every other algorithm slow;
  every other rank finds ``ring`` slowest of all but not as slow as rank 0
  finds the others.  By the slowest rank's times ``ring`` wins, though on
  its own numbers every rank but 0 would never take it.

Prints ``OK <mode>`` on rank 0.
"""
from __future__ import annotations

import sys

import numpy as np

import collectives as cc


class FakeClock:
    """``clock()`` for the chooser: the second reading of a call is the first
    plus ``cost(algorithm)`` of the algorithm the chooser just recorded."""

    def __init__(self, history: list, cost):
        self.history, self.cost, self.t, self.started = history, cost, 0.0, False

    def __call__(self) -> float:
        if self.started:
            self.t += self.cost(self.history[-1][1])
        self.started = not self.started
        return self.t


def main(mode: str, calls: int) -> None:
    comm = cc.init()
    r, n = comm.rank, comm.size
    ch = comm._choose
    ch.history = []
    ch.one_clock = False  # each rank's made-up clock is its own
    if mode == "random":
        rng = np.random.default_rng(1000 + r)
        ch.clock = FakeClock(ch.history, lambda alg: float(rng.uniform(1e-3, 1e-2)))
    else:
        def cost(alg):
            if r == 0:
                return 1e-3 if alg == "ring" else 9e-3
            return 5e-3 if alg == "ring" else 1e-3
        ch.clock = FakeClock(ch.history, cost)
    x = np.arange(4096, dtype=np.float64) + r  # 32 KiB: every algorithm offered
    want = np.arange(4096, dtype=np.float64) * n + n * (n - 1) / 2
    blocks = np.arange(n * 1024, dtype=np.float32).reshape(n, 1024) + r
    for i in range(calls):
        y = comm.all_reduce(x)
        assert np.array_equal(y, want), (r, i, ch.history[-1])
        if mode == "random":
            z = comm.all_to_all(blocks, async_op=i % 2 == 1)
            z = z.wait() if i % 2 == 1 else z
            assert np.array_equal(z[0], np.arange(r * 1024, (r + 1) * 1024) + 0.0), (r, i)
    seqs = comm._mpi.allgather(ch.history)
    for q, s in enumerate(seqs):
        if s != seqs[0]:
            at = next(i for i, (a, b) in enumerate(zip(s, seqs[0])) if a != b)
            raise AssertionError(f"rank {q} ran {s[at]} at call {at} where rank 0 ran "
                                 f"{seqs[0][at]}")
    reduces = [a for c, a in ch.history if c == "all_reduce"]
    switched = comm.choose_algorithm("all_reduce", x.nbytes)
    if mode == "random":
        assert len(set(reduces)) == len(comm.algorithms("all_reduce")), set(reduces)
        changes = sum(1 for a, b in zip(reduces, reduces[1:]) if a != b)
        assert changes > 2 * len(set(reduces)), changes  # it tried, and switched
    else:
        assert switched == "ring" and switched.source == "adapted", repr(switched)
        assert reduces[-1] == "ring" and reduces.count("ring") > calls // 2, reduces[-20:]
    # the agreements are left out of the traffic counters: the calls' own bytes only
    t = comm.traffic
    assert t.sent_bytes >= 0
    comm.close()
    if r == 0:
        print(f"OK {mode}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
