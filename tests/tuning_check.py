"""Tuning files and fixed choices under mpiexec (tests/test_adapt.py).

``python tuning_check.py MODE [FILE]``, prints ``OK MODE`` on rank 0:

- ``use FILE``: a file made for this job: its rules decide (source
  "tuning"), and with its ``"adapt": false`` nothing else ever runs.
- ``misfit FILE``: a file made for another job: the built-in table decides.
- ``fixed``: COLLECTIVES_DETERMINISTIC=1 or COLLECTIVES_ADAPT=0: the table's
  algorithm at every call; prints the result's bytes' hash (the same run
  after run).
"""
from __future__ import annotations

import hashlib
import sys
import warnings

import numpy as np

import collectives as cc
import collectives.tuning


def main(mode: str, path: str | None) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        comm = cc.init(tuning=path) if path else cc.init()
    r, n = comm.rank, comm.size
    mine = [str(w.message) for w in seen if issubclass(w.category, cc.tuning.TuningWarning)]
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
