"""The variable-count calls against their fixed-count twins, at equal counts:

    mpiexec -n N python -m bench.variable [--sizes 1M,16M] [--rounds 7] [--transport auto]

For each call and size (the bytes of one rank's x), in interleaved rounds
(A, B, C, A, B, C, ...): the fixed-count call (``all_gather`` ...), the
variable-count call with its counts given, with them agreed (None), and
MPI's own variable-count call (``Allgatherv`` ...) on the same buffers.
Each round times a loop of calls; a round's figure is the slowest rank's
time per call.  Prints the medians and each ratio to the twin
(docs/performance.md, "Variable counts").
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def candidates(comm, mpi, nbytes: int) -> dict:
    """name -> argument-free call, for one size: each rank's x is nbytes."""
    from mpi4py import MPI
    n = comm.size
    m = max(1, nbytes // 8 // n) * n  # float64 elements, a multiple of n
    rows = m // n
    blocks = np.ones((n, rows))
    x = blocks.reshape(-1)  # the twins and the variable calls read the same memory
    counts = [m] * n
    cb = [rows] * n
    d_counts = [m] * n
    displ = [i * m for i in range(n)]
    r_counts = [rows] * n
    r_displ = [i * rows for i in range(n)]
    flat = np.empty(n * m)
    out_n = flat.reshape(n, m)  # the twin's result in the same memory as the variable call's
    a2a_in, a2a_out = x, np.empty(m)
    rs_out = np.empty(rows)
    sc_out = np.empty(m)
    return {
        "all_gather": {
            "twin": lambda: comm.all_gather(x, out=out_n),
            "v given": lambda: comm.all_gather_v(x, counts, out=flat),
            "v agreed": lambda: comm.all_gather_v(x, None, out=flat),
            "MPI Allgatherv": lambda: mpi.Allgatherv(x, [flat, d_counts, displ, MPI.DOUBLE]),
        },
        "all_to_all": {
            "twin": lambda: comm.all_to_all(blocks, out=a2a_out.reshape(n, rows)),
            "v given": lambda: comm.all_to_all_v(a2a_in, cb, cb, out=a2a_out),
            "v agreed": lambda: comm.all_to_all_v(a2a_in, cb, None, out=a2a_out),
            "MPI Alltoallv": lambda: mpi.Alltoallv([a2a_in, r_counts, r_displ, MPI.DOUBLE],
                                                   [a2a_out, r_counts, r_displ, MPI.DOUBLE]),
        },
        "reduce_scatter": {
            "twin": lambda: comm.reduce_scatter(blocks, out=rs_out),
            "v given": lambda: comm.reduce_scatter_v(x, cb, out=rs_out),
            "MPI Reduce_scatter": lambda: mpi.Reduce_scatter(x, rs_out, r_counts, MPI.SUM),
        },
        "gather": {
            "twin": lambda: comm.gather(x, out=out_n if comm.rank == 0 else None),
            "v given": lambda: comm.gather_v(x, counts, out=flat if comm.rank == 0 else None),
            "v agreed": lambda: comm.gather_v(x, None, out=flat if comm.rank == 0 else None),
            "MPI Gatherv": lambda: mpi.Gatherv(x, [flat, d_counts, displ, MPI.DOUBLE]
                                               if comm.rank == 0 else None),
        },
        "scatter": {
            "twin": lambda: comm.scatter(out_n if comm.rank == 0 else None, sc_out),
            "v given": lambda: comm.scatter_v(flat if comm.rank == 0 else None, counts, out=sc_out),
            "MPI Scatterv": lambda: mpi.Scatterv([flat, d_counts, displ, MPI.DOUBLE]
                                                 if comm.rank == 0 else None, sc_out),
        },
    }


def timed(comm, mpi, fn, iters: int) -> float:
    from mpi4py import MPI
    mpi.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    return mpi.allreduce(dt, op=MPI.MAX)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.variable", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--sizes", default="1M,16M", help="bytes of one rank's x (K, M suffixes)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--transport", default="auto")
    ap.add_argument("--calls", default="all_gather,all_to_all,reduce_scatter,gather,scatter")
    a = ap.parse_args(argv)
    import collectives as cc
    from mpi4py import MPI
    comm = cc.init(transport=a.transport)
    mpi = MPI.COMM_WORLD.Dup()
    if comm.rank == 0:
        print(f"# {comm.size} ranks over {comm.transport}; slowest rank's time per call, "
              f"median of {a.rounds} interleaved rounds; ratio: time / the twin's")
    for nb in map(_size, a.sizes.split(",")):
        for call, cands in candidates(comm, mpi, nb).items():
            if call not in a.calls.split(","):
                continue
            for fn in cands.values():  # warm up
                timed(comm, mpi, fn, 2)
            iters = max(3, min(200, int(0.05 / max(timed(comm, mpi, cands["twin"], 3), 1e-6))))
            times = {k: [] for k in cands}
            for _ in range(a.rounds):
                for k, fn in cands.items():
                    times[k].append(timed(comm, mpi, fn, iters))
            if comm.rank == 0:
                twin = statistics.median(times["twin"])
                cells = "  ".join(f"{k} {statistics.median(v) * 1e6:9.1f} us "
                                  f"({statistics.median(v) / twin:4.2f})"
                                  for k, v in times.items())
                print(f"{call:15s} {nb >> 10:6d} KiB  {cells}", flush=True)
    mpi.Free()
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
