"""Checks of CuPy arrays on the cuda transport, run under mpiexec by test_cuda.py.

    mpiexec -n N python tests/cuda_checks.py
    mpiexec -n N python tests/cuda_checks.py setup-fails WORD...

The variable-count calls on CuPy arrays against numpy, bad input (each
raises before any byte moves), numpy arrays beside CuPy ones on one
communicator, CuPy arrays refused by a host-only transport, and
numpy and CuPy arrays mixed between ranks (a CollectiveError, not a hang).
``setup-fails``: transport='cuda' must raise ValueError with every WORD in
its message on every rank (a set-up step made to fail on one rank, through
the stand-in's STANDIN_CUPY_FAIL), and the ranks must still work together
afterwards (an MPI barrier and a shm communicator).
Prints one line per failure; exit status 1 if any.  A rank still running
after STALL_DUMP_S prints the stack of each of its threads to stderr.
"""
from __future__ import annotations

import faulthandler
import glob
import os
import sys

import cupy
import numpy as np

import collectives as cc

STALL_DUMP_S = 60.0  # test_cuda.py waits 90 s or more: where a hung rank is stuck


def bad_inputs(comm):
    """(description, call, exception, words of the message)."""
    x = cupy.ones(6)
    yield "strided x", lambda: comm.all_reduce(cupy.ones(12)[::2]), ValueError, ["x", "C-contiguous"]
    yield "numpy out for CuPy x", lambda: comm.all_reduce(x, out=np.ones(6)), TypeError, \
        ["out", "numpy", "CuPy"]
    yield "CuPy out for numpy x", lambda: comm.all_gather(np.ones(6), out=cupy.ones((comm.size, 6))), \
        TypeError, ["out", "CuPy"]
    yield "out dtype", lambda: comm.all_reduce(x, out=cupy.ones(6, np.float32)), TypeError, \
        ["out", "dtype"]
    yield "out shape", lambda: comm.all_reduce(x, out=cupy.ones(5)), ValueError, ["out", "shape"]
    ov = cupy.ones(8)
    yield "partial overlap", lambda: comm.all_reduce(ov[:6], out=ov[2:]), ValueError, ["overlaps"]
    yield "bool dtype", lambda: comm.broadcast(cupy.ones(3, bool)), TypeError, ["buf", "dtype"]
    yield "max on complex", lambda: comm.all_reduce(cupy.ones(3, complex), op="max"), TypeError, \
        ["max", "complex"]
    if comm.size > 1:
        blocks = cupy.ones((comm.size, 2))
        yield "reduce_scatter skewed in place", \
            lambda: comm.reduce_scatter(blocks, out=blocks.reshape(-1)[1:3]), ValueError, \
            ["overlap"]
        yield "send to self", lambda: comm.send(x, comm.rank), ValueError, ["dst"]


def variable_counts(comm) -> list[str]:
    """The variable-count calls on CuPy arrays, every algorithm offered and
    the default, counts given and agreed (None), zero counts among them,
    two dtypes and a row shape, against numpy; and their traffic, with the
    counts given, against the blocks' bytes."""
    n, r = comm.size, comm.rank
    fails = []

    def check(what, got, want):
        if got is not None and not isinstance(got, cupy.ndarray):
            fails.append(f"{what}: returned {type(got).__name__}, not a CuPy array")
        elif (got is None) != (want is None) or (
                want is not None and not np.array_equal(cupy.asnumpy(got), want)):
            fails.append(f"{what}: wrong result")

    def block(rows, dt, tag):
        return (np.arange(rows * 3).reshape(rows, 3) + 1000 * tag).astype(dt)
    for dt in (np.float64, np.int32):
        for cs in ([i + 1 for i in range(n)], [0] * n, [(2 * i) % 3 for i in range(n)]):
            parts = [block(c, dt, i) for i, c in enumerate(cs)]
            full = np.concatenate(parts)
            x = cupy.asarray(parts[r])
            for alg in [None] + comm.algorithms("all_gather_v"):
                for counts in (cs, None):
                    check(f"all_gather_v {alg} {cs} counts={counts is not None} {dt.__name__}",
                          comm.all_gather_v(x, counts, algorithm=alg), full)
            for root in sorted({0, n - 1}):
                for alg in [None] + comm.algorithms("gather_v"):
                    check(f"gather_v {alg} {cs} root={root}",
                          comm.gather_v(x, cs, root=root, algorithm=alg),
                          full if r == root else None)
                for alg in [None] + comm.algorithms("scatter_v"):
                    check(f"scatter_v {alg} {cs} root={root}",
                          comm.scatter_v(cupy.asarray(full) if r == root else x, cs, root=root,
                                         algorithm=alg), parts[r])
            for alg in [None] + comm.algorithms("reduce_scatter_v"):
                xs = cupy.asarray(np.concatenate([block(c, dt, 7 * r) for c in cs]))
                want = sum(np.concatenate([block(c, dt, 7 * q) for c in cs])
                           for q in range(n))[sum(cs[:r]):sum(cs[:r + 1])]
                check(f"reduce_scatter_v {alg} {cs} {dt.__name__}",
                      comm.reduce_scatter_v(xs, cs, algorithm=alg), want)

            def cnt(i, j):  # rows rank i sends rank j
                return (cs[i] + j) % 3 if cs[i] else 0
            xa = cupy.asarray(np.concatenate([block(cnt(r, j), dt, 10 * r + j) for j in range(n)]))
            wa = np.concatenate([block(cnt(i, r), dt, 10 * i + r) for i in range(n)])
            for alg in [None] + comm.algorithms("all_to_all_v"):
                for given in (True, False):
                    before = comm.traffic
                    got = comm.all_to_all_v(xa, [cnt(r, j) for j in range(n)],
                                            [cnt(i, r) for i in range(n)] if given else None,
                                            algorithm=alg)
                    check(f"all_to_all_v {alg} {cs} given={given} {dt.__name__}", got, wa)
                    d, row = comm.traffic - before, 3 * np.dtype(dt).itemsize
                    moved = ((sum(cnt(r, j) for j in range(n)) - cnt(r, r)) * row,
                             (sum(cnt(i, r) for i in range(n)) - cnt(r, r)) * row)
                    if given and (d.sent_bytes, d.recv_bytes) != moved:
                        fails.append(f"all_to_all_v {alg} {cs} traffic {d}, expected {moved}")
    return fails


def main() -> int:
    fails = []
    with cc.init(transport="cuda") as comm:
        n, r = comm.size, comm.rank
        fails += variable_counts(comm)
        before = comm.traffic
        for desc, fn, exc, words in bad_inputs(comm):
            try:
                fn()
            except exc as e:
                if not all(w in str(e) for w in words):
                    fails.append(f"{desc}: message {e!r} lacks {words}")
            except Exception as e:
                fails.append(f"{desc}: {type(e).__name__} {e}, expected {exc.__name__}")
            else:
                fails.append(f"{desc}: no error")
        if comm.traffic != before:
            fails.append(f"bytes moved during bad calls: {comm.traffic - before}")
        # numpy and CuPy arrays on one communicator, one after the other
        h = comm.all_reduce(np.full(5, r + 1.0))
        d = comm.all_reduce(cupy.full(5, r + 1.0))
        if not isinstance(h, np.ndarray) or not isinstance(d, cupy.ndarray) or \
                not np.array_equal(h, cupy.asnumpy(d)) or h[0] != n * (n + 1) / 2:
            fails.append(f"numpy then CuPy all_reduce: {h!r} {d!r}")
        # the result is ready on the caller's stream as soon as the call returns
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            big = cupy.arange(1 << 22, dtype=np.float64)
            got = comm.all_reduce(big * (r + 1))
            ok = bool(cupy.all(got == big * (n * (n + 1) // 2)))
        if not ok:
            fails.append("all_reduce on a non-default stream gave a wrong result")
    with cc.init(transport="shm") as host:
        try:
            host.all_reduce(cupy.ones(3))
            fails.append("a CuPy array was accepted by transport='shm'")
        except TypeError as e:
            if "cuda" not in str(e):
                fails.append(f"CuPy on shm: {e}")
    if n > 1:  # rank 0 sends host memory where rank 1 expects device memory
        with cc.init(transport="cuda", timeout=10) as comm:
            if r == 0:
                comm.send(np.ones(1000), 1)
            elif r == 1:
                try:
                    comm.recv(cupy.empty(1000), 0)
                    fails.append("host data was received into device memory")
                except cc.CollectiveError as e:
                    if "mixed" not in str(e):
                        fails.append(f"mixed kinds between ranks: {e}")
            comm.barrier()
    fails += left_behind()
    for f in fails:
        print(f"FAIL rank {r}: {f}", flush=True)
    return 1 if fails else 0


def left_behind() -> list[str]:
    """The stand-in's "device memory" files of this process still in /dev/shm
    (its allocations are files named after the process; CuPy makes none)."""
    return [f"device memory left in {p}" for p in glob.glob(f"/dev/shm/standin-cuda-{os.getpid()}-*")]


def setup_fails(words: list[str]) -> int:
    from mpi4py import MPI
    r = MPI.COMM_WORLD.Get_rank()
    fails = []
    try:
        cc.init(transport="cuda", timeout=20).close()
        fails.append("transport='cuda' came up")
    except ValueError as e:
        if not all(w in str(e) for w in words):
            fails.append(f"message {str(e)!r} lacks {words}")
    except Exception as e:
        fails.append(f"{type(e).__name__}: {e}, expected ValueError")
    fails += left_behind()
    MPI.COMM_WORLD.Barrier()
    with cc.init(transport="shm") as comm:  # the ranks are in step
        if comm.all_reduce(np.ones(1))[0] != comm.size:
            fails.append("all_reduce on shm after the failure")
    for f in fails:
        print(f"FAIL rank {r}: {f}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    faulthandler.dump_traceback_later(STALL_DUMP_S)
    if sys.argv[1:2] == ["setup-fails"]:
        sys.exit(setup_fails(sys.argv[2:]))
    sys.exit(main())
