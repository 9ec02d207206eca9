"""Markdown tables from ``python -m bench ... --json FILE`` results.

    python -m bench.summary FILE.json [FILE.json ...] [--sizes 8,4K,2M,16M]
    python -m bench.summary --across FILE.json [FILE.json ...] [--sizes ...]

One table per file: a row per collective and size with our time and busbw
out of place and in place (``n/a`` for a call without an in-place form,
``-`` in files written before the benchmark timed in place), MPI's (out of
place), the ratio and ``%cpy``.  Times are the medians over the rounds of
``--repeat``; the ratio is the median of the rounds' MPI time / our
out-of-place time (= our busbw / MPI's; > 1: ours faster), and ``%cpy``
the median of the rounds' busbw as a percentage of a local copy's bandwidth
(``-`` in files written before the benchmark measured it; files written
before the rounds hold one measurement of each).

``--across`` reads several files of repeated jobs (the same command run
again, ideally alternated with other jobs) and prints one table per rank
count, transport and allocation: per collective and size the median over
the jobs of each job's ratio, with the lowest and highest and the number of
jobs.  A machine whose speed changes from one job to the next (or whose
baseline runs in a fast or a slow mode a job, as MPICH's copies do here)
moves a single job's ratio; the median over jobs is the figure to quote.
"""
from __future__ import annotations

import argparse
import json
import statistics
from typing import Iterable

from .cli import parse_size


def _rows(results: Iterable[dict], sizes: set[int] | None):
    for res in results:
        for row in res["rows"]:
            if sizes is None or row["bytes"] in sizes or res["collective"] == "barrier":
                yield res, row


def table(results: list[dict], sizes: set[int] | None) -> str:
    first = results[0]
    head = (f"N = {first['n']}, transport {first['transport']}, {first['dtype']}, "
            f"memcpy {first['memcpy_gbps']:.2f} GB/s, {first.get('repeat', 1)} round(s) "
            "a size (medians)\n\n"
            "| collective | bytes | algorithm | time (us) | busbw (GB/s) "
            "| in-place time (us) | in-place busbw (GB/s) | MPI time (us) "
            "| MPI busbw (GB/s) | ratio | %cpy |\n"
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = []
    for res, r in _rows(results, sizes):
        def f(x, spec):
            return "-" if x is None else format(x, spec)
        if r.get("inplace") == "none":
            ip = "n/a | n/a"
        else:
            ip = f"{f(r.get('inplace_time_us'), '.1f')} | {f(r.get('inplace_busbw'), '.3f')}"
        lines.append(f"| {res['collective']} | {r['bytes']} | {r.get('algorithm', '')} | "
                     f"{f(r['time_us'], '.1f')} | {f(r['busbw'], '.3f')} | {ip} | "
                     f"{f(r['mpi_time_us'], '.1f')} | {f(r['mpi_busbw'], '.3f')} | "
                     f"{f(r['ratio'], '.2f')} | {f(r.get('pct_copy'), '.1f')} |")
    return head + "\n".join(lines) + "\n"


def _size(b: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}iB"
    return f"{b} B"


def across(jobs: list[list[dict]], sizes: set[int] | None) -> str:
    """The median over ``jobs`` (each a file's results) of each job's ratio
    per collective and size, one table per (N, transport, alloc)."""
    cells: dict[tuple, dict[tuple, list]] = {}
    for results in jobs:
        for res, r in _rows(results, sizes):
            if r.get("ratio") is None:
                continue
            key = (res["n"], res["transport"], res.get("alloc", "numpy"))
            cell = cells.setdefault(key, {}).setdefault((res["collective"], r["bytes"]), [])
            cell.append((r["ratio"], r.get("algorithm", "")))
    out = []
    for (n, transport, alloc), table_cells in sorted(cells.items()):
        colls = list(dict.fromkeys(c for c, _ in table_cells))
        widths = sorted({b for _, b in table_cells})
        out.append(f"N = {n}, transport {transport}, {alloc} arrays: median of the jobs' "
                   "ratios (lowest-highest, jobs), > 1: ours faster\n")
        out.append("| collective | " + " | ".join(_size(b) for b in widths) + " |")
        out.append("|---|" + "---:|" * len(widths))
        for c in colls:
            row = []
            for b in widths:
                got = table_cells.get((c, b))
                if not got:
                    row.append("")
                    continue
                ratios = sorted(x for x, _ in got)
                algs = sorted({a.split(":")[-1] for _, a in got})
                row.append(f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}, "
                           f"{len(ratios)}) `{'/'.join(algs)}`")
            out.append(f"| {c} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def _load(path: str) -> list[dict]:
    with open(path) as fh:
        data = json.load(fh)
    return data if isinstance(data, list) else [data]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.summary")
    p.add_argument("files", nargs="+")
    p.add_argument("--sizes", help="comma-separated sizes to keep (K/M/G suffixes)")
    p.add_argument("--across", action="store_true",
                   help="one table of ratios: the median over the files (repeated jobs)")
    a = p.parse_args(argv)
    sizes = {parse_size(s) for s in a.sizes.split(",")} if a.sizes else None
    if a.across:
        print(across([_load(path) for path in a.files], sizes))
        return
    for path in a.files:
        print(table(_load(path), sizes))


if __name__ == "__main__":
    main()
