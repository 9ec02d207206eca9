"""Every rank of a failed collective learns of it fast, under mpiexec:

    mpiexec -n N python tests/fastfail_check.py TRANSPORT OUT.json

With a 30 s timeout, each case makes rank 1 fail inside an all_reduce of
100,000 float32 on a fresh sub-communicator: ``mismatch`` (rank 1 passes
one element more; the default algorithm), ``mismatch ring`` (the same with
``algorithm="ring"``, where only some blocks differ in size) and ``local
error`` (rank 1's transport raises on its second message).  Each rank
records the seconds from its call to its raise, the error's class and
message.  Then the failures must have broken nothing else: a communicator
split before them, a new one split after them and the world communicator
each run a correct all_reduce (``after``).  Rank 0 writes
``{"cases": {case: [record per rank]}, "after": [ok per rank]}``.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from faults import inject  # noqa: E402  (rank 1's transport raises on its n-th message)

COUNT = 100_000
CASES = ("mismatch", "mismatch ring", "local error")


def one_case(world, case: str) -> dict:
    comm = world.split(0, world.rank)
    comm.all_reduce(np.ones(4))  # a call that works first: the failing one is #2
    odd = comm.rank == 1
    x = np.ones(COUNT + (odd and case != "local error"), np.float32)
    if odd and case == "local error":
        inject(comm, 2)
    t0 = time.monotonic()
    try:
        comm.all_reduce(x, algorithm="ring" if case == "mismatch ring" else None)
        rec = {"error": None}
    except Exception as e:  # noqa: BLE001 - recorded, the test judges it
        rec = {"error": type(e).__name__, "message": str(e)}
    rec["seconds"] = round(time.monotonic() - t0, 3)
    comm.close()
    return rec


def works(comm) -> bool:
    return bool((comm.all_reduce(np.ones(1000)) == comm.size).all())


def main(transport: str, out_path: str) -> int:
    from mpi4py import MPI
    world = cc.init(transport=transport, timeout=30)
    before = world.split(0, world.rank)
    mine = {}
    for case in CASES:
        mine[case] = one_case(world, case)
        MPI.COMM_WORLD.Barrier()
    after = world.split(0, world.rank)
    ok = works(before) and works(after) and works(world)
    everyone = MPI.COMM_WORLD.gather((mine, ok), root=0)
    if world.rank == 0:
        res = {"cases": {c: [m[c] for m, _ in everyone] for c in CASES},
               "after": [a for _, a in everyone]}
        with open(out_path, "w") as f:
            json.dump(res, f)
    for c in (before, after, world):
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
