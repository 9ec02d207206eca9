"""Ranks that disagree on a call's dtype, op or root, debug mode off:

    mpiexec -n N python tests/disagree_check.py TRANSPORT OUT.json

Each case (``cases``) is one call in which rank 1 (the last rank, for a
root) passes something else than the others: a dtype of the same item
size (float32 against int32), another op (max against sum), another root;
at 8 B, 64 KiB and 1 MiB, with the default and with every algorithm
offered; and counts that disagree (rank 1 believes rank 0 has a row more)
in the variable-count calls, and in all_to_all_v's and all_gather_v's
defaults rank 1 passing no (recv_)counts where the others pass them, or,
with none passed, an out of a row more, rows of another length or (all_gather_v)
an x in place at another rank's block of its out; and the same in gather_v's
default (no counts: root learns them from each rank's message on shm and mpi).  Each case runs on a fresh sub-communicator of a world that no
case touches; each rank records ``["raised", class, seconds, message]``,
or ``["returned", what its next call (a barrier) did]``, and rank 0 writes ``{case: [record per rank]}``.
Run it with a short COLLECTIVES_TIMEOUT: a rank that would hang fails its
case instead of the job.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402

SIZES = (8, 64 << 10, 1 << 20)  # bytes
WARM = 40  # agreeing calls of each case before the one that disagrees


def _odd(comm) -> bool:
    return comm.rank == 1


def run(comm, kind: str, call: str, alg, nbytes: int, odd: bool | None = None):
    """One call of a case, rank 1 the one that differs (``odd``: False, no
    rank differs)."""
    n = comm.size
    odd = _odd(comm) if odd is None else odd
    count = nbytes // 4
    dt = np.int32 if kind == "dtype" and odd else np.float32
    x = np.ones(count, dt)
    op = "max" if kind == "op" and odd else "sum"
    root = (n - 1 if odd else 0) if kind == "root" else 0
    if call == "all_reduce":
        return comm.all_reduce(x, op=op, algorithm=alg)
    if call == "reduce_scatter":
        return comm.reduce_scatter(np.ones((n, max(1, count // n)), dt), op=op, algorithm=alg)
    if call == "reduce":
        return comm.reduce(x, op=op, root=root, algorithm=alg)
    if call == "broadcast":
        return comm.broadcast(x, root=root, algorithm=alg)
    if call == "gather":
        return comm.gather(x, root=root, algorithm=alg)
    if call == "scatter":
        return comm.scatter(np.ones((n, count), dt), x, root=root, algorithm=alg)
    if call == "scan":
        return comm.scan(x, op=op, algorithm=alg)
    if call == "gather_v":
        return comm.gather_v(x, [count] * n, root=root, algorithm=alg)
    if call == "gather_v/learned":  # no counts
        return comm.gather_v(x, root=root, algorithm=alg)
    if call == "gather_v/none":  # rank 1 passes no counts, the others do
        cs = None if kind == "counts" and odd else [count] * n
        return comm.gather_v(x, cs, algorithm=alg)
    if call == "gather_v/out":  # no counts; root (rank 1)'s out holds a row more
        out = np.empty(count * n + (kind == "counts" and odd), dt) if comm.rank == 1 else None
        return comm.gather_v(x, out=out, root=1, algorithm=alg)
    if call == "gather_v/row":  # no counts; rank 1's rows hold two elements
        return comm.gather_v(np.ones((count, 1 + (kind == "counts" and odd)), dt),
                             algorithm=alg)
    # counts: rank 1 believes rank 0 has one row more than rank 0 has
    rows = [count + 1 if kind == "counts" and odd and j == 0 else count for j in range(n)]
    if call == "all_gather_v":
        return comm.all_gather_v(np.ones(rows[comm.rank], dt), rows, algorithm=alg)
    if call == "all_gather_v/none":  # rank 1 passes no counts, the others do
        cs = None if kind == "counts" and odd else [count] * n
        return comm.all_gather_v(np.ones(count, dt), cs, algorithm=alg)
    if call == "all_gather_v/out":  # no counts; rank 1's out holds a row more
        out = np.empty(count * n + (kind == "counts" and odd), dt)
        return comm.all_gather_v(np.ones(count, dt), out=out, algorithm=alg)
    if call == "all_gather_v/row":  # no counts; rank 1's rows hold two elements
        return comm.all_gather_v(np.ones((count, 1 + (kind == "counts" and odd)), dt),
                                 algorithm=alg)
    if call == "all_gather_v/at":  # no counts; rank 1's x is block 0 of its out (in place)
        out = np.ones(count * n, dt)
        at = 0 if kind == "counts" and odd else comm.rank * count
        return comm.all_gather_v(out[at:at + count], out=out, algorithm=alg)
    if call == "reduce_scatter_v":
        return comm.reduce_scatter_v(np.ones(sum(rows), dt), rows, algorithm=alg)
    if call == "all_to_all_v/recv":  # rank 1 passes no recv_counts, the others do
        recv = None if kind == "counts" and odd else [count] * n
        return comm.all_to_all_v(np.ones(count * n, dt), [count] * n, recv, algorithm=alg)
    if call == "all_to_all_v/out":  # no recv_counts; rank 1's out holds a row more
        out = np.empty(count * n + (kind == "counts" and odd), dt)
        return comm.all_to_all_v(np.ones(count * n, dt), [count] * n, out=out, algorithm=alg)
    if call == "all_to_all_v/row":  # no recv_counts; rank 1's rows hold two elements
        x = np.ones((count * n, 1 + (kind == "counts" and odd)), dt)
        return comm.all_to_all_v(x, [count] * n, algorithm=alg)
    if call == "all_to_all_v":  # rank 1 expects a row more from rank 0 than rank 0 sends it
        recv = [count + 1 if kind == "counts" and odd and j == 0 else count for j in range(n)]
        return comm.all_to_all_v(np.ones(count * n, dt), [count] * n, recv, algorithm=alg)
    raise ValueError(call)


CALLS = {"dtype": ("all_reduce", "reduce_scatter", "broadcast", "gather"),
         "op": ("all_reduce", "reduce_scatter", "reduce", "scan"),
         "root": ("reduce", "broadcast", "gather", "scatter", "gather_v", "gather_v/learned"),
         "counts": ("all_gather_v", "reduce_scatter_v", "all_to_all_v", "all_to_all_v/recv",
                    "all_to_all_v/out", "all_to_all_v/row", "all_gather_v/none",
                    "all_gather_v/out", "all_gather_v/row", "all_gather_v/at", "gather_v/none",
                    "gather_v/out", "gather_v/row")}


def _algorithms(comm, call: str) -> list:
    """The default, and every algorithm offered; all_to_all_v's variants
    without recv_counts: the default, where it learns them in its first
    round (shm: then every rank checks every out; elsewhere a rank's wrong
    out is its own ValueError, after the agreement)."""
    if call in ("gather_v/out", "gather_v/row", "all_to_all_v/out", "all_to_all_v/row",
                "all_gather_v/out", "all_gather_v/row", "all_gather_v/at"):
        return [None] if comm.transport != "hier" else []  # learned on shm and mpi
    if call in ("all_to_all_v/recv", "all_gather_v/none", "gather_v/none", "gather_v/learned"):
        return [None]
    return [None] + comm.algorithms(call)


def cases(comm) -> list[tuple[str, str, object, int]]:
    out = []
    for kind, calls in CALLS.items():
        for call in calls:
            for alg in _algorithms(comm, call):
                for nb in SIZES if alg is None else SIZES[:1] + SIZES[-1:]:
                    out.append((kind, call, alg, nb))
    return out


def _next(comm) -> list:
    """What this rank's next call (a barrier) does after it returned from
    the case: ["raised", class, seconds, message] or ["returned"]."""
    t0 = time.monotonic()
    try:
        comm.barrier()
        return ["returned"]
    except Exception as e:  # noqa: BLE001
        return ["raised", type(e).__name__, round(time.monotonic() - t0, 3), str(e)]


def main(transport: str, out_path: str) -> int:
    from mpi4py import MPI
    world = cc.init(transport=transport)
    mine = {}
    for kind, call, alg, nb in cases(world):
        comm = world.split(0, world.rank)
        for _ in range(WARM):  # past the default's first calls, which agree on the form
            run(comm, kind, call, alg, nb, odd=False)
        t0 = time.monotonic()
        try:
            run(comm, kind, call, alg, nb)
            rec = ["returned", _next(comm)]
        except Exception as e:  # noqa: BLE001 (recorded; the test judges)
            rec = ["raised", type(e).__name__, round(time.monotonic() - t0, 3), str(e)]
        comm.close()
        mine[f"{kind} {call} {alg or 'default'} {nb}"] = rec
        MPI.COMM_WORLD.Barrier()
    everyone = MPI.COMM_WORLD.gather(mine, root=0)
    if world.rank == 0:
        with open(out_path, "w") as f:
            json.dump({c: [recs[c] for recs in everyone] for c in mine}, f)
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
