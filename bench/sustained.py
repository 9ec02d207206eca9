"""The default against every algorithm over long runs of calls.

``mpiexec -n N python -m bench.sustained gather,scatter,reduce -b 1M``
times, in each of ``--rounds`` rounds, ``--calls`` default calls in a row
and then a quarter as many of each offered algorithm named, each run of
calls between two barriers (the wall time of rank 0 over the run, per
call).  Where ``python -m bench`` gives the default a short warm-up and a
few hundred calls, this gives it thousands, as a training loop does: the
line of each collective says the default's time over the best named
algorithm's (medians over the rounds) and which algorithm the default's
calls ran, counted call by call.  The buffers are ``bench.cases``' (with
``--alloc comm``, communicator-allocated).

``--cost`` measures what choosing costs once the default has settled:
after ``--calls`` default calls, ``--rounds`` pairs of runs of ``--calls``
calls, the default's and those of the algorithm it ran most named (in turn
first), each pair's ratio; the line gives their median and quartiles (1.00:
the default's machinery, tries included, costs nothing).
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time

import numpy as np

from .cases import CASES
from .cli import parse_size


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sustained",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("collectives",
                   help="comma-separated: " + ",".join(c for c in CASES if c != "barrier"))
    p.add_argument("-b", "--size", default="1M",
                   help="message size, in nccl-tests' sense (default 1M)")
    p.add_argument("--calls", type=int, default=800, help="default calls a round (default 800)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--alloc", choices=("numpy", "comm"), default="comm",
                   help="our buffers: plain numpy arrays or comm.empty (default comm)")
    p.add_argument("-d", "--datatype", default="float32")
    p.add_argument("--cost", action="store_true",
                   help="the default against the algorithm it settled on, in pairs of runs")
    a = p.parse_args(argv)
    a.collectives = a.collectives.split(",")
    for c in a.collectives:
        if c not in CASES or c == "barrier":
            p.error(f"unknown collective {c!r}")
    if a.calls < 4 or a.rounds < 1:
        p.error("--calls must be at least 4 and --rounds at least 1")
    a.nbytes = parse_size(a.size)
    return a


def run(comm, mpicomm, name: str, a: argparse.Namespace) -> str:
    case = CASES[name](comm, mpicomm, a.nbytes, np.dtype(a.datatype), "sum", 0)
    if a.alloc == "comm":
        case.in_regions()
    algorithms = list(comm.algorithms(name))
    chooser = comm._choose  # its history: the algorithm each default call ran
    chooser.history = []
    calls = {alg: case.ours(alg) for alg in [None] + algorithms}
    per = collections.defaultdict(list)
    for _ in range(a.rounds):
        for alg, fn in calls.items():
            k = a.calls if alg is None else max(1, a.calls // 4)
            comm.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            comm.barrier()
            per[alg].append((time.perf_counter() - t0) / k)
    ran = collections.Counter(str(alg) for call, alg in chooser.history if call == name)
    chooser.history = None
    med = {alg: statistics.median(v) for alg, v in per.items()}
    best = min(algorithms, key=lambda alg: med[alg])
    most, count = ran.most_common(1)[0]
    named = " ".join(f"{alg} {med[alg] * 1e6:.1f}" for alg in algorithms)
    return (f"{name} {a.nbytes} B: default {med[None] * 1e6:.1f} us, "
            f"÷best {med[None] / med[best]:.2f} (best {best}); "
            f"default ran {most} in {count} of {sum(ran.values())} calls; "
            f"named (us): {named}")


def cost(comm, mpicomm, name: str, a: argparse.Namespace) -> str:
    """The default's time over that of the algorithm it ran most, named, in
    ``a.rounds`` pairs of runs of ``a.calls`` calls (each pair in turn
    first), after ``a.calls`` default calls."""
    case = CASES[name](comm, mpicomm, a.nbytes, np.dtype(a.datatype), "sum", 0)
    if a.alloc == "comm":
        case.in_regions()
    chooser = comm._choose
    chooser.history = []
    default = case.ours(None)
    for _ in range(a.calls):
        default()
    ran = collections.Counter(str(alg) for call, alg in chooser.history if call == name)
    chooser.history = None
    settled = ran.most_common(1)[0][0]
    pair = {None: default, settled: case.ours(settled)}
    ratios, per = [], collections.defaultdict(list)
    for r in range(a.rounds):
        t = {}
        for alg in (None, settled) if r % 2 == 0 else (settled, None):
            comm.barrier()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                pair[alg]()
            comm.barrier()
            t[alg] = (time.perf_counter() - t0) / a.calls
            per[alg].append(t[alg])
        ratios.append(t[None] / t[settled])
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return (f"{name} {a.nbytes} B: default {statistics.median(per[None]) * 1e6:.1f} us, "
            f"{settled} named {statistics.median(per[settled]) * 1e6:.1f} us; "
            f"default ÷ named, paired: median {statistics.median(ratios):.3f}, "
            f"quartiles {q[0]:.3f}-{q[2]:.3f} ({a.rounds} pairs of {a.calls} calls)")


def main(argv: list[str]) -> int:
    a = parse(argv)
    from mpi4py import MPI

    import collectives as cc
    comm = cc.init()
    for name in a.collectives:
        line = (cost if a.cost else run)(comm, MPI.COMM_WORLD, name, a)
        if comm.rank == 0:
            print(line, flush=True)
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
