"""all_to_all's ``one_copy_or_staged`` at N = 2 reads with process_vm_readv exactly where
huge pages back every rank's source, and takes the staged path elsewhere:

    mpiexec -n 2 python tests/huge_check.py OUT.json

Each rank maps its own 4 MiB ``x`` (anonymous, private, on a 2 MiB boundary)
and asks for huge pages on it (``madvise``) or forbids them, per case:
both ranks huge, neither, one only.  The staged algorithm (``direct``) is
wrapped to record that it ran; every result is checked against numpy.  Rank
0 writes ``{"cases": {case: {"staged": bool, "shares": [...]}}, "failures":
[...]}``.
"""
from __future__ import annotations

import dataclasses
import json
import mmap
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
import collectives.all_to_all as a2a  # noqa: E402
from transports.shm import _thp  # noqa: E402

S = 4 << 20
HUGE = 2 << 20
_maps: list = []


def mapped(huge: bool) -> np.ndarray:
    """S bytes of anonymous private memory from a 2 MiB boundary, with huge
    pages asked for (``huge``) or forbidden, then written (faulted in)."""
    m = mmap.mmap(-1, S + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    _maps.append(m)
    a = np.frombuffer(m, np.uint8)
    start = (-a.ctypes.data) % HUGE
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE, start, S)
    v = a[start:start + S].view(np.float32)
    v[:] = 0
    return v


def main(path: str) -> None:
    staged = []
    direct = a2a.FAMILY["direct"].run

    def recording(ep, x, out):
        staged.append(True)
        direct(ep, x, out)
    a2a.FAMILY = dataclasses.replace(a2a.FAMILY, algorithms=tuple(
        dataclasses.replace(a, run=recording) if a.name == "direct" else a
        for a in a2a.FAMILY.algorithms))
    cases, failures = {}, []
    with cc.init(transport="shm") as comm:
        n, r = comm.size, comm.rank
        m = S // 4 // n
        for case, mine in (("both", True), ("neither", False), ("one", r == 0)):
            x = mapped(mine).reshape(n, m)
            x[...] = np.arange(n * m, dtype=np.float32).reshape(n, m) + 1000 * r
            want = np.stack([np.arange(r * m, (r + 1) * m, dtype=np.float32) + 1000 * p
                             for p in range(n)])
            out = np.zeros_like(x)
            staged.clear()
            got = comm.all_to_all(x, out=out, algorithm="one_copy_or_staged")
            if not np.array_equal(got, want):
                failures.append(f"rank {r} {case}: wrong result")
            shares = comm.all_gather(np.array([_thp.huge_share(x)]))[:, 0].tolist()
            said = [bool(v) for v in comm.all_gather(np.array([len(staged)]))[:, 0]]
            if len(set(said)) != 1:
                failures.append(f"{case}: the ranks took different paths: {said}")
            cases[case] = {"staged": bool(said[0]), "shares": shares}
        if r == 0:
            with open(path, "w") as f:
                json.dump({"cases": cases, "failures": failures}, f)
        elif failures:
            print("\n".join(failures))


if __name__ == "__main__":
    main(sys.argv[1])
