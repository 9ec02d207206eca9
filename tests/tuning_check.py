"""Tuning files and fixed choices under mpiexec (tests/test_adapt.py).

``python tuning_check.py MODE [FILE]``, prints ``OK MODE`` on rank 0:

- ``use FILE``: a file made for this job: its rules decide (source
  "tuning"), and with its ``"adapt": false`` nothing else ever runs.
- ``misfit FILE``: a file made for another job: the built-in table decides.
- ``fixed``: COLLECTIVES_DETERMINISTIC=1 or COLLECTIVES_ADAPT=0: the table's
  algorithm at every call; prints the result's bytes' hash (the same run
  after run).
- ``kinds FILE``: a file with ``"adapt": false`` whose rules differ between
  plain and communicator-allocated arrays, and ranks whose arrays' kinds
  differ and change from call to call: every rank runs the same algorithm
  at every call (the kind the ranks last agreed on, in place or not), a size class of calls
  whose ranks pass different kinds from its first call runs the plain
  arrays' rule, and every result is numpy's.
"""
from __future__ import annotations

import hashlib
import sys
import warnings

import numpy as np

import collectives as cc
import collectives.tuning


def kinds(comm) -> None:
    """``kinds FILE`` (the module's doc)."""
    r, n = comm.rank, comm.size
    ch = comm._choose
    ch.history = []

    def calls(count: int, elements: int, allocated: bool, in_place: bool = False) -> list:
        x = comm.empty(elements, np.float64)  # on every rank: comm.empty is collective
        if not allocated:
            x = np.empty(elements, np.float64)
        ran = []
        for i in range(count):
            x[:] = np.arange(elements) * (r + 1) + i
            start = len(ch.history)
            y = comm.all_reduce(x, out=x if in_place and i % 2 else None)
            ran.append(ch.history[start][1])
            want = np.arange(elements) * (n * (n + 1) // 2) + n * i
            assert np.array_equal(y, want), (r, i, allocated)
        return ran

    every = calls(300, 1 << 13, True)            # every rank's arrays allocated
    assert set(every) == {"ring"}, set(every)
    every += calls(300, 1 << 12, True, True)     # and every other call in place
    assert set(every) == {"ring"}, set(every)
    mixed = calls(300, 1 << 10, r != 0)           # rank 0's plain from the first call
    assert set(mixed) == {"recursive_doubling"}, set(mixed)
    mixed += calls(600, 1 << 10, True)            # then every rank's allocated
    assert set(mixed) <= {"ring", "recursive_doubling"}, set(mixed)
    mine = every + mixed
    for other in comm.all_gather_object(mine):
        assert other == mine, "the ranks ran different algorithms"


def main(mode: str, path: str | None) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        comm = cc.init(tuning=path) if path else cc.init()
    r = comm.rank
    mine = [str(w.message) for w in seen if issubclass(w.category, cc.tuning.TuningWarning)]
    if mode == "kinds":
        assert not mine and not comm.adaptive, (mine, comm.adaptive)
        kinds(comm)
        comm.close()
        if r == 0:
            print("OK kinds", flush=True)
        return
    ch = comm._choose
    ch.history = []
    rng = np.random.default_rng(7 + r)
    x = rng.standard_normal(1 << 15).astype(np.float32)  # 128 KiB
    h = hashlib.sha256()
    for _ in range(80):
        y = comm.all_reduce(x)
        h.update(y.tobytes())
    choice = comm.choose_algorithm("all_reduce", x.nbytes)
    ran = {a for _, a in ch.history}
    if mode == "use":
        assert not mine, mine
        assert choice == "recursive_doubling" and choice.source == "tuning", repr(choice)
        assert ran == {"recursive_doubling"}, ran
        assert comm.choose_algorithm("all_reduce", 8).source == "tuning"
        assert comm.choose_algorithm("broadcast", 8).source == "table"  # no rule there
    elif mode == "misfit":
        assert len(mine) == (1 if r == 0 else 0), mine
        if r == 0:
            assert "not used" in mine[0] and "ranks" in mine[0], mine
        assert choice.source == "table", repr(choice)
    else:
        assert ran == {str(choice)} and choice.source == "table", (ran, repr(choice))
        if r == 0:
            print("HASH", h.hexdigest(), flush=True)
    comm.close()
    if r == 0:
        print(f"OK {mode}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
