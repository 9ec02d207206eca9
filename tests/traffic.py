"""Measures comm.traffic for every algorithm, run under mpiexec by test_traffic.py.

    mpiexec -n N python tests/traffic.py TRANSPORT OUT.json

Rank 0 writes a list of failures (empty when every rank's bytes match
tests/expected_traffic.py, i.e. the figures of docs/algorithms.md).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from expected_traffic import expected, expected_total, ring_all_reduce_uneven  # noqa: E402

COUNT = 840 * 3  # divisible by every N <= 8 and by every power of two p2 <= 8
ITEM = 4
xp = np  # the array module measured: CuPy for the cuda transport


def run_call(comm, call: str, alg, root: int) -> int:
    """One ``call`` by ``alg`` (None: the default) on COUNT float32 elements
    (a block of them for the blocked calls); returns its S."""
    n = comm.size
    x = xp.ones(COUNT, np.float32)
    blocks = xp.ones((n, COUNT), np.float32)
    if call == "all_reduce":
        comm.all_reduce(x, algorithm=alg)
    elif call == "broadcast":
        comm.broadcast(x, root=root, algorithm=alg)
    elif call == "reduce":
        comm.reduce(x, root=root, algorithm=alg)
    elif call == "all_gather":
        comm.all_gather(x, algorithm=alg)
    elif call == "reduce_scatter":
        comm.reduce_scatter(blocks, algorithm=alg)
    elif call == "all_to_all":
        comm.all_to_all(blocks, algorithm=alg)
    elif call == "gather":
        comm.gather(x, root=root, algorithm=alg)
    elif call == "scatter":
        comm.scatter(blocks if comm.rank == root else None, x, root=root, algorithm=alg)
    else:
        comm.barrier(algorithm=alg)
    return blocks.nbytes if call in ("reduce_scatter", "all_to_all") else x.nbytes


def measure(comm, call: str, alg: str, root: int):
    before = comm.traffic
    S = run_call(comm, call, alg, root)
    d = comm.traffic - before
    return d.sent_bytes, d.recv_bytes, S


def main(transport: str, out: str) -> None:
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    fails, checked = [], 0
    if transport == "cuda":
        global xp
        import cupy
        xp = cupy
    # exchange() through shared memory: a peer reads only what it needs of a buffer
    shared = transport == "shm"
    with cc.init(transport=transport) as comm:
        n, r = comm.size, comm.rank
        for call in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                     "all_to_all", "gather", "scatter", "barrier"):
            for alg in comm.algorithms(call):
                for root in (range(n) if call in ("broadcast", "reduce", "gather", "scatter")
                             else [0]):
                    sent, recv, S = measure(comm, call, alg, root)
                    rows = world.allgather((sent, recv))
                    if r != 0:
                        continue
                    checked += 1
                    tag = f"{call} alg={alg} n={n} root={root} S={S}"
                    tot_s, tot_r = sum(s for s, _ in rows), sum(q for _, q in rows)
                    want_tot = expected_total(call, alg, n, S, shared)
                    if not (tot_s == tot_r == want_tot):
                        fails.append(f"{tag}: total sent {tot_s} recv {tot_r}, expected {want_tot}")
                    for rank, (s, q) in enumerate(rows):
                        want = expected(call, alg, rank, n, S, root, shared)
                        if want is not None and (s, q) != tuple(want):
                            fails.append(f"{tag} rank {rank}: sent/recv {(s, q)}, "
                                         f"expected {tuple(float(w) for w in want)}")
        big = xp.ones(840 * 1024, np.float32)  # blocks past the shm rendezvous size
        for call, alg in [("all_reduce", a) for a in comm.algorithms("all_reduce")] + \
                [("all_gather", "ring"), ("broadcast", "chain")]:
            before = comm.traffic
            if call == "all_reduce":
                comm.all_reduce(big, algorithm=alg)
            elif call == "all_gather":
                comm.all_gather(big[:big.size // n], algorithm=alg)
            else:
                comm.broadcast(big, algorithm=alg)
            d = comm.traffic - before
            S = big.nbytes if call != "all_gather" else big[:big.size // n].nbytes
            rows = world.allgather((d.sent_bytes, d.recv_bytes))
            if r == 0:
                checked += 1
                for rank, (s, q) in enumerate(rows):
                    want = expected(call, alg, rank, n, S, 0, shared)
                    if (s, q) != tuple(want):
                        fails.append(f"large {call} alg={alg} n={n} rank {rank}: sent/recv "
                                     f"{(s, q)}, expected {tuple(float(w) for w in want)}")
        for count in (1, 7, 3 * n + 1, 1001):
            x = xp.ones(count, np.float32)
            before = comm.traffic
            comm.all_reduce(x, algorithm="ring")
            sent = (comm.traffic - before).sent_bytes
            rows = world.allgather(sent)
            if r == 0:
                checked += 1
                for rank, s in enumerate(rows):
                    want = ring_all_reduce_uneven(rank, n, count, ITEM) if n > 1 else 0
                    ideal = 2 * (n - 1) / n * count * ITEM
                    if s != want or abs(s - ideal) > 2 * ITEM:
                        fails.append(f"ring all_reduce count={count} rank {rank}: sent {s}, "
                                     f"expected {want} (2(N-1)/N*S = {ideal:.1f})")
    if world.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"checked": checked, "failures": fails}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
