"""Sends that MPI refuses (transports/_bounded.py) under mpiexec:
``python tests/bounded_check.py`` on N ranks, transport mpi.

Every peer is taken for a rank of another machine, and ``_bounded.post``
refuses a third of the posts (as MPICH does, past its bounded retries,
when a peer's queue stays full): each refused send waits in its peer's
queue and is posted by a later poll.  Collectives of every family (each
result checked against numpy) and streams of messages with one tag (each
checked for its order) must come out right, and some posts must have been
refused on every rank.  Under MPICH, rank 0 also checks ``_bounded``
itself: the bound is set for the post alone, and MPI's EAGAIN error is
what ``post`` takes for a refusal.  Prints one line per failure and exits 1 on
any.
"""
from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import collectives as cc
from transports import _bounded


def refuse_some(real_post):
    """``_bounded.post`` that refuses every third post (returns None, as
    post does for MPI's refusal) and counts: [posts, refusals]."""
    count = [0, 0]

    def post(start, *args):
        count[0] += 1
        if count[0] % 3 == 0:
            count[1] += 1
            return None
        return real_post(start, *args)
    return post, count


def check_bound(fails: list) -> None:
    """Rank 0 under MPICH: the variable holds RETRIES during a post and its
    old value after; EAGAIN's error class is a refusal, another raises."""
    found = _bounded._lookup()
    if found is None:
        fails.append("MPICH without MPIR_CVAR_CH4_OFI_MAX_EAGAIN_RETRY: nothing bounded")
        return
    cvar = found[2]
    old = cvar.read()
    during = _bounded.post(lambda: cvar.read())
    if during != _bounded.RETRIES or cvar.read() != old:
        fails.append(f"the bound: {during} during a post, {cvar.read()} after (old {old})")
    eagain = [c for c in range(1, 256)
              if "(EAGAIN)" in MPI.Get_error_string(c)]

    def refuse(e):
        raise e
    if not eagain or _bounded.post(refuse, MPI.Exception(eagain[0])) is not None:
        fails.append(f"MPI's EAGAIN class {eagain} is not taken for a refusal")
    try:
        _bounded.post(refuse, MPI.Exception(MPI.ERR_OTHER))
        fails.append("MPI_ERR_OTHER taken for a refusal")
    except MPI.Exception:
        pass


def main() -> int:
    comm = cc.init(transport="mpi", timeout=20)
    r, n = comm.rank, comm.size
    fails: list[str] = []
    if r == 0 and MPI.Get_library_version().startswith("MPICH"):
        check_bound(fails)
    post, count = refuse_some(_bounded.post)
    _bounded.post, _bounded.active = post, lambda: True
    comm._t.elsewhere = [p != r for p in range(n)]  # every peer on another machine
    rng = np.random.default_rng(7)
    for size in (1, 1000, 300_000):
        x = rng.standard_normal((n, size)).astype(np.float32)
        mine = x[r]
        checks = {
            "all_reduce": (comm.all_reduce(mine), x.sum(0)),
            "broadcast": (comm.broadcast(mine.copy(), root=n - 1), x[n - 1]),
            "all_gather": (comm.all_gather(mine), x),
            "reduce_scatter": (comm.reduce_scatter(np.tile(mine, (n, 1))), x.sum(0)),
            "all_to_all": (comm.all_to_all(np.stack([mine + p for p in range(n)])),
                           x + r),
        }
        for name, (got, want) in checks.items():
            if not np.allclose(got, want, rtol=1e-5, atol=1e-4 * n):
                fails.append(f"{name} of {size} floats: wrong result")
    # messages between two ranks keep their order, refusals or not
    if n > 1:
        to, frm = (r + 1) % n, (r - 1) % n
        sent = [comm.isend(np.full(50_000, 100 * r + i, np.float64), to, tag=3)
                for i in range(12)]
        for i in range(12):
            got = comm.recv(np.empty(50_000), frm, tag=3)
            if not (got == 100 * frm + i).all():
                fails.append(f"message {i} from rank {frm}: {got[0]} (order lost)")
        for h in sent:
            h.wait()
    comm.barrier()
    if n > 1 and count[1] == 0:
        fails.append(f"no post refused in {count[0]}: the path was not taken")
    for f in fails:
        print(f"rank {r}: {f}", flush=True)
    print(f"rank {r}: {count[0]} posts, {count[1]} refused", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
