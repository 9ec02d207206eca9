"""Mismatched calls without debug mode, under mpiexec:

    mpiexec -n N python tests/mismatch_check.py TRANSPORT OUT.json

Every algorithm of every collective with a payload (a barrier moves none),
with one rank's element count off by one element (per block, for the calls
whose x is N blocks), by more than a block or an exchange buffer, and down
to 0 elements (an empty call), the odd rank being rank 1 and, for the
rooted calls, the root (0) too.  Each case
runs on a fresh sub-communicator of a world communicator that no case
touches, so that a case that breaks its communicator leaves the next one
alone; counts differ from case to case, so that a message one case leaves
behind cannot pass for one of the next.  Each rank records, per case, what
its call did: ``["returned", result is None]`` or ``["raised", class,
seconds]``; rank 0 writes every rank's records to OUT.json as
``{case: [record of rank 0, record of rank 1, ...]}`` (``cases`` below).
Run it with a short COLLECTIVES_TIMEOUT: a rank that would hang then fails
its case instead of the job.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402

ROOTED = ("broadcast", "reduce", "gather", "scatter")
BLOCKED = ("reduce_scatter", "all_to_all")  # x is N blocks: the count is per block
BASE = 1500  # elements; float32, so several 4 KiB slots and exchange buffers
MANY = 2000  # the second kind of difference: more than a block and an exchange buffer
KINDS = ("one", "many", "zero")  # the odd rank's count: one more, MANY more, 0


def cases(comm) -> list[tuple[str, str, str, int]]:
    """(call, algorithm, kind, odd rank) for every case at this size."""
    out = []
    for call in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                 "all_to_all", "gather", "scatter"):
        for alg in comm.algorithms(call):
            for kind in KINDS:
                for odd in ((1, 0) if call in ROOTED else (1,)):
                    out.append((call, alg, kind, odd))
    return out


def run(comm, call: str, alg: str, count: int):
    """``call`` with ``alg`` on arrays of ``count`` elements (per block), root 0."""
    n, r = comm.size, comm.rank
    x = np.full(count, r + 1.0, np.float32)
    blocks = np.full((n, count), r + 1.0, np.float32)
    if call == "all_reduce":
        return comm.all_reduce(x, algorithm=alg)
    if call == "broadcast":
        return comm.broadcast(x, root=0, algorithm=alg)
    if call == "reduce":
        return comm.reduce(x, root=0, algorithm=alg)
    if call == "all_gather":
        return comm.all_gather(x, algorithm=alg)
    if call == "reduce_scatter":
        return comm.reduce_scatter(blocks, algorithm=alg)
    if call == "all_to_all":
        return comm.all_to_all(blocks, algorithm=alg)
    if call == "gather":
        return comm.gather(x, root=0, algorithm=alg)
    return comm.scatter(blocks if r == 0 else None, x, root=0, algorithm=alg)


def one_case(world, i: int, call: str, alg: str, kind: str, odd: int) -> list:
    comm = world.split(0, world.rank)
    count = BASE + 8 * i + ((1 if kind == "one" else MANY) if comm.rank == odd else 0)
    if kind == "zero" and comm.rank == odd:
        count = 0
    t0 = time.monotonic()
    try:
        got = run(comm, call, alg, count)
        rec = ["returned", got is None]
    except (cc.CollectiveError, ValueError, TypeError) as e:
        rec = ["raised", type(e).__name__, round(time.monotonic() - t0, 3)]
    comm.close()
    return rec


def main(transport: str, out_path: str) -> int:
    from mpi4py import MPI
    world = cc.init(transport=transport)
    mine = {}
    t0 = time.monotonic()
    for i, (call, alg, kind, odd) in enumerate(cases(world)):
        mine[f"{call} {alg} {kind} odd={odd}"] = one_case(world, i, call, alg, kind, odd)
        MPI.COMM_WORLD.Barrier()  # the next case starts when every rank is done
    everyone = MPI.COMM_WORLD.gather(mine, root=0)
    if world.rank == 0:
        merged = {case: [recs[case] for recs in everyone] for case in mine}
        with open(out_path, "w") as f:
            json.dump({"cases": merged, "seconds": round(time.monotonic() - t0, 2)}, f)
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
