"""Command line: ``mpiexec -n N python -m bench COLLECTIVE [options]``.

See the package docstring for what the columns mean.  ``python -m bench
tune ...`` writes a tuning file instead (bench/tune.py).
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional, Sequence

import numpy as np

from collectives.dtypes import BFLOAT16

from collectives.ops import DTYPES, Op, resolve

from .cases import CASES, COLLECTIVES

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_OPS = tuple(o.value for o in Op)
DEFAULT_WARMUP = 5
DEFAULT_REPEAT = 3


def parse_size(text: str) -> int:
    """Bytes from ``8``, ``64K``, ``1M``, ``2G`` (powers of 1024; ``KB``/``KiB`` too)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (expected e.g. 8, 64K, 1M, 2G)")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def size_range(lo: int, hi: int, factor: float) -> list[int]:
    """``lo``, ``lo*factor``, ... up to ``hi`` inclusive (each step rounded down)."""
    if lo > hi:
        raise ValueError(f"minbytes ({lo}) is larger than maxbytes ({hi})")
    if factor <= 1 and lo != hi:
        raise ValueError(f"stepfactor must be > 1, got {factor:g}")
    sizes, s = [lo], lo
    while lo != hi:
        nxt = int(s * factor)
        if nxt <= s:  # lo = 0 or a factor too close to 1 for integer sizes
            nxt = s + 1
        if nxt > hi:
            break
        sizes.append(nxt)
        s = nxt
    return sizes


class _Parser(argparse.ArgumentParser):
    """Prints usage and errors on rank 0 only (every rank parses the same argv)."""

    quiet = False

    def _print_message(self, message, file=None):
        if not self.quiet:
            super()._print_message(message, file)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m bench",
                description="nccl-tests style benchmark of the collectives library "
                            "against MPI's own collectives (run under mpiexec); "
                            "'python -m bench tune -h': write a tuning file")
    p.add_argument("collective", choices=COLLECTIVES + ("all",),
                   help="the collective to measure, or 'all' for each in turn")
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("32M"),
                   help="smallest size (K/M/G suffixes, powers of 1024; default 32M)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("32M"),
                   help="largest size (default 32M)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0,
                   help="multiply the size by this between rows (default 2)")
    p.add_argument("-n", "--iters", type=int, default=None,
                   help="timed calls per size and round (default: adaptive, see --budget)")
    p.add_argument("-w", "--warmup_iters", type=int, default=None,
                   help=f"untimed calls before timing (default {DEFAULT_WARMUP}, or "
                        "as many as take ~0.02 s, at most ~0.2 s per size)")
    p.add_argument("--budget", type=float, default=0.3,
                   help="seconds of timed loop per call and size, all rounds together, "
                        "when -n is not given (default 0.3)")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT,
                   help="rounds per size: each round times ours out of place, MPI's call "
                        "and a local copy in turn (then as many rounds of ours in place); "
                        "rows show medians and the "
                        f"median of the per-round ratios (default {DEFAULT_REPEAT})")
    p.add_argument("-d", "--datatype", default="float32",
                   help="numpy dtype name (default float32)")
    p.add_argument("-o", "--op", default="sum", choices=_OPS, help="reduction op (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank (default 0)")
    p.add_argument("--transport", default="auto", choices=("auto", "shm", "mpi", "hier", "cuda"),
                   help="transport of the library (default auto); cuda measures CuPy "
                        "buffers, against NCCL where it can be had (else MPI on host buffers)")
    p.add_argument("--alloc", default="numpy", choices=("numpy", "comm"),
                   help="our buffers: plain numpy arrays (default) or communicator-allocated "
                        "ones (comm.empty: on shm the peers read them in place); MPI's stay "
                        "plain")
    p.add_argument("--algorithm", default=None,
                   help="force one of comm.algorithms(collective), or 'all' for a row "
                        "for the library's choice and one per algorithm, timed in the same "
                        "rounds, with each row's time over the fastest's (÷best) "
                        "(default: the library's choice)")
    p.add_argument("--twin", action="store_true",
                   help="with --algorithm all: time a second copy of every algorithm in the "
                        "same rounds and add a row twin:X for the fastest one, X, whose "
                        "÷best is what a default that always ran X would show (the noise "
                        "floor of ÷best)")
    p.add_argument("--hosts", default="auto", choices=("auto", "only", "off"),
                   help="where the ranks span several hosts: after each table, hier beside "
                        "the flat mpi transport and MPI with the bytes moved within and "
                        "between hosts (auto), that comparison alone (only), or none (off)")
    p.add_argument("--check", action="store_true",
                   help="check every result against numpy; count mismatches in #wrong")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="write the results as JSON (a list of objects for 'all')")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="plot busbw against size (needs matplotlib)")
    return p


def parse_args(argv: Optional[Sequence[str]], rank: int, size: int) -> argparse.Namespace:
    """Parse and check ``argv``; exits with status 2 (message on rank 0) if invalid."""
    p = build_parser()
    p.quiet = rank != 0
    a = p.parse_args(argv)
    try:
        a.sizes = size_range(a.minbytes, a.maxbytes, a.stepfactor)
    except ValueError as e:
        p.error(str(e))
    try:
        a.dtype = np.dtype(a.datatype)
    except TypeError:
        p.error(f"unknown datatype {a.datatype!r}")
    if a.dtype not in DTYPES:
        p.error(f"datatype {a.dtype} is not one the library takes: "
                f"{', '.join(str(d) for d in DTYPES)}")
    try:  # the library's own rule (max/min not for complex, avg for floating types)
        resolve(a.op, a.dtype)
    except (TypeError, ValueError) as e:
        p.error(str(e))
    if not 0 <= a.root < size:
        p.error(f"root must be in 0..{size - 1}, got {a.root}")
    if a.iters is not None and a.iters < 1:
        p.error("iters must be at least 1")
    if a.warmup_iters is not None and a.warmup_iters < 0:
        p.error("warmup_iters must be >= 0")
    if a.budget <= 0:
        p.error("budget must be positive")
    if a.repeat < 1:
        p.error("repeat must be at least 1")
    if a.plot:  # before anything runs, not after the whole benchmark
        from .report import plotting_missing
        missing = plotting_missing()
        if missing:
            p.error(missing)
    return a


def algorithms_for(name: str, requested: Optional[str], comm) -> Optional[list[Optional[str]]]:
    """The algorithms to run for ``name``: [None] for the default choice, None to skip."""
    if requested is None:
        return [None]
    offered = comm.algorithms(name)
    if requested != "all" and requested not in offered:
        return None
    # all: the default first, then every algorithm, timed in the same rounds
    return [None] + list(offered) if requested == "all" else [requested]


def _settings(a: argparse.Namespace, algs: list[Optional[str]]):
    from .timing import Settings
    given = a.warmup_iters is not None
    return Settings(sizes=a.sizes, dtype=a.dtype, op=a.op, root=a.root, algorithms=algs,
                    iters=a.iters, warmup=a.warmup_iters if given else DEFAULT_WARMUP,
                    warmup_given=given, budget_s=a.budget, check=a.check,
                    repeat=a.repeat, alloc=a.alloc, twin=a.twin and len(algs) > 1)


def _bench_one(name: str, a: argparse.Namespace, comm, mpicomm, memcpy: float, table,
               nccl=None):
    """Measure one collective and print its table on rank 0; None if it is skipped."""
    from . import report, runner
    rank0 = comm.rank == 0
    algs = algorithms_for(name, a.algorithm, comm)
    if algs is None:
        if rank0:
            print(f"# skip {name}: no algorithm {a.algorithm!r} "
                  f"(it has {', '.join(comm.algorithms(name))})\n#", flush=True)
        return None
    cls = CASES[name]
    res = report.Result(collective=name, n=comm.size, transport=comm.transport,
                        dtype=str(a.dtype), op=a.op if cls.reducing else "none",
                        root=a.root if cls.rooted else -1, memcpy_gbps=memcpy,
                        repeat=a.repeat, alloc=a.alloc, mpi_library=report.mpi_library_name(),
                        baseline="NCCL" if nccl is not None else
                        "MPI-op" if cls.reducing and a.dtype == BFLOAT16 else "MPI")
    if rank0 and res.baseline == "MPI-op":
        print("# baseline MPI-op: MPI has no bfloat16; its reducing call runs on 16-bit words "
              "with a user-defined op (MPI.Op.Create: numpy, float32, rounded to bfloat16)",
              flush=True)
    if rank0:
        labels = [x for x in algs if x is not None]
        if None in algs:  # auto:X(source), X any algorithm it may choose
            labels += [f"auto:{x}({source})" for x in comm.algorithms(name)
                       for source in report.SOURCES]
        if a.twin and len(algs) > 1:
            labels += [f"twin:{x}" for x in comm.algorithms(name)]
        table.header(res, a.transport, labels, over_best=len(algs) > 1)
    for row in runner.run_collective(name, comm, mpicomm, _settings(a, algs), nccl):
        res.rows.append(row)
        if rank0:
            table.row(res, row)
    if rank0:
        table.closing(res)
    return res


def _many_hosts(a: argparse.Namespace, comm, mpicomm):
    """bench.hosts' comparison where the ranks span several hosts (and it is
    not turned off, nor the GPU measured); None otherwise."""
    if a.hosts == "off" or a.transport == "cuda" or comm.hosts < 2:
        return None
    from .hosts import Hosts
    return Hosts(mpicomm, comm)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark; returns the exit status (1 if any result was wrong).
    ``tune ...`` hands the rest of the arguments to ``bench.tune``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["tune"]:
        from . import tune
        return tune.main(args[1:])
    from mpi4py import MPI

    import collectives as cc

    from . import report, runner, timing

    world = MPI.COMM_WORLD
    a = parse_args(args, world.Get_rank(), world.Get_size())
    names = list(COLLECTIVES) if a.collective == "all" else [a.collective]
    mpicomm = world.Dup()
    results: list[report.Result] = []
    compared: list = []  # bench.hosts.Comparison, where the ranks span hosts
    if a.transport == "cuda":
        from . import gpu
        gpu.use_device(world.Get_rank())
    try:
        with cc.init(transport=a.transport) as comm:
            rank0 = comm.rank == 0
            if a.algorithm not in (None, "all") and \
                    not any(algorithms_for(n, a.algorithm, comm) for n in names):
                if rank0:
                    offered = "; ".join(f"{n}: {', '.join(comm.algorithms(n))}"
                                        for n in names)
                    print(f"python -m bench: error: unknown algorithm {a.algorithm!r} "
                          f"(offered: {offered})", file=sys.stderr)
                return 2
            if a.hosts == "only" and comm.hosts < 2:
                if rank0:
                    print("python -m bench: error: --hosts only needs ranks on several "
                          "hosts (docs/hosts.md)", file=sys.stderr)
                return 2
            memcpy = runner.memcpy_gbps(mpicomm)
            table = report.Table()
            if rank0:
                table.preamble(
                    memcpy, iters=str(a.iters) if a.iters else
                    f"auto ({a.budget:g} s/size over the rounds, "
                    f"{timing.MIN_ITERS}..{timing.MAX_ITERS} a round)",
                    warmup=str(a.warmup_iters) if a.warmup_iters is not None
                    else f"{DEFAULT_WARMUP} (0.02..0.2 s)", check=a.check,
                    repeat=a.repeat, alloc=a.alloc, over_best=a.algorithm == "all",
                    mpi_library=report.mpi_library_name())
            nccl = None
            if a.transport == "cuda":
                nccl, why = gpu.nccl_baseline(mpicomm)
                if rank0:
                    print("# buffers: CuPy arrays on the GPU; baseline: " +
                          ("NCCL on the same buffers" if nccl else
                           f"MPI on host buffers ({why})"), flush=True)
            many = _many_hosts(a, comm, mpicomm)
            try:
                for name in names:
                    res = _bench_one(name, a, comm, mpicomm, memcpy, table, nccl) \
                        if a.hosts != "only" else None
                    if res is not None:
                        results.append(res)
                    if many is not None and algorithms_for(name, a.algorithm, comm):
                        compared.append(many.run(name, _settings(a, [None]),
                                                 getattr(a, "repeat", None), rank0))
            finally:
                if many is not None:
                    many.close()
    finally:
        mpicomm.Free()
    if world.Get_rank() == 0 and (results or compared):
        if a.json:
            report.write_json(a.json, results, as_list=a.collective == "all",
                              hosts=[c.as_json() for c in compared])
            print(f"# wrote {a.json}", flush=True)
        if a.plot and report.write_plot(a.plot, results):
            print(f"# wrote {a.plot}", flush=True)
    bad = any(report.wrong(r) for res in results for r in res.rows) or \
        any(r.wrong for c in compared for r in c.rows)
    return 1 if bad else 0
