"""Soak test: many random collectives on one communicator, every result checked.

    mpiexec -n 4 python tests/soak.py [--calls 10000] [--seed S] [--transport shm]
                                      [--warmup 1000] [--json FILE]

Every rank draws the same sequence of calls from the shared seed: the call
(broadcast, scatter, gather, reduce, all_gather, reduce_scatter, all_to_all,
all_reduce, barrier, or an isend/recv round a random shift of the ranks), an
algorithm from ``comm.algorithms(call)`` or None, a dtype of ``cc.DTYPES``, an
op the dtype allows (``bench.data.ops_for``), a root, the out mode (a new array,
``out=`` a separate array, or in place where the call allows it) and whether
the call is asynchronous.  Every 200 calls the ranks also split into a random
sub-communicator, all-reduce on it and close it, which creates and unlinks a
segment and opens and closes MPI communicators.

Sizes: the input ``x`` of each call has 0 bytes (one call in 50) or a size
drawn log-uniformly between 1 byte and ``--max-bytes`` (4 MiB), so that every
decade from bytes to megabytes is exercised equally often while the run stays
a few minutes on two cores (uniform sizes would average 2 MiB a call and spend
the run on memcpy).  Inputs, references and the tolerance are those of the
conformance suite and the benchmark (``bench.data``); a separate ``out`` is
poisoned (``bench.data.poison``) so that an element the call leaves
unwritten is wrong.

Every rank samples, after a barrier, every 500 calls: its open file
descriptors, its resident memory (VmRSS, and its anonymous and shared parts,
after gc.collect() and glibc's malloc_trim(0): without them VmRSS swings by
tens of MiB with what the allocator keeps) and the files in /dev/shm (all of
them, and ours, ``collectives-*``).  At the end rank 0 prints a summary and
every rank exits non-zero if a result was wrong, a call raised, or, between
the end of the warm-up and the end of the run, on any rank: the descriptors
grew, our files in /dev/shm grew, or VmRSS grew by more than ``RSS_BOUND``.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from bench.data import DTYPES, expect, make, ops_for, poison, reduced, stacked  # noqa: E402
from launch import shm_files  # noqa: E402

CALLS = ("broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter",
         "all_to_all", "all_reduce", "barrier", "p2p")
MODES = ("new", "out", "inplace")
SAMPLE_EVERY = 500
SPLIT_EVERY = 200
# Samples are taken after gc.collect() and malloc_trim(0), so VmRSS follows
# live memory, not the freed heap glibc keeps.  After the warm-up it may still
# grow by pages of the segment first touched late (at most the segment, 32 MiB
# at N = 4 with the default slots, of which the warm-up touches over half) and
# by code and caches loaded on first use (a few MiB).  A leak of 4 KiB a call
# (35 MiB over the 9,000 calls after the warm-up) exceeds the bound.
RSS_BOUND = 32 << 20


try:
    _TRIM = ctypes.CDLL(None).malloc_trim  # glibc
except AttributeError:
    _TRIM = None


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def memory() -> list[int]:
    """VmRSS and its anonymous and shared-memory parts (bytes), from /proc/self/status."""
    want = {"VmRSS:": 0, "RssAnon:": 1, "RssShmem:": 2}
    out = [0, 0, 0]
    with open("/proc/self/status") as f:
        for line in f:
            k = line.split(maxsplit=1)[0] if line.strip() else ""
            if k in want:
                out[want[k]] = int(line.split()[1]) * 1024
    return out


def dev_shm() -> int:
    try:
        return len(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return 0


FIELDS = ("fds", "rss", "rss_anon", "rss_shmem", "dev_shm", "ours")


def sample() -> list[int]:
    """One sample of FIELDS, once the garbage is collected and glibc has given
    the free memory at the top of its heaps back (so that VmRSS follows what
    is alive, not what the allocator keeps for later)."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    return [fds(), *memory(), dev_shm(), len(shm_files())]


def draw_bytes(rng: np.random.Generator, max_bytes: int) -> int:
    if rng.random() < 0.02:
        return 0
    return min(max_bytes, int(math.exp(rng.uniform(0.0, math.log(max_bytes + 1)))))


class Soak:
    def __init__(self, comm, rng: np.random.Generator, max_bytes: int):
        self.comm, self.rng, self.max_bytes = comm, rng, max_bytes
        self.n, self.r = comm.size, comm.rank
        self.failures: list[str] = []
        self.last = ""

    def one(self, i: int) -> str:
        """Draw and run call ``i``; returns its name."""
        rng, n, r, comm = self.rng, self.n, self.r, self.comm
        call = CALLS[rng.integers(len(CALLS))]
        dt = DTYPES[rng.integers(len(DTYPES))]
        ops = ops_for(dt)
        op = ops[rng.integers(len(ops))]
        root = int(rng.integers(n))
        mode = MODES[rng.integers(3)]
        async_op = bool(rng.random() < 0.1)
        count = draw_bytes(rng, self.max_bytes) // dt.itemsize
        alg = None
        if call != "p2p":
            algs = comm.algorithms(call)
            k = int(rng.integers(len(algs) + 1))
            alg = algs[k] if k < len(algs) else None
        shift = int(rng.integers(1, n)) if n > 1 else 0
        tag = int(rng.integers(32768))
        blocked = call in ("scatter", "reduce_scatter", "all_to_all")
        shape = (n, count // n) if blocked else (count,)
        self.last = call
        try:
            getattr(self, call)(i, dt, op, shape, root, mode, alg, async_op, shift, tag)
        except AssertionError as e:
            raise AssertionError(f"{call} alg={alg} dtype={dt} op={op} shape={shape} "
                                 f"root={root} mode={mode} async={async_op}: {e}") from None
        return call

    def finish(self, got, async_op):
        return got.wait() if async_op else got

    # -- the calls: each checks its own result ---------------------------------
    def broadcast(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        want = make(dt, shape, root, i)
        buf = want.copy() if self.r == root else poison(want)
        got = self.finish(self.comm.broadcast(buf, root, algorithm=alg, async_op=async_op),
                          async_op)
        assert got is buf, "broadcast did not return buf"
        expect(got, want)

    def scatter(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        full = make(dt, shape, root, i)
        x = full.copy() if self.r == root else None
        o = poison(full[self.r])
        got = self.finish(self.comm.scatter(x, o, root, algorithm=alg, async_op=async_op),
                          async_op)
        assert got is o, "scatter did not return out"
        if x is not None:
            expect(x, full, "x")
        expect(got, full[self.r])

    def gather(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i)
        want = stacked(self.n, dt, shape, i)
        o = poison(want) if mode != "new" and self.r == root else None
        got = self.finish(self.comm.gather(x, o, root, algorithm=alg, async_op=async_op),
                          async_op)
        expect(x, make(dt, shape, self.r, i), "x")
        if self.r != root:
            assert got is None, "non-root got a result"
            return
        assert o is None or got is o, "out= was not returned"
        expect(got, want)

    def reduce(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i, op)
        x0, want = x.copy(), reduced(self.n, dt, shape, op, i)
        o = None
        if self.r == root:
            o = x if mode == "inplace" else poison(want) if mode == "out" else None
        got = self.finish(self.comm.reduce(x, o, op, root, algorithm=alg, async_op=async_op),
                          async_op)
        if self.r != root:
            assert got is None, "non-root got a result"
        else:
            assert o is None or got is o, "out= was not returned"
            expect(got, want)
        if o is not x:
            expect(x, x0, "x")

    def all_reduce(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i, op)
        x0, want = x.copy(), reduced(self.n, dt, shape, op, i)
        o = x if mode == "inplace" else poison(want) if mode == "out" else None
        got = self.finish(self.comm.all_reduce(x, o, op, algorithm=alg, async_op=async_op),
                          async_op)
        assert o is None or got is o, "out= was not returned"
        expect(got, want)
        if o is not x:
            expect(x, x0, "x")

    def all_gather(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i)
        want = stacked(self.n, dt, shape, i)
        o = None if mode == "new" else poison(want)
        if mode == "inplace":  # x is this rank's block of out
            o[self.r] = x
            x = o[self.r]
        got = self.finish(self.comm.all_gather(x, o, algorithm=alg, async_op=async_op),
                          async_op)
        assert o is None or got is o, "out= was not returned"
        if mode != "inplace":
            expect(x, make(dt, shape, self.r, i), "x")
        expect(got, want)

    def reduce_scatter(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i, op)
        x0, want = x.copy(), reduced(self.n, dt, shape, op, i)[self.r]
        o = x[self.r] if mode == "inplace" else poison(want) if mode == "out" else None
        got = self.finish(self.comm.reduce_scatter(x, o, op, algorithm=alg, async_op=async_op),
                          async_op)
        assert o is None or got is o, "out= was not returned"
        expect(got, want)
        if mode == "inplace":
            x0[self.r] = x[self.r]
        expect(x, x0, "x")

    def all_to_all(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        x = make(dt, shape, self.r, i)
        want = stacked(self.n, dt, shape, i)[:, self.r]
        o = x if mode == "inplace" else poison(want) if mode == "out" else None
        got = self.finish(self.comm.all_to_all(x, o, algorithm=alg, async_op=async_op),
                          async_op)
        assert o is None or got is o, "out= was not returned"
        expect(got, want)
        if o is not x:
            expect(x, make(dt, shape, self.r, i), "x")

    def barrier(self, i, dt, op, shape, root, mode, alg, async_op, *_):
        got = self.finish(self.comm.barrier(algorithm=alg, async_op=async_op), async_op)
        assert got is None, "barrier returned a value"

    def p2p(self, i, dt, op, shape, root, mode, alg, async_op, shift, tag):
        if self.n == 1:
            return
        dst, src = (self.r + shift) % self.n, (self.r - shift) % self.n
        x, want = make(dt, shape, self.r, i), make(dt, shape, src, i)
        h = self.comm.isend(x, dst, tag)
        got = self.comm.recv(poison(want), src, tag)
        h.wait()
        expect(got, want)

    def split(self, i: int) -> None:
        """A random sub-communicator (some ranks out of it), used once and closed."""
        colors = self.rng.integers(-1, 2, size=self.n)
        sub = self.comm.split(int(colors[self.r]), key=int(self.rng.integers(100)))
        if sub is None:
            return
        try:
            members = [p for p in range(self.n) if colors[p] == colors[self.r]]
            got = sub.all_reduce(np.array([self.r, 1], np.int64))
            expect(got, np.array([sum(members), len(members)], np.int64), "split all_reduce")
        finally:
            sub.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--transport", default="shm")
    ap.add_argument("--warmup", type=int, default=1000,
                    help="calls before the reference sample of fds, RSS and /dev/shm")
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", help="rank 0 writes the summary here")
    a = ap.parse_args(argv)

    start = sample()
    comm = cc.init(transport=a.transport, timeout=a.timeout)
    n, r = comm.size, comm.rank
    soak = Soak(comm, np.random.default_rng(a.seed), a.max_bytes)
    samples = {0: start}  # calls done -> sample, at the same calls on every rank
    per_call: dict[str, int] = {}
    t0 = time.perf_counter()
    for i in range(a.calls):
        if i and i % SPLIT_EVERY == 0:
            soak.split(i)
        try:
            soak.one(i)
        except AssertionError as e:
            soak.failures.append(f"rank {r} call #{i} {str(e).strip()[:500]}")
        except cc.CollectiveError as e:  # the communicator is unusable: stop the job
            print(f"soak: rank {r} call #{i} raised {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            from mpi4py import MPI
            MPI.COMM_WORLD.Abort(2)
        per_call[soak.last] = per_call.get(soak.last, 0) + 1
        done = i + 1
        if done % SAMPLE_EVERY == 0 or done in (a.warmup, a.calls):
            comm.barrier()  # no rank is inside a split: /dev/shm is ours to count
            samples[done] = sample()
    wall = time.perf_counter() - t0
    points = sorted(samples)
    warm = max((p for p in points if p <= a.warmup), default=0)
    mine = np.array([len(soak.failures), comm.traffic.sent_bytes]
                    + [v for p in points for v in samples[p]], np.int64)
    every = comm.all_gather(mine)  # (ranks, 2 + samples x fields)
    series = every[:, 2:].reshape(n, len(points), len(FIELDS))
    ranks = []
    for p in range(n):
        row = {"failures": int(every[p, 0]), "sent_bytes": int(every[p, 1])}
        for j, k in enumerate(FIELDS):
            col = series[p, :, j]
            row.update({f"{k}_start": int(col[0]), f"{k}_warm": int(col[points.index(warm)]),
                        f"{k}_end": int(col[-1]), f"{k}_max": int(col.max())})
        ranks.append(row)
    problems = []
    for p, s in enumerate(ranks):
        if s["fds_end"] > s["fds_warm"]:
            problems.append(f"rank {p}: open descriptors grew from {s['fds_warm']} to {s['fds_end']}")
        if s["ours_end"] > s["ours_warm"]:
            problems.append(f"rank {p}: collectives-* files in /dev/shm grew from "
                            f"{s['ours_warm']} to {s['ours_end']}")
        if s["rss_end"] - s["rss_warm"] > RSS_BOUND:
            problems.append(f"rank {p}: VmRSS grew by {(s['rss_end'] - s['rss_warm']) >> 20} MiB "
                            f"after the warm-up (bound {RSS_BOUND >> 20} MiB)")
    failures = sum(s["failures"] for s in ranks)
    if failures:
        problems.append(f"{failures} wrong results")
    for f in soak.failures[:10]:
        print(f"soak: {f}", file=sys.stderr, flush=True)
    summary = {"ranks": n, "transport": a.transport, "calls": a.calls, "seed": a.seed,
               "warmup": warm, "wall_s": round(wall, 1), "failures": failures,
               "bytes_sent": sum(s["sent_bytes"] for s in ranks), "calls_by_kind": per_call,
               "rss_bound": RSS_BOUND, "per_rank": ranks, "problems": problems,
               "series": {"calls": points, "fields": FIELDS, "ranks": series.tolist()}}
    if r == 0:
        print(report(summary), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)
    comm.close()
    return 1 if problems else 0


def report(s: dict) -> str:
    mib = 1 << 20
    lines = [f"soak: {s['calls']} calls on {s['ranks']} ranks ({s['transport']}, seed {s['seed']}) "
             f"in {s['wall_s']} s, {s['failures']} failures, "
             f"{s['bytes_sent'] / 1e9:.2f} GB sent (sum over ranks)",
             "  calls: " + ", ".join(f"{k} {v}" for k, v in sorted(s["calls_by_kind"].items())),
             f"  per rank: start / after {s['warmup']} calls / end / max"]
    for p, r in enumerate(s["per_rank"]):
        lines.append(
            f"  rank {p}: fds {r['fds_start']}/{r['fds_warm']}/{r['fds_end']}/{r['fds_max']}"
            f"  VmRSS MiB {r['rss_start'] / mib:.0f}/{r['rss_warm'] / mib:.0f}/"
            f"{r['rss_end'] / mib:.0f}/{r['rss_max'] / mib:.0f}"
            f" (anon {r['rss_anon_warm'] / mib:.0f}->{r['rss_anon_end'] / mib:.0f},"
            f" shmem {r['rss_shmem_warm'] / mib:.0f}->{r['rss_shmem_end'] / mib:.0f})"
            f"  /dev/shm files {r['dev_shm_start']}/{r['dev_shm_warm']}/{r['dev_shm_end']}/"
            f"{r['dev_shm_max']} (collectives-*: {r['ours_start']}/{r['ours_warm']}/"
            f"{r['ours_end']}/{r['ours_max']})")
    lines.append("soak: " + ("; ".join(s["problems"]) if s["problems"] else "OK"))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
