"""Measurements behind docs/performance.md's analysis, run under mpiexec.

    mpiexec -n 2 python -m bench.probe coherence   # copying into memory a peer reads
    mpiexec -n 2 python -m bench.probe cma         # process_vm_readv against a local copy
    mpiexec -n 2 python -m bench.probe alias [--reps R]  # a copy by where it lands from its source
    mpiexec -n 2 python -m bench.probe latency     # where a small all-reduce's time goes
    mpiexec -n 2 python -m bench.probe huge [--size 4M] [--reps R]  # by the buffers' huge pages
    mpiexec -n 4 python -m bench.probe share [--size 16M] [--reps R]   # reduction's share
    mpiexec -n N python -m bench.probe ab COLLECTIVE ALG[,ALG...] SIZE[,SIZE...] [--reps R]
                                          [--alloc comm] [--huge-pages on|off]
    mpiexec -n N python -m bench.probe small [SIZE,...] [--reps R]   # the small all-reduce's two rounds
    mpiexec -n N python -m bench.probe dtypes [SIZE,...] [--reps R]  # half types against float32
    mpiexec -n N python -m bench.probe cuda [SIZE,...] [--reps R]    # the wait between processes
    mpiexec -n 2 python -m bench.probe parts [SIZE,...] [--reps R]   # an all_to_all's parts against MPI's

``ab`` times MPI's collective and each algorithm in turn, R times over, and
prints the median of each: interleaving keeps a machine whose speed drifts
from favouring whichever ran first (the default choices come from it).
``default`` is the call with no algorithm named (the selection table, then
adaptation); ``ALG:plain`` runs ALG with no streaming stores in its copies into ``out``
(as ``COLLECTIVES_STREAM_BYTES=0`` would), in the same job; ``--alloc comm``
puts our buffers in communicator-allocated arrays (as ``bench --alloc comm``);
Each ``ab`` line ends with the share of every rank's input that huge pages
back (``transports/shm/_thp.py``; the same arrays are MPI's inputs).
``--huge-pages off`` stops numpy from asking the kernel for transparent huge
pages for its arrays of 4 MiB and more (``madvise(MADV_HUGEPAGE)``, numpy's
default, ``on``), for MPI's buffers and ours alike.
``small`` does the same for ``comm.all_reduce(x, out)`` of a few bytes with
its compiled round and with Python's (the kernels switched off around the
loop) against ``MPI_Allreduce``, and prints time ratios to MPI (our time /
MPI's: the small-message targets are put that way).
``alias`` times, on every rank at once, a 512 KiB ``np.copyto`` whose
destination lies d bytes past its source modulo 4 KiB (d from -48 to 256),
R interleaved rounds of 200 copies, medians.
``cuda`` (needs CuPy and a GPU; the communicator is ``cuda``) times a
send/recv round trip between ranks 0 and 1 of numpy and of CuPy arrays, then
``all_reduce`` of CuPy arrays at each size, R interleaved rounds, medians:
on ranks that share a GPU the CuPy round trip is the wait between their
contexts, whatever the size (docs/gpu.md).
``parts`` (N = 2) times, on the same plain arrays, MPI's all_to_all, MPI's
send-receive of the peer's block alone, a copy of the own block alone, and
our ``one_copy`` (its compiled gather, and its Python steps) and
``direct``, R interleaved rounds, medians: MPI's call against the sum of
its parts, and ours against both.
Rank 0 prints; every figure is per call, the slowest rank's mean.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from transports.shm import _thp


def _timed(world, fn, iters: int) -> float:
    from mpi4py import MPI
    fn()
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return world.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)


def coherence(comm, world, args) -> None:
    """Copy 1 MiB into this rank's exchange buffer, then let the peer read it
    (or not), round after round: the copy's cost with and without the peer's
    reads in between is what cross-core coherence adds to every staged byte."""
    ep = comm._t.coll
    n = (1 << 20) // 4
    x = np.ones(n, np.float32)
    out = np.empty_like(x)
    for mode in ("peer reads", "nobody reads"):
        copy = 0.0
        rounds = 200
        for i in range(rounds + 20):
            mine = ep.stage(n, x)
            a = time.perf_counter()
            mine[...] = x
            b = time.perf_counter()
            v = ep.exchange(mine)
            if mode == "peer reads":
                np.add(v[0], v[1], out=out)
            else:
                np.add(v[comm.rank], x, out=out)
            if i >= 20:
                copy += b - a
        us = world.allreduce(copy / rounds * 1e6) / comm.size
        if comm.rank == 0:
            print(f"copy of 1 MiB into the exchange buffer, {mode}: {us:7.1f} us "
                  f"({(1 << 20) / us / 1e3:5.1f} GB/s)")


def cma(comm, world, args) -> None:
    """Both ranks read the other's buffer with process_vm_readv at once, then
    both copy locally: MPICH moves large messages the first way."""
    from transports.shm import _cma
    r = world.Get_rank()
    for nb in (1 << 20, 4 << 20, 16 << 20):
        src = np.full(nb, r + 1, np.uint8)
        dst = np.empty(nb, np.uint8)
        pid, addr = world.allgather((os.getpid(), src.ctypes.data))[(r + 1) % world.Get_size()]
        remote = _timed(world, lambda: _cma.read(pid, addr, dst), 20)
        local = _timed(world, lambda: np.copyto(dst, src), 20)
        if r == 0:
            print(f"{nb >> 20:3d} MiB  process_vm_readv {nb / remote / 1e9:5.1f} GB/s   "
                  f"np.copyto {nb / local / 1e9:5.1f} GB/s   (per rank, all ranks at once)")


def _at(offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` bytes starting ``offset`` bytes into a 4 KiB page."""
    raw = np.empty(nbytes + 8192, np.uint8)
    start = (-raw.ctypes.data) % 4096 + offset
    return raw[start:start + nbytes]


def alias(comm, world, args) -> None:
    """A copy of 512 KiB by how far past its source (modulo 4 KiB) its
    destination lies: a destination a few bytes ahead makes the copy's loads
    wait on its own earlier stores to the same low address bits (4 KiB
    aliasing), which on some states of this VM halves its speed
    (performance.md, "Copies a few bytes ahead of their source")."""
    nb, src = 512 << 10, _at(16, 512 << 10)
    src[:] = 1
    pairs = {d: _at((16 + d) % 4096, nb) for d in (-48, -16, 0, 16, 48, 64, 128, 256)}
    times: dict = {d: [] for d in pairs}
    for _ in range(args.reps):
        for d, dst in pairs.items():
            times[d].append(_timed(world, lambda: np.copyto(dst, src), 200))
    if comm.rank == 0:
        print("512 KiB np.copyto on every rank at once, destination - source (mod 4 KiB): "
              "us per copy (median of the rounds)")
        print("  ".join(f"{d:+d}: {statistics.median(t) * 1e6:.1f}" for d, t in times.items()))


_HUGE = 2 << 20
_kept_maps: list = []


def _backed(nbytes: int, share: float) -> np.ndarray:
    """``nbytes`` of private anonymous memory from a 2 MiB boundary with huge
    pages asked for on the first ``share`` of it (whole 2 MiB pages) and
    forbidden on the rest, written once (so faulted in)."""
    import mmap
    m = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    _kept_maps.append(m)
    a = np.frombuffer(m, np.uint8)
    start = (-a.ctypes.data) % _HUGE
    cut = int(nbytes * share) // _HUGE * _HUGE
    if cut:
        m.madvise(mmap.MADV_HUGEPAGE, start, cut)
    if cut < nbytes:
        m.madvise(mmap.MADV_NOHUGEPAGE, start + cut, nbytes - cut)
    v = a[start:start + nbytes]
    v[:] = 1
    return v


def huge(comm, world, args) -> None:
    """process_vm_readv and all_to_all by the huge-page share of their
    buffers: each rank reads half the peer's buffer (source and destination
    each on huge pages or not), then ``all_to_all`` of ``--size`` with its
    source and destination all, half or not on huge pages, alternated R
    times against MPI_Alltoall on the same buffers (N = 2)."""
    from transports.shm import _cma
    r, n, nb = world.Get_rank(), world.Get_size(), args.size
    half = nb // 2
    for src_huge, dst_huge in ((1, 1), (1, 0), (0, 1), (0, 0)):
        x, o = _backed(nb, src_huge), _backed(nb, dst_huge)
        pid, addr = world.allgather((os.getpid(), x.ctypes.data))[(r + 1) % n]
        t = [_timed(world, lambda: _cma.read(pid, addr, o[:half]), 20) for _ in range(args.reps)]
        if r == 0:
            print(f"process_vm_readv of {half >> 10} KiB, source on huge pages {src_huge}, "
                  f"destination {dst_huge}: {np.median(t) * 1e6:7.1f} us", flush=True)
    algs = ("one_copy", "direct", "one_copy_or_staged")
    for share in (1.0, 0.5, 0.0):
        x, o = _backed(nb, share).view(np.float32), _backed(nb, share).view(np.float32)
        xs, os_ = x.reshape(n, -1), o.reshape(n, -1)
        fns = {a: (lambda a=a: comm.all_to_all(xs, out=os_, algorithm=a)) for a in algs}
        fns["MPI"] = lambda: world.Alltoall(x, o)
        res: dict = {k: [] for k in fns}
        for _ in range(args.reps):
            for k, fn in fns.items():
                res[k].append(_timed(world, fn, 10))
        shares = world.gather(_thp.huge_share(x))
        if r == 0:
            med = {k: float(np.median(v)) * 1e6 for k, v in res.items()}
            cells = "  ".join(f"{a} {med[a]:7.1f}" for a in algs)
            print(f"all_to_all {nb >> 20} MiB, buffers {share:.0%} on huge pages (x: "
                  + "/".join(f"{s:.2f}" for s in shares) + f"): {cells}  MPI {med['MPI']:7.1f} us",
                  flush=True)


def latency(comm, world, args) -> None:
    """A small all-reduce against its parts and MPI_Allreduce; where the
    ranks are a power of two, also recursive doubling written on mpi4py
    alone (Isend, Irecv, Testall: no checks, no timeout), the least that an
    all-reduce written in Python on MPI's point-to-point costs; the library's
    recursive_doubling run on the endpoint (no call around it); and, on
    mpi and hier, its rounds as bare compiled send-receives (mpi_swap: no
    tag, count or timeout), the floor of those rounds."""
    from mpi4py import MPI
    x = np.ones(2, np.float32)
    out = np.empty_like(x)
    ep = comm._t.coll
    where = "shared memory" if comm.transport == "shm" else "messages"
    rows = [("MPI_Allreduce, 8 B", lambda: world.Allreduce(x, out)),
            (f"comm.all_reduce(x, out), 8 B ({comm.transport})", lambda: comm.all_reduce(x, out)),
            ("comm.all_reduce(x), 8 B", lambda: comm.all_reduce(x)),
            (f"ep.exchange(x): one round through {where}", lambda: ep.exchange(x)),
            ("comm.barrier()", lambda: comm.barrier()),
            ("np.add of 2 float32, out=", lambda: np.add(x, x, out=out))]
    n, r = world.Get_size(), world.Get_rank()
    if n > 1 and n & (n - 1) == 0:
        bare, tmp = world.Dup(), np.empty_like(x)
        from collectives.all_reduce import recursive_doubling
        from transports import _swap
        flat = getattr(ep, "flat", ep)  # hier's messages go through its flat part
        swap = _swap.swap(x, tmp) if comm.transport in ("mpi", "hier") else None

        from collectives.ops import REDUCERS, Op
        add = REDUCERS[Op.SUM]

        def on_endpoint():
            ep.tag += 1
            recursive_doubling(ep, x, out, add)
        rows.insert(2, ("recursive_doubling on the endpoint, 8 B", on_endpoint))
        if swap is not None:
            def compiled():
                np.copyto(out, x)
                m = 1
                while m < n:
                    swap(out, r ^ m, tmp, r ^ m, 7, flat.handle, 64, False)
                    np.add(out, tmp, out=out)
                    m <<= 1
            rows.insert(2, ("recursive doubling, compiled rounds alone (mpi_swap)", compiled))

        def doubling():
            np.copyto(out, x)
            m = 1
            while m < n:
                reqs = [bare.Irecv([tmp, MPI.BYTE], r ^ m, 7), bare.Isend([out, MPI.BYTE], r ^ m, 7)]
                while not MPI.Request.Testall(reqs):
                    os.sched_yield()
                np.add(out, tmp, out=out)
                m <<= 1
        rows.insert(1, ("recursive doubling on mpi4py alone, 8 B", doubling))
    for name, fn in rows:
        us = _timed(world, fn, 20000) * 1e6
        if comm.rank == 0:
            print(f"{us:7.2f} us  {name}")


def share(comm, world, args) -> None:
    """The default all-reduce of ``--size`` float32 bytes, the compiled kernels
    and numpy's pairwise ufuncs alternating R times: the time per call, the
    part of it spent reducing (in ``ops.in_rank_order``, the one place every
    shared-memory all-reduce reduces) and what the kernels would gain if the
    reduction were all of it; the rest is copies and waiting."""
    from collectives import all_reduce, kernels
    spent = [0.0]
    inner = all_reduce.in_rank_order

    def timed(parts, op, out):
        t = time.perf_counter()
        inner(parts, op, out)
        spent[0] += time.perf_counter() - t
    all_reduce.in_rank_order = timed
    x = np.random.default_rng(comm.rank).random(args.size // 4, dtype=np.float32)
    out = np.empty_like(x)
    iters = max(3, int(0.3 / max(1e-6, args.size / 2e9)))
    modes = [m for m in ("best", "numpy") if m == "numpy" or kernels.isas()[-1] != "numpy"]
    res: dict = {m: [] for m in modes}
    for _ in range(args.reps):
        for m in modes:
            kernels.use(m)
            spent[0] = 0.0
            total = _timed(world, lambda: comm.all_reduce(x, out), iters)
            red = world.allreduce(spent[0] / (iters + 1), op=MPI_MAX())
            res[m].append((total, red))
    kernels.use("best")
    all_reduce.in_rank_order = inner
    if comm.rank == 0:
        alg = comm.choose_algorithm("all_reduce", args.size)
        print(f"N={comm.size} all_reduce {args.size} B float32 ({alg}), medians of {args.reps}:")
        med = {m: [float(np.median([v[i] for v in res[m]])) for i in (0, 1)] for m in modes}
        for m in modes:
            t, r = med[m]
            print(f"  {m:6s} {t * 1e3:8.2f} ms per call, {r * 1e3:8.2f} ms reducing "
                  f"({r / t:5.1%}), the rest {(t - r) * 1e3:8.2f} ms")
        if len(modes) == 2:
            (tk, rk), (tn, rn) = med["best"], med["numpy"]
            print(f"  kernels / numpy: {tn / tk:4.2f}x per call; reducing alone {rn / rk:4.2f}x; "
                  f"the most the kernels could give, the rest unchanged: "
                  f"{tn / (tn - rn):4.2f}x")


def MPI_MAX():
    from mpi4py import MPI
    return MPI.MAX


def _plain_copies(fn):
    """``fn`` with every copy into ``out`` plain (no streaming stores:
    ``collectives.streaming`` as with ``COLLECTIVES_STREAM_BYTES=0``)."""
    from collectives import streaming

    def call():
        was, streaming.STREAM_BYTES = streaming.STREAM_BYTES, 0
        try:
            fn()
        finally:
            streaming.STREAM_BYTES = was
    return call


def ab(comm, world, args) -> None:
    from .cases import CASES
    algs = args.algorithms.split(",")
    for nbytes in args.sizes:
        case = CASES[args.collective](comm, world, nbytes, np.dtype("float32"), "sum", 0)
        if args.alloc == "comm":
            case.in_regions()
        fns = {a: (_plain_copies(case.ours(a[:-len(":plain")])) if a.endswith(":plain")
                   else case.ours(None if a == "default" else a)) for a in algs}
        fns["MPI"] = case.baseline(None)
        res: dict = {k: [] for k in fns}
        iters = max(2, min(200, int(0.04 / max(2e-6, nbytes / 3e9))))
        for _ in range(args.reps):
            for k, fn in fns.items():
                res[k].append(_timed(world, fn, iters))
        src = next((a for a in (getattr(case, k, None) for k in ("x", "buf"))
                    if isinstance(a, np.ndarray)), None)
        shares = world.gather(_thp.huge_share(src))  # the input's, MPI's too
        if comm.rank == 0:
            med = {k: float(np.median(v)) * 1e6 for k, v in res.items()}
            cells = "  ".join(f"{a} {med[a]:9.1f} ({med['MPI'] / med[a]:4.2f}x)" for a in algs)
            huge = "/".join(f"{s:.2f}" for s in shares)
            print(f"N={comm.size} {args.collective} {nbytes:>9} B  {cells}  MPI {med['MPI']:9.1f} us"
                  f"  (input on huge pages: {huge})", flush=True)


def _python_steps(call) -> None:
    """``call()`` with the compiled one-copy gather off (OneCopy.gather's
    Python steps: expose, read, finish)."""
    from transports.shm import one_copy
    compiled, one_copy._gather = one_copy._gather, None
    try:
        call()
    finally:
        one_copy._gather = compiled


def parts(comm, world, args) -> None:
    if comm.size != 2:
        raise SystemExit("bench.probe parts: run it on 2 ranks")
    r = comm.rank
    p = 1 - r
    for nbytes in args.sizes:
        x = np.full((2, nbytes // 8), r, np.float32)
        out, o2 = np.empty_like(x), np.empty_like(x)
        fns = {
            "MPI all_to_all": lambda: world.Alltoall(x, o2),
            "MPI sendrecv of the peer's block": lambda: world.Sendrecv(x[p], p, 0, o2[p], p, 0),
            "np.copyto of the own block": lambda: np.copyto(o2[r], x[r]),
            "one_copy": lambda: comm.all_to_all(x, out, algorithm="one_copy"),
            "one_copy, Python's steps": lambda: _python_steps(
                lambda: comm.all_to_all(x, out, algorithm="one_copy")),
            "direct": lambda: comm.all_to_all(x, out, algorithm="direct"),
        }
        iters = max(2, min(200, int(0.04 / max(2e-6, nbytes / 3e9))))
        res: dict = {k: [] for k in fns}
        for _ in range(args.reps):
            for k, fn in fns.items():
                res[k].append(_timed(world, fn, iters))
        world.Alltoall(x, o2)
        if not np.array_equal(out, o2):
            raise SystemExit(f"bench.probe parts: rank {r}: our all_to_all differs from MPI's")
        if r == 0:
            print(f"all_to_all, N = 2, {nbytes} B of input a rank:", flush=True)
            for k, v in res.items():
                print(f"{statistics.median(v) * 1e6:9.1f} us  {k}", flush=True)


def small(comm, world, args) -> None:
    from collectives import kernels
    best = kernels.isa()
    paths = {"compiled": best, "python": "numpy"} if best != "numpy" else {"python": "numpy"}
    for nbytes in args.sizes:
        x = np.arange(max(1, nbytes // 4), dtype=np.float32)
        out, mout = np.empty_like(x), np.empty_like(x)
        comm.all_reduce(x, out)  # the first call of an (op, dtype) takes the general path
        res: dict = {k: [] for k in (*paths, "MPI")}
        for _ in range(args.reps):
            for name, path in paths.items():
                kernels.use(path)
                res[name].append(_timed(world, lambda: comm.all_reduce(x, out), args.iters))
            kernels.use(best)
            res["MPI"].append(_timed(world, lambda: world.Allreduce(x, mout), args.iters))
        if comm.rank == 0:
            ratio = {k: float(np.median([a / m for a, m in zip(v, res["MPI"])]))
                     for k, v in res.items()}
            cells = "  ".join(f"{k} {float(np.median(v)) * 1e6:6.2f} us ({ratio[k]:4.2f}x MPI)"
                              for k, v in res.items() if k != "MPI")
            print(f"N={comm.size} all_reduce {x.nbytes:>5} B  {cells}  "
                  f"MPI {float(np.median(res['MPI'])) * 1e6:6.2f} us", flush=True)


def dtypes(comm, world, args) -> None:
    from collectives.dtypes import BFLOAT16
    names = ("float32", "float16", "bfloat16")
    n = comm.size
    for nbytes in args.sizes:
        fns = {}
        for name in names:
            dt = BFLOAT16 if name == "bfloat16" else np.dtype(name)
            x = np.random.default_rng(comm.rank).random(nbytes // dt.itemsize).astype(dt)
            out = np.empty_like(x)
            fns[name] = (lambda x=x, out=out: comm.all_reduce(x, out))
        iters = max(3, min(200, int(0.1 / max(2e-6, nbytes / 3e9))))
        res: dict = {k: [] for k in names}
        for _ in range(args.reps):
            for k, fn in fns.items():
                res[k].append(_timed(world, fn, iters))
        if comm.rank == 0:
            bus = {k: [2 * (n - 1) / n * nbytes / t / 1e9 for t in v] for k, v in res.items()}
            cells = []
            for k in names:
                r = np.median([b / f for b, f in zip(bus[k], bus["float32"])])
                cells.append(f"{k} {np.median(bus[k]):6.2f} GB/s ({r:4.2f})")
            alg = comm.choose_algorithm("all_reduce", nbytes)
            print(f"N={n} all_reduce {nbytes:>9} B ({alg})  " + "  ".join(cells), flush=True)


def cuda(comm, world, args) -> None:
    """Round trips of numpy and CuPy messages, then all_reduce on CuPy arrays."""
    import cupy
    r, n = comm.rank, comm.size

    def pingpong(x):
        def run():
            if r == 0:
                comm.send(x, 1)
                comm.recv(x, 1)
            elif r == 1:
                comm.recv(x, 0)
                comm.send(x, 0)
        return run
    rows = []
    if n > 1:
        rows += [(f"round trip 0 <-> 1, {name}", pingpong(x), 100) for name, x in (
            ("numpy 4 B", np.zeros(1, np.float32)), ("CuPy 4 B", cupy.zeros(1, np.float32)),
            ("CuPy 16 MiB", cupy.zeros(1 << 22, np.float32)))]
    for nbytes in args.sizes:
        x = cupy.ones(nbytes // 4, np.float32)
        rows.append((f"all_reduce CuPy {nbytes} B ({comm.choose_algorithm('all_reduce', nbytes)})",
                     lambda x=x: comm.all_reduce(x), max(5, min(100, (256 << 20) // nbytes))))
    times: dict = {name: [] for name, _, _ in rows}
    for _ in range(args.reps):  # interleaved rounds
        for name, fn, iters in rows:
            times[name].append(_timed(world, fn, iters) * 1e6)
    if r == 0:
        slots = comm._t.dev_slot_bytes if n > 1 else 0
        print(f"N={n} transport cuda, device slots of {slots} B; medians of {args.reps} rounds")
        for name, _, _ in rows:
            print(f"{statistics.median(times[name]):9.1f} us  {name}", flush=True)


def main() -> None:
    from .cli import parse_size
    p = argparse.ArgumentParser(prog="python -m bench.probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="probe", required=True)
    for name in ("coherence", "cma"):
        sub.add_parser(name)
    al = sub.add_parser("alias")
    al.add_argument("--reps", type=int, default=5)
    lat = sub.add_parser("latency")
    lat.add_argument("--transport", default="shm", choices=("shm", "mpi", "hier"),
                     help="the communicator's transport (default shm)")
    hg = sub.add_parser("huge")
    hg.add_argument("--size", type=parse_size, default=4 << 20)
    hg.add_argument("--reps", type=int, default=5)
    sh = sub.add_parser("share")
    sh.add_argument("--size", type=parse_size, default=16 << 20)
    sh.add_argument("--reps", type=int, default=5)
    sm = sub.add_parser("small")
    sm.add_argument("sizes", nargs="?", default=[8, 64, 512, 4096],
                    type=lambda s: [parse_size(v) for v in s.split(",")])
    sm.add_argument("--reps", type=int, default=5)
    sm.add_argument("--iters", type=int, default=5000)
    dt = sub.add_parser("dtypes")
    dt.add_argument("sizes", nargs="?", default=[1 << 20, 4 << 20, 16 << 20],
                    type=lambda s: [parse_size(v) for v in s.split(",")])
    dt.add_argument("--reps", type=int, default=7)
    cu = sub.add_parser("cuda")
    cu.add_argument("sizes", nargs="?", default=[1 << 20, 64 << 20],
                    type=lambda s: [parse_size(v) for v in s.split(",")])
    cu.add_argument("--reps", type=int, default=5)
    pa = sub.add_parser("parts")
    pa.add_argument("sizes", nargs="?", default=[1 << 20, 4 << 20],
                    type=lambda s: [parse_size(v) for v in s.split(",")])
    pa.add_argument("--reps", type=int, default=7)
    a = sub.add_parser("ab")
    a.add_argument("collective")
    a.add_argument("algorithms")
    a.add_argument("sizes", type=lambda s: [parse_size(v) for v in s.split(",")])
    a.add_argument("--reps", type=int, default=3)
    a.add_argument("--alloc", default="numpy", choices=("numpy", "comm"),
                   help="our buffers: plain numpy arrays or comm.empty ones (as bench --alloc)")
    a.add_argument("--huge-pages", default="on", choices=("on", "off"),
                   help="numpy's madvise(MADV_HUGEPAGE) of arrays from 4 MiB (default on)")
    args = p.parse_args()
    if getattr(args, "huge_pages", "on") == "off":
        core = getattr(np, "_core", None) or np.core  # numpy 2 / 1
        core.multiarray._set_madvise_hugepage(False)
    import collectives as cc
    from mpi4py import MPI
    transport = "cuda" if args.probe == "cuda" else getattr(args, "transport", "shm")
    with cc.init(transport) as comm:
        {"coherence": coherence, "cma": cma, "alias": alias, "latency": latency, "share": share,
         "ab": ab, "small": small, "dtypes": dtypes, "huge": huge, "cuda": cuda,
         "parts": parts}[args.probe](
            comm, MPI.COMM_WORLD, args)


if __name__ == "__main__":
    main()
