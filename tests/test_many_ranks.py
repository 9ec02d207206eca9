"""More ranks on one host than a fixed table would hold: machines with 96 or
128 cores run a rank per core, and any N must work.

A job of 65 ranks runs small all-reduces on shm (the compiled exchange
where the kernels are on) and checks each result against numpy's; 19 s
here, on 2 cores.  The segment is kept small (one slot of 4 KiB per
channel, 4 KiB exchange buffers: about 37 MB for 65 ranks) so that the
test fits a small /dev/shm."""
from __future__ import annotations

from launch import run_mpi

N = 65

SCRIPT = """
import numpy as np
import collectives as cc
with cc.init(transport="shm") as c:
    r, n = c.rank, c.size
    assert n == %d, n
    for dt in (np.float32, np.int64):
        want = np.sum([np.arange(4) + p for p in range(n)], axis=0).astype(dt)
        for _ in range(3):
            y = c.all_reduce((np.arange(4) + r).astype(dt))
            assert y.dtype == dt and np.array_equal(y, want), (r, y, want)
    y = c.all_reduce(np.full(3, float(r)), op="avg")
    assert np.array_equal(y, np.full(3, (n - 1) / 2)), (r, y)
    y = c.all_reduce(np.full(2, r, np.int32), op="max")
    assert np.array_equal(y, np.full(2, n - 1, np.int32)), (r, y)
""" % N


def test_65_ranks_all_reduce_on_shm():
    p = run_mpi(N, ["-c", SCRIPT], timeout=240, COLLECTIVES_SHM_SLOT_BYTES="4096",
                COLLECTIVES_SHM_SLOTS="1", COLLECTIVES_SHM_XCHG_BYTES="4096",
                COLLECTIVES_TIMEOUT="60")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
