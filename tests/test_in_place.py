"""gather and scatter in place at the root, as MPI_IN_PLACE; any other overlap
of x and out is a ValueError whose message suggests only what works.
(The results of every in-place call at every N: test_conformance.py.)"""
from launch import run_mpi

SCRIPT = """
import sys, numpy as np, collectives as cc
comm = cc.init(transport=sys.argv[1])
n, r = comm.size, comm.rank
said = []

def refused(fn):
    try:
        fn()
    except ValueError as e:
        said.append(str(e))
        return
    raise AssertionError("accepted")

for root in range(n):
    other = (root + 1) % n
    table = np.zeros((n, 3))
    table[r] = r + 1
    got = comm.gather(table[r], out=table, root=root)
    if r == root:
        assert got is table and (table == np.arange(1, n + 1)[:, None]).all(), table
        refused(lambda: comm.gather(table[other], out=table, root=root))
    x = np.arange(n * 3.0).reshape(n, 3) if r == root else None
    out = x[root] if r == root else np.empty(3)
    assert comm.scatter(x, out, root=root) is out and (out == np.arange(3.0) + 3 * r).all()
    if r == root:
        assert (x == np.arange(n * 3.0).reshape(n, 3)).all(), "root's x changed"
        refused(lambda: comm.scatter(x, x[other], root=root))
        refused(lambda: comm.scatter(x, x.reshape(-1)[1:4], root=root))
for s in said:
    assert "block" in s and "out=x" not in s, s
print(f"ok {r} {len(said)}", flush=True)  # one write: lines of ranks do not interleave
comm.close()
"""


def test_gather_and_scatter_in_place_at_the_root():
    for transport in ("shm", "mpi"):
        p = run_mpi(3, ["-c", SCRIPT, transport], timeout=60)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        assert p.stdout.count("ok") == 3 and "ok 0 3" in p.stdout, p.stdout
