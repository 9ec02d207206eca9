"""python -m trainer scaling: samples/s and speed-up T1/TN at N = 1, 2, 4, and
DDP's step time with the gradient all-reduce overlapped with backward or not.

It launches ``mpiexec -n N python -m trainer ... --json`` for each run (the
mpiexec beside this Python, else the one on PATH) and reads the reports.
Speed-up is measured at a fixed global batch (strong scaling), so
T1/TN = samples/s at N over samples/s at 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# A compute-bound run: a large batch on the default 4.7M-parameter model
# (at N = 2 backward takes about 0.7 s, the all-reduce and Adam 0.1 s).
SCALING = ["--batch", "4096", "--steps", "4"]
# Communication and computation of similar size: the default model on a
# small batch, 1 MB buckets (at N = 2, forward and backward about 60 ms, the
# bucketed all-reduce about 25 ms, Adam about 45 ms).
OVERLAP = ["--batch", "128", "--bucket-mb", "1", "--steps", "12"]


def mpiexec() -> str:
    here = Path(sys.executable).with_name("mpiexec")
    return str(here) if here.exists() else (shutil.which("mpiexec") or "mpiexec")


def launch(n: int, args: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "trainer", *args,
               "--quiet", "--json", out]
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def step_time(rep: dict) -> float:
    times = sorted(s["time_s"] for s in rep["steps"][1:])
    return times[len(times) // 2]


def main(argv) -> int:
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) > 1:
        print("python -m trainer scaling launches mpiexec itself; run it without mpiexec",
              file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog="python -m trainer scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", default="ddp", choices=["ps", "ddp", "zero1", "zero2", "zero3"])
    p.add_argument("--ranks", default="1,2,4", help="comma-separated world sizes")
    p.add_argument("--args", default=" ".join(SCALING),
                   help="trainer options of the scaling runs (default: %(default)s)")
    p.add_argument("--overlap-args", default=" ".join(OVERLAP),
                   help="trainer options of the overlap runs (default: %(default)s)")
    p.add_argument("--overlap-ranks", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per point; the best is kept (the machine is shared)")
    p.add_argument("--no-overlap-check", action="store_true")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    ranks = [int(x) for x in a.ranks.split(",")]
    base = ["--strategy", a.strategy, *a.args.split()]
    rows = []
    for n in ranks:
        reps = [launch(n, base, a.timeout) for _ in range(a.repeat)]
        best = max(reps, key=lambda r: r["samples_per_s"])
        rows.append({"ranks": n, "samples_per_s": best["samples_per_s"],
                     "step_s": step_time(best), "params": best["params"], "batch": best["batch"]})
    s1 = next((r["samples_per_s"] for r in rows if r["ranks"] == 1), rows[0]["samples_per_s"])
    n1 = next((r["ranks"] for r in rows if r["ranks"] == 1), rows[0]["ranks"])
    print(f"# scaling: {a.strategy}, {' '.join(base[2:])}  (Ψ={rows[0]['params']:,}; "
          f"speed-up relative to N={n1})")
    print(f"{'N':>3} {'samples/s':>11} {'step ms':>9} {'speed-up':>9} {'efficiency':>11}")
    for r in rows:
        r["speedup"] = r["samples_per_s"] / s1
        r["efficiency"] = r["speedup"] * n1 / r["ranks"]
        print(f"{r['ranks']:>3} {r['samples_per_s']:11.1f} {r['step_s'] * 1e3:9.1f} "
              f"{r['speedup']:9.2f} {r['efficiency']:11.2f}")
    result = {"strategy": a.strategy, "args": base, "rows": rows}
    if not a.no_overlap_check:
        ov = ["--strategy", "ddp", *a.overlap_args.split()]
        t = {}
        for mode, extra in (("on", []), ("off", ["--no-overlap"])):
            reps = [launch(a.overlap_ranks, ov + extra, a.timeout) for _ in range(a.repeat)]
            t[mode] = min(step_time(r) for r in reps)
        ratio = t["on"] / t["off"]
        print(f"# DDP overlap at N={a.overlap_ranks}: {' '.join(ov[2:])}")
        print(f"{'overlap':>8} {'step ms':>9}")
        print(f"{'on':>8} {t['on'] * 1e3:9.1f}\n{'off':>8} {t['off'] * 1e3:9.1f}")
        print(f"on/off = {ratio:.3f}")
        result["overlap"] = {"ranks": a.overlap_ranks, "args": ov, "on_step_s": t["on"],
                             "off_step_s": t["off"], "ratio": ratio}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0
