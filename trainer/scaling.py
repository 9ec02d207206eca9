"""python -m trainer scaling: samples/s and speed-up T1/TN at N = 1, 2, 4, and
DDP's step time with the gradient all-reduce overlapped with backward or not.

It launches ``mpiexec -n N python -m trainer ... --json`` for each run
(collectives.launcher: $MPIEXEC, the mpiexec beside this Python, else the
one on PATH; MPICH's or Open MPI's) and reads the reports.
Speed-up is measured at a fixed global batch (strong scaling), so
T1/TN = samples/s at N over samples/s at 1.  The machine may be shared and
noisy: every point is run ``--repeat`` times, the runs of all points
interleaved (A, B, A, B, ...) so that a slow spell hits every point alike,
and each figure is the median of its point's runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from collectives.launcher import default

# A compute-bound run: a large batch on the default 4.7M-parameter model
# (at N = 2 backward takes about 0.7 s, the all-reduce and Adam 0.1 s).
SCALING = ["--batch", "4096", "--steps", "4"]
# Communication and computation of similar size: the default model on a
# small batch, 1 MB buckets (at N = 2, forward and backward about 60 ms, the
# bucketed all-reduce about 25 ms, Adam about 45 ms).
OVERLAP = ["--batch", "128", "--bucket-mb", "1", "--steps", "12"]
STRATEGIES = ("ps", "ddp", "zero1", "zero2", "zero3")


def launch(n: int, args: list[str], timeout: float, env: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = default()(n, [sys.executable, "-m", "trainer", *args, "--quiet", "--json", out])
        root = str(Path(__file__).resolve().parent.parent)
        full = dict(os.environ, **(env or {}))
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [root, full.get("PYTHONPATH")]))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def step_time(rep: dict) -> float:
    times = sorted(s["time_s"] for s in rep["steps"][1:])
    return times[len(times) // 2]


def interleaved(points: dict, repeat: int, timeout: float) -> dict:
    """``points``: key -> (N, trainer args, environment). Runs every point
    ``repeat`` times, one round over all points after another; returns key ->
    its reports."""
    reps: dict = {k: [] for k in points}
    for _ in range(repeat):
        for k, (n, args, env) in points.items():
            reps[k].append(launch(n, args, timeout, env))
    return reps


def median_of(reps: list[dict], what) -> float:
    return statistics.median(what(r) for r in reps)


def _list(text: str, allowed, what: str) -> list[str]:
    items = [x for x in text.split(",") if x]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SystemExit(f"python -m trainer scaling: {what} must be a comma-separated list "
                         f"of {list(allowed)}, got {text!r}")
    return items


def scaling_table(a, strategies: list[str], dtypes: list[str], ranks: list[int]) -> list[dict]:
    points = {(s, d, n): (n, ["--strategy", s, "--dtype", d, *a.args.split()], None)
              for s in strategies for d in dtypes for n in ranks}
    reps = interleaved(points, a.repeat, a.timeout)
    rows = []
    print(f"# scaling: {a.args}  (median of {a.repeat} interleaved runs; speed-up relative "
          f"to the smallest N)")
    print(f"{'strategy':>8} {'dtype':>5} {'N':>3} {'samples/s':>11} {'step ms':>9} "
          f"{'speed-up':>9} {'efficiency':>11}")
    for s in strategies:
        for d in dtypes:
            base = None
            for n in ranks:
                rs = reps[s, d, n]
                row = {"strategy": s, "dtype": d, "ranks": n,
                       "samples_per_s": median_of(rs, lambda r: r["samples_per_s"]),
                       "step_s": median_of(rs, step_time), "params": rs[0]["params"],
                       "batch": rs[0]["batch"],
                       "runs_samples_per_s": [r["samples_per_s"] for r in rs]}
                base = base or (row["samples_per_s"], n)
                row["speedup"] = row["samples_per_s"] / base[0]
                row["efficiency"] = row["speedup"] * base[1] / n
                rows.append(row)
                print(f"{s:>8} {d:>5} {n:>3} {row['samples_per_s']:11.1f} "
                      f"{row['step_s'] * 1e3:9.1f} {row['speedup']:9.2f} "
                      f"{row['efficiency']:11.2f}")
    return rows


def overlap_table(a, dtypes: list[str]) -> dict:
    n = a.overlap_ranks
    points = {(d, mode): (n, ["--strategy", "ddp", "--dtype", d, *a.overlap_args.split(),
                              *extra], None)
              for d in dtypes for mode, extra in (("on", []), ("off", ["--no-overlap"]))}
    reps = interleaved(points, a.repeat, a.timeout)
    out = {}
    print(f"# DDP overlap at N={n}: {a.overlap_args}")
    print(f"{'dtype':>5} {'on ms':>8} {'off ms':>8} {'on/off':>7}")
    for d in dtypes:
        on, off = (median_of(reps[d, m], step_time) for m in ("on", "off"))
        out[d] = {"on_step_s": on, "off_step_s": off, "ratio": on / off}
        print(f"{d:>5} {on * 1e3:8.1f} {off * 1e3:8.1f} {on / off:7.3f}")
    return {"ranks": n, "args": a.overlap_args.split(), "by_dtype": out}


def kernels_table(a) -> dict:
    """DDP fp16 on the overlap runs' options (communication as large as
    computation) at N = overlap-ranks, with the compiled reduction kernels and
    with numpy's loops (COLLECTIVES_KERNELS=0)."""
    n = a.overlap_ranks
    args = ["--strategy", "ddp", "--dtype", "fp16", *a.overlap_args.split()]
    points = {mode: (n, args, {"COLLECTIVES_KERNELS": flag})
              for mode, flag in (("on", "1"), ("off", "0"))}
    reps = interleaved(points, a.repeat, a.timeout)
    on, off = (median_of(reps[m], lambda r: r["samples_per_s"]) for m in ("on", "off"))
    print(f"# DDP fp16 at N={n}, {a.overlap_args}: reduction kernels on / off "
          "(COLLECTIVES_KERNELS=0)")
    print(f"{'kernels':>8} {'samples/s':>11}\n{'on':>8} {on:11.1f}\n{'off':>8} {off:11.1f}")
    print(f"on/off = {on / off:.3f}")
    return {"ranks": n, "args": args, "on_samples_per_s": on, "off_samples_per_s": off,
            "runs": {m: [r["samples_per_s"] for r in reps[m]] for m in reps}}


def main(argv) -> int:
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) > 1:
        print("python -m trainer scaling launches mpiexec itself; run it without mpiexec",
              file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog="python -m trainer scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", default="ddp",
                   help=f"comma-separated strategies of {list(STRATEGIES)} (default %(default)s)")
    p.add_argument("--dtype", default="fp16",
                   help="comma-separated half types, fp16 and/or bf16 (default %(default)s)")
    p.add_argument("--ranks", default="1,2,4",
                   help="comma-separated world sizes (default %(default)s)")
    p.add_argument("--args", default=" ".join(SCALING),
                   help="trainer options of the scaling runs (default: %(default)s)")
    p.add_argument("--overlap-args", default=" ".join(OVERLAP),
                   help="trainer options of the overlap runs (default: %(default)s)")
    p.add_argument("--overlap-ranks", type=int, default=2,
                   help="world size of the overlap runs (default %(default)s)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per point, interleaved, of which the median is kept (the "
                        "machine may be shared; default %(default)s)")
    p.add_argument("--no-overlap-check", action="store_true",
                   help="leave out the overlap runs (default: run them)")
    p.add_argument("--kernels-check", action="store_true",
                   help="also DDP fp16 on the overlap runs with the reduction kernels on and "
                        "off (default: off)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds each run may take (default %(default)g)")
    p.add_argument("--json", metavar="FILE",
                   help="also write the results as JSON (default: none)")
    a = p.parse_args(argv)
    strategies = _list(a.strategy, STRATEGIES, "--strategy")
    dtypes = _list(a.dtype, ("fp16", "bf16"), "--dtype")
    ranks = [int(x) for x in a.ranks.split(",")]
    result = {"args": a.args.split(), "repeat": a.repeat,
              "rows": scaling_table(a, strategies, dtypes, ranks)}
    if not a.no_overlap_check:
        result["overlap"] = overlap_table(a, dtypes)
    if a.kernels_check:
        result["kernels"] = kernels_table(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0
