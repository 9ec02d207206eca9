"""The algorithms of selection.RANK_ORDER give the bits of numpy's float32
sum in rank order, at 4 KiB and 1 MiB, on every rank that gets a result;
and at N = 4 the others do not (they reduce in another order).  Prints
``OK`` on rank 0."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

import collectives as cc
from collectives.selection import RANK_ORDER


def main() -> None:
    comm = cc.init()
    r, n = comm.rank, comm.size
    rng = np.random.default_rng(11)
    every = rng.standard_normal((n, 1 << 18)).astype(np.float32)
    order = every[0].copy()
    for q in range(1, n):
        order = order + every[q]
    other_orders = set()
    for call, same in RANK_ORDER.items():
        for alg in comm.algorithms(call):
            for nbytes in (4096, 1 << 20):
                m = nbytes // 4 // n * n
                x = every[r, :m].copy()
                if call == "all_reduce":
                    y, want = comm.all_reduce(x, algorithm=alg), order[:m]
                elif call == "reduce_scatter":
                    y = comm.reduce_scatter(x.reshape(n, -1), algorithm=alg)
                    want = order[:m].reshape(n, -1)[r]
                else:
                    y, want = comm.reduce(x, algorithm=alg), order[:m]
                ok = y is None or np.array_equal(y, want)
                ok = comm._mpi.allreduce(ok, op=MPI.LAND)
                if alg in same:
                    assert ok, f"{call} {alg} at {nbytes} B: not the rank order's bits"
                elif not ok:
                    other_orders.add((call, alg))
    if n == 4:
        assert other_orders == {(c, a) for c in RANK_ORDER for a in comm.algorithms(c)
                                if a not in RANK_ORDER[c]}, other_orders
    comm.close()
    if r == 0:
        print("OK", flush=True)


if __name__ == "__main__":
    main()
