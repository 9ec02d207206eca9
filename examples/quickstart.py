"""mpiexec -n 4 python examples/quickstart.py [shm|mpi]

Every rank contributes its rank number; every collective's result is checked.
"""
import sys

import numpy as np

import collectives as cc

with cc.init(transport=sys.argv[1] if len(sys.argv) > 1 else "auto") as comm:
    r, n = comm.rank, comm.size
    x = np.full(5, r, dtype=np.float32)

    total = comm.all_reduce(x)                         # sum over ranks, on every rank
    assert np.all(total == n * (n - 1) / 2)

    every = comm.all_gather(np.array([r]))             # shape (n, 1)
    assert every.ravel().tolist() == list(range(n))

    mine = comm.reduce_scatter(np.ones((n, 3)), op=cc.SUM)  # my block of the sum
    assert np.all(mine == n)

    buf = np.arange(4.0) if r == 0 else np.zeros(4)
    comm.broadcast(buf, root=0)                        # in place
    assert np.all(buf == np.arange(4.0))

    h = comm.all_reduce(np.ones(1000), op="max", async_op=True)  # runs while we compute
    busy = np.sqrt(np.arange(10_000.0)).sum()
    assert np.all(h.wait() == 1) and busy > 0

    if n > 1:                                          # a ring of point-to-point messages
        req = comm.isend(x, (r + 1) % n, tag=7)
        got = comm.recv(np.empty_like(x), (r - 1) % n, tag=7)
        req.wait()
        assert np.all(got == (r - 1) % n)

    if r == 0:
        print(f"{n} ranks over {comm.transport}: all checks passed; "
              f"rank 0 sent {comm.traffic.sent_bytes} bytes")
