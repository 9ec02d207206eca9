"""Markdown tables from ``python -m bench ... --json FILE`` results.

    python -m bench.summary FILE.json [FILE.json ...] [--sizes 8,4K,2M,16M]

One table per file: a row per collective and size with our time and busbw
out of place and in place (``n/a`` for a call without an in-place form,
``-`` in files written before the benchmark timed in place), MPI's (out of
place), the ratio and ``%cpy``.  Times are the medians over the rounds of
``--repeat``; the ratio is the median of the rounds' MPI time / our
out-of-place time (= our busbw / MPI's; > 1: ours faster), and ``%cpy``
the median of the rounds' busbw as a percentage of a local copy's bandwidth
(``-`` in files written before the benchmark measured it; files written
before the rounds hold one measurement of each).
"""
from __future__ import annotations

import argparse
import json
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.summary")
    p.add_argument("files", nargs="+")
    p.add_argument("--sizes", help="comma-separated sizes to keep (K/M/G suffixes)")
    a = p.parse_args(argv)
    sizes = {parse_size(s) for s in a.sizes.split(",")} if a.sizes else None
    for path in a.files:
        with open(path) as fh:
            data = json.load(fh)
        print(table(data if isinstance(data, list) else [data], sizes))


if __name__ == "__main__":
    main()
