"""The one-copy algorithms are offered and chosen only where they can run:

    mpiexec -n N python tests/one_copy_check.py MODE OUT.json

MODE ``on``: process_vm_readv works (the default); ``off``: the same with
COLLECTIVES_ONE_COPY=0 in the environment; ``refused``: every
process_vm_readv fails with EPERM (as under a ptrace restriction or between
users), so the probe at ``init`` fails.  Every rank checks that ``one_copy``
is offered exactly in mode ``on``, that the choosers pick only offered
algorithms at every size from 1 B to 1 GiB (and one_copy somewhere in mode
``on``), and runs each call with the default algorithm at a size past the
largest one-copy threshold, checking its result.  Rank 0 writes
``{"failures": [...], "picked": {call: [algorithms chosen]}}``.
"""
from __future__ import annotations

import errno
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from transports.shm import _cma  # noqa: E402

ONE_COPY = ("all_gather", "broadcast", "all_to_all", "gather", "scatter", "all_reduce",
            "reduce_scatter", "reduce")
LARGE = 64 << 20  # bytes of a call's input: past every one-copy threshold


def refuse(pid: int, addr: int, dest: np.ndarray) -> None:
    raise OSError(errno.EPERM, "process_vm_readv: Operation not permitted")


def run_calls(comm) -> list[str]:
    """Each call once at LARGE bytes (a block of LARGE / N for all_gather,
    gather and scatter), the library's choice of algorithm."""
    n, r = comm.size, comm.rank
    m = LARGE // 4 // n  # float32 elements of a block
    base = np.arange(n * m, dtype=np.float32) % 1024
    x = base + r
    total = sum(base + p for p in range(n))
    blocks = x.reshape(n, m)
    last = n - 1  # every root below is the last rank, or 0
    got = {
        "all_gather": (comm.all_gather(blocks[0])[last], blocks[0] - r + last),
        "broadcast": (comm.broadcast(x.copy(), root=last), base + last),
        "all_to_all": (comm.all_to_all(blocks)[last], base.reshape(n, m)[r] + last),
        "gather": (comm.gather(blocks[0], root=0), None),
        "scatter": (comm.scatter(blocks if r == 0 else None, np.empty(m, np.float32), root=0),
                    base.reshape(n, m)[r]),
        "all_reduce": (comm.all_reduce(x), total),
        "reduce_scatter": (comm.reduce_scatter(blocks), total.reshape(n, m)[r]),
        "reduce": (comm.reduce(x, root=0), total if r == 0 else None),
    }
    if r == 0:
        got["gather"] = (got["gather"][0][last], blocks[0] + last)
    fails = []
    for call, (have, want) in got.items():
        if not (have is None if want is None else np.array_equal(have, want)):
            fails.append(f"{call} of {LARGE} B (the default algorithm): wrong result")
    return fails


def main(mode: str, out: str) -> None:
    if mode == "refused":
        _cma.read = refuse
    fails, picked = [], {}
    with cc.init(transport="shm") as comm:
        for call in ONE_COPY:
            offered = comm.algorithms(call)
            if ("one_copy" in offered) != (mode == "on"):
                fails.append(f"{call}: one_copy {'not ' if mode == 'on' else ''}offered "
                             f"in mode {mode}: {offered}")
            chosen = [comm.choose_algorithm(call, 1 << k) for k in range(31)]
            picked[call] = sorted(set(chosen))
            stray = set(chosen) - set(offered)
            if stray:
                fails.append(f"{call}: the chooser picks {sorted(stray)}, not offered here")
        if mode == "on" and comm.size > 1 and not any("one_copy" in p for p in picked.values()):
            fails.append("no chooser picks one_copy at any size")
        fails += run_calls(comm)
        if comm.rank == 0:
            with open(out, "w") as f:
                json.dump({"failures": fails, "picked": picked}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
