"""``wait(timeout)`` of isend/irecv handles under mpiexec:
``python tests/p2p_wait_check.py TRANSPORT`` on 2 ranks.

Rank 0 posts a receive whose sender sends only after a barrier: ``wait(0.2)``
must raise TimeoutError after about 0.2 s, and the handle must stay valid, so
that a later ``wait()`` returns the data.  Then a ``wait(timeout)`` that the
message beats returns it.  Prints one line per check; exit status 1 on a
failure.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import collectives as cc


def main(transport: str) -> int:
    comm = cc.init(transport=transport)
    fails = []
    x = np.arange(1000, dtype=np.float32)
    if comm.rank == 0:
        out = np.zeros_like(x)
        req = comm.irecv(out, 1, tag=5)
        t0 = time.monotonic()
        try:
            req.wait(0.2)
            fails.append("wait(0.2) returned before the peer sent")
        except TimeoutError as e:
            took = time.monotonic() - t0
            if isinstance(e, cc.CollectiveError) or not 0.2 <= took < 1.0:
                fails.append(f"wait(0.2) raised {type(e).__name__} after {took:.3f} s: {e}")
            print(f"wait(0.2): {type(e).__name__} after {took:.3f} s: {e}", flush=True)
        if req.done():
            fails.append("done() before the peer sent")
        comm.barrier()  # now rank 1 sends
        got = req.wait()
        if got is not out or not np.array_equal(out, x):
            fails.append(f"a later wait() returned {got!r}")
        out2 = np.zeros_like(x)
        got = comm.irecv(out2, 1, tag=6).wait(30)
        if got is not out2 or not np.array_equal(out2, x + 1):
            fails.append(f"wait(30) returned {got!r}")
    else:
        comm.barrier()
        comm.send(x, 0, tag=5)
        comm.isend(x + 1, 0, tag=6).wait(30)
    comm.close()
    for f in fails:
        print("FAIL", f, flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
