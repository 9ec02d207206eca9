"""Mismatch detection under mpiexec: ``python tests/debug_check.py TRANSPORT``.

Each case makes the last rank call something different from the others;
with debug on, every rank must raise CollectiveMismatch naming that rank and
the fields that differ, before any payload moves.  Nothing having moved, the
communicator stays usable: after each mismatch a matching all_reduce on the
same communicator must give the right result on every rank.  Prints one line
per case and rank; exit status 1 on a failure.
"""
from __future__ import annotations

import sys

import numpy as np

import collectives as cc

X = np.arange(10, dtype=np.float64)


def cases(n):
    """(name, call for the others, call for the odd rank, fields that differ)."""
    odd = n - 1
    yield "count", lambda c: c.all_reduce(X), lambda c: c.all_reduce(X[:7]), ["count"]
    yield "dtype", lambda c: c.all_reduce(X), lambda c: c.all_reduce(X.astype(np.float32)), ["dtype"]
    yield "op", lambda c: c.all_reduce(X), lambda c: c.all_reduce(X, op="max"), ["op"]
    yield "root", lambda c: c.broadcast(X.copy(), root=0), lambda c: c.broadcast(X.copy(), root=odd), ["root"]
    yield ("algorithm", lambda c: c.all_reduce(X, algorithm="ring"),
           lambda c: c.all_reduce(X, algorithm="recursive_doubling"), ["algorithm"])
    yield "call", lambda c: c.all_reduce(X), lambda c: c.broadcast(X.copy()), ["call", "op", "root"]
    yield ("skipped call", lambda c: (c.barrier(), c.all_reduce(X)),
           lambda c: c.all_reduce(X), ["call", "count", "dtype", "op"])


def say(line: str) -> None:
    """One write per line, so that the ranks' lines do not interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(transport: str) -> int:
    world = cc.init(transport=transport, debug=True)
    n, r = world.size, world.rank
    ok = True
    # matching calls pass, and 0-byte and barrier calls are checked too
    world.all_reduce(X)
    world.barrier()
    world.all_gather(np.zeros(0))
    comm = world  # every case on this one communicator, one after the other
    for name, same, other, fields in cases(n):
        try:
            (other if r == n - 1 else same)(comm)
            say(f"FAIL {name} rank {r}: no error")
            ok = False
            continue
        except cc.CollectiveMismatch as e:
            good = e.ranks == [n - 1] and e.fields == fields and "mismatched" in str(e)
            said = f"ranks={e.ranks} fields={e.fields}: {e}"
        try:  # the same communicator, a matching call: it works
            got = comm.all_reduce(np.full(5, r + 1.0))
            after = "then a matching all_reduce: " + (
                "right" if np.array_equal(got, np.full(5, n * (n + 1) / 2)) else f"wrong {got}")
        except cc.CollectiveError as e:
            after = f"then a matching all_reduce raised {type(e).__name__}: {e}"
        good &= after.endswith("right")
        ok &= good
        say(f"{'ok' if good else 'FAIL'} {name} rank {r}: {said}; {after}")
    # without debug nothing is exchanged: traffic of a 0-byte call stays 0
    plain = cc.init(transport=transport, debug=False)
    before = plain.traffic
    plain.all_reduce(np.zeros(0))
    ok &= (plain.traffic - before).sent_bytes == 0
    plain.close()
    world.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
