"""Tuning a machine: ``mpiexec -n N python -m bench tune -o FILE [options]``.

Times every algorithm that the communicator offers for every collective
(``bench.cases.COLLECTIVES``) over a grid of sizes, and writes on rank 0 a
tuning file that ``COLLECTIVES_TUNING=FILE`` or ``cc.init(tuning=FILE)``
loads: per collective and kind of array, the fastest algorithm measured
at each size, as rules by size.

Kinds of array: plain numpy arrays (``"plain"``), and on the ``shm``
transport communicator-allocated ones too (``"allocated"``: ``comm.empty``,
which the peers read in place); on the ``cuda`` transport CuPy arrays
(``"device"``).  The barrier has one size (none) and takes no array: it
is timed once, under ``"plain"``.

Timing is the benchmark's (``bench.timing``): per size and kind, every
algorithm is warmed up and then timed in ``--repeat`` interleaved rounds; a
round's figure is the largest over the ranks of each rank's mean time per
call; an algorithm's figure is the median over the rounds.  float32, op
sum, root 0, out of place.  The library's run-time adaptation is off and no
tuning file is loaded while it measures, so that every figure is the named
algorithm's.

Rules (``rules``): per collective and kind, ``[[up_to, algorithm], ...]``
sorted by size; ``up_to`` is the largest ``nbytes`` (what
``comm.choose_algorithm`` takes: the input's bytes, one block for gather
and scatter) that the rule covers, ``null`` in the last rule (no bound).
The boundary between two grid sizes ``a < b`` is ``isqrt(a * b)`` (their
geometric mean, rounded down); adjacent rules that name the same
algorithm are merged.

``python -m bench tune --merge F1 F2 ... -o FILE`` (no mpiexec) writes one
file from several made for the same job shape, at different times: on a
machine whose speed changes between states, each file sees the state it
ran in, and the fastest algorithm of one state can be far behind in the
other.  Per collective, kind and size measured in every file, an
algorithm's regret in a file is its time over that file's fastest; the
merged rule takes the algorithm of the least worst regret (to 1 %; then of
the least geometric mean of regrets).  Its ``measured`` holds the median
over the files of each time, ``merged`` the files' names and dates.

The file (version 1)::

    {"format": "collectives-tuning", "version": 1, "library", "created",
     "machine": {"cpu", "cores", "hostname"}, "ranks", "ranks_per_host",
     "transport", "adapt",
     "rules": {CALL: {KIND: [[up_to or null, ALGORITHM], ...]}},
     "measured": {CALL: {KIND: {NBYTES: {ALGORITHM: seconds}}}}}
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
from typing import Optional, Sequence

import numpy as np

from .cases import CASES, COLLECTIVES

FORMAT = "collectives-tuning"
VERSION = 1
DEFAULT_SIZES = "1K,16K,256K,1M,4M,16M"
# with the defaults a run at N = 2 or 4 takes 66-95 s on the 2-core development
# machine (docs/performance.md): per algorithm and size, 3 rounds of at least
# 3 calls each, about 0.2 s of timed calls in all
DEFAULT_REPEAT = 3
DEFAULT_BUDGET = 0.2  # seconds of timed calls per algorithm and size, all rounds together
WARMUP = 2             # untimed calls per algorithm and size (the first one also estimates)
DTYPE = np.dtype(np.float32)
OP, ROOT = "sum", 0


# -- the rules: a pure function of the measurements -----------------------------------
def boundary(a: int, b: int) -> int:
    """The largest nbytes that goes with grid size ``a`` rather than ``b``
    (``a < b``): their geometric mean, rounded down."""
    return math.isqrt(a * b)


def best(times: dict[str, float]) -> str:
    """The algorithm of the lowest time (the first of equal ones, in the order given)."""
    return min(times, key=lambda alg: times[alg])


def rules(measured: dict[int, dict[str, float]]) -> list[list]:
    """``[[up_to, algorithm], ...]`` from ``{nbytes: {algorithm: seconds}}``:
    the best algorithm of each size, in size order, the boundary between
    consecutive sizes their geometric mean rounded down, the last rule's
    bound None; adjacent rules of the same algorithm are merged."""
    sizes = sorted(measured)
    if not sizes:
        raise ValueError("rules: no measurements")
    out: list[list] = []
    for i, nbytes in enumerate(sizes):
        alg = best(measured[nbytes])
        up_to = boundary(nbytes, sizes[i + 1]) if i + 1 < len(sizes) else None
        if out and out[-1][1] == alg:
            out[-1][0] = up_to
        else:
            out.append([up_to, alg])
    return out


def all_rules(measured: dict[str, dict[str, dict[int, dict[str, float]]]]) -> dict:
    """``rules`` for every collective and kind of ``measured``."""
    return {call: {kind: rules(by_size) for kind, by_size in kinds.items()}
            for call, kinds in measured.items()}


def regrets(per_file: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """``{algorithm: (worst regret, geometric mean of regrets)}`` over the
    files' ``{algorithm: seconds}`` of one cell (the algorithms every file
    timed); the worst rounded to 1 %, so that ``best`` takes the least
    worst and, among those alike, the least mean."""
    algs = [a for a in per_file[0] if all(a in t for t in per_file)]
    if not algs:
        return {}
    fastest = [min(t[a] for a in algs) for t in per_file]
    out = {}
    for a in algs:
        r = [t[a] / f for t, f in zip(per_file, fastest)]
        out[a] = (round(max(r), 2), math.exp(sum(map(math.log, r)) / len(r)))
    return out


def merge(docs: list[dict], names: list[str], adapt: bool) -> dict:
    """One tuning document from several of one job shape (``--merge``)."""
    first = docs[0]
    for d, name in zip(docs, names):
        for key in ("ranks", "ranks_per_host", "transport"):
            if d.get(key) != first.get(key):
                raise ValueError(f"{name}: {key!r} is {d.get(key)!r}, {names[0]} has "
                                 f"{first.get(key)!r}: only files of one job shape merge")
        if not isinstance(d.get("measured"), dict):
            raise ValueError(f"{name}: no 'measured' times to merge")
    scores: dict = {}
    medians: dict = {}
    for call, kinds in first["measured"].items():
        for kind, by_size in kinds.items():
            for nbytes in by_size:
                cells = [d["measured"].get(call, {}).get(kind, {}).get(nbytes) for d in docs]
                if any(not c for c in cells):
                    continue  # not measured in every file
                score = regrets(cells)
                if not score:
                    continue
                scores.setdefault(call, {}).setdefault(kind, {})[int(nbytes)] = score
                medians.setdefault(call, {}).setdefault(kind, {})[int(nbytes)] = {
                    a: statistics.median(c[a] for c in cells) for a in score}
    doc = document(medians, first["ranks"], first["ranks_per_host"], first["transport"], adapt)
    doc["rules"] = all_rules(scores)
    doc["merged"] = [{"file": n, "created": d.get("created")} for d, n in zip(docs, names)]
    return doc


def merge_main(a: argparse.Namespace) -> int:
    """``--merge``: read, merge, check and write; returns the exit status."""
    docs = []
    try:
        for name in a.merge:
            with open(name) as f:
                docs.append(json.load(f))
        doc = merge(docs, a.merge, a.adapt)
    except (OSError, ValueError) as e:
        print(f"python -m bench tune: error: {e}", file=sys.stderr, flush=True)
        return 1
    return write(doc, a.output, time.perf_counter())


def write(doc: dict, path: str, start: float) -> int:
    """Check ``doc`` with the library and write it to ``path``."""
    wrong = validate(doc)
    if wrong is not None:
        print(f"python -m bench tune: error: the tuning document is not valid: {wrong}",
              file=sys.stderr, flush=True)
        return 1
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    print(f"# wrote {path} in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


# -- the document ----------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def document(measured: dict, ranks: int, ranks_per_host: list[int], transport: str,
             adapt: bool) -> dict:
    """The tuning file's contents (version 1; see the module) for ``measured``
    (``{call: {kind: {nbytes: {algorithm: seconds}}}}``)."""
    import collectives
    return {
        "format": FORMAT,
        "version": VERSION,
        "library": collectives.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "hostname": socket.gethostname()},
        "ranks": ranks,
        "ranks_per_host": ranks_per_host,
        "transport": transport,
        "adapt": adapt,
        "rules": all_rules(measured),
        "measured": {call: {kind: {str(nbytes): dict(times) for nbytes, times
                                   in sorted(by_size.items())}
                            for kind, by_size in kinds.items()}
                     for call, kinds in measured.items()},
    }


def validate(doc: dict) -> Optional[str]:
    """What the library's own check (``collectives.tuning.check``) finds wrong
    with ``doc``, None if nothing (or if the library has no such check)."""
    try:
        from collectives.tuning import check
    except ImportError:
        return None
    try:
        check(doc)
    except ValueError as e:
        return str(e)
    return None


# -- measuring -------------------------------------------------------------------------
def kinds_for(transport: str) -> list[str]:
    """The kinds of array measured on ``transport``."""
    if transport == "cuda":
        return ["device"]
    if transport == "shm":
        return ["plain", "allocated"]
    return ["plain"]


def parse_args(argv: Optional[Sequence[str]], rank: int) -> argparse.Namespace:
    from .cli import _Parser, parse_size
    p = _Parser(prog="python -m bench tune",
                description="time every algorithm of every collective over a grid of sizes "
                            "and write a tuning file (COLLECTIVES_TUNING=FILE or "
                            "cc.init(tuning=FILE)); run under mpiexec")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the tuning file to write (JSON)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated grid of sizes (K/M/G suffixes; default {DEFAULT_SIZES})")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                   help="seconds of timed calls per algorithm and size, all rounds together "
                        f"(default {DEFAULT_BUDGET:g}; at least 3 calls a round)")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT,
                   help=f"interleaved rounds per size (default {DEFAULT_REPEAT}); an "
                        "algorithm's figure is the median of its rounds")
    p.add_argument("--no-adapt", dest="adapt", action="store_false",
                   help="the file turns the library's run-time adaptation off")
    p.add_argument("--transport", default="auto", choices=("auto", "shm", "mpi", "hier", "cuda"),
                   help="transport of the library (default auto)")
    p.add_argument("--merge", nargs="+", metavar="FILE",
                   help="measure nothing: merge tuning files of one job shape, made at "
                        "different times, into one whose rules take each cell's algorithm "
                        "of the least worst regret (run without mpiexec)")
    p.quiet = rank != 0
    a = p.parse_args(argv)
    try:
        a.grid = sorted({parse_size(s) for s in a.sizes.split(",") if s.strip()})
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if not a.grid or a.grid[0] <= 0:
        p.error("--sizes needs one or more positive sizes")
    if a.budget <= 0:
        p.error("budget must be positive")
    if a.repeat < 1:
        p.error("repeat must be at least 1")
    return a


def _settings(a: argparse.Namespace, algs: list[str]):
    from .timing import Settings
    return Settings(sizes=a.grid, dtype=DTYPE, op=OP, root=ROOT, algorithms=list(algs),
                    iters=None, warmup=WARMUP, warmup_given=True, budget_s=a.budget,
                    check=False, repeat=a.repeat)


def measure(name: str, kinds: list[str], comm, mpicomm, a: argparse.Namespace,
            progress) -> dict[str, dict[int, dict[str, float]]]:
    """``{kind: {nbytes: {algorithm: seconds}}}`` of collective ``name``:
    per size, one case whose buffers are timed plain first, then moved into
    communicator-allocated arrays for "allocated"; ``progress(kind, done,
    sizes, seconds)`` after each kind of each size."""
    from .runner import effective_sizes
    from .timing import Clock
    clock = Clock(mpicomm)
    algs = comm.algorithms(name)
    sizes = [s for s in effective_sizes(name, a.grid, comm.size, DTYPE)
             if s > 0 or CASES[name].factor_kind == "none"]
    if CASES[name].factor_kind == "none":  # the barrier: no arrays, chosen as for plain ones
        kinds = ["plain"]
    out: dict[str, dict[int, dict[str, float]]] = {k: {} for k in kinds}
    spent = dict.fromkeys(kinds, 0.0)
    s = _settings(a, algs)
    for i, nbytes in enumerate(sizes):
        case = CASES[name](comm, mpicomm, nbytes, DTYPE, OP, ROOT)
        for kind in kinds:
            t0 = time.perf_counter()
            if kind == "allocated":
                case.in_regions()
            timed = clock.interleaved({alg: case.ours(alg) for alg in algs}, s)
            out[kind][case.choose_nbytes()] = {alg: timed[alg].median for alg in algs}
            spent[kind] += time.perf_counter() - t0
            progress(name, kind, i + 1, len(sizes), spent[kind])
        del case
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Measure and write the tuning file; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--merge" in argv:
        return merge_main(parse_args(argv, 0))  # one process, no MPI
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    a = parse_args(argv, rank)
    # measure the algorithms themselves: no tuning file, no adaptation
    os.environ.pop("COLLECTIVES_TUNING", None)
    os.environ["COLLECTIVES_ADAPT"] = "0"
    if a.transport == "cuda":
        from . import gpu
        gpu.use_device(rank)
    import collectives as cc
    start = time.perf_counter()
    measured: dict = {}
    mpicomm = world.Dup()
    try:
        with cc.init(transport=a.transport) as comm:
            kinds = kinds_for(comm.transport)
            host_of = mpicomm.allgather(comm.host)
            per_host = [host_of.count(h) for h in range(comm.hosts)]
            transport = comm.transport

            def progress(name, kind, done, total, seconds):
                if rank == 0 and done == total:
                    print(f"{name} {kind}: {done}/{total} sizes, {seconds:.1f} s "
                          f"(total {time.perf_counter() - start:.0f} s)", flush=True)

            if rank == 0:
                print(f"# tuning {comm.size} ranks, transport {transport}, kinds "
                      f"{', '.join(kinds)}, sizes {a.sizes}, {a.repeat} round(s), "
                      f"{a.budget:g} s per algorithm and size", flush=True)
            for name in COLLECTIVES:
                measured[name] = measure(name, kinds, comm, mpicomm, a, progress)
    finally:
        mpicomm.Free()
    status = 0
    if rank == 0:
        doc = document(measured, world.Get_size(), per_host, transport, a.adapt)
        status = write(doc, a.output, start)
    return int(world.bcast(status, root=0))
