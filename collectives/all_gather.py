"""All-gather algorithms: ``out`` (N blocks) gets rank i's ``x`` in block i.

Bytes on the wire per rank, S = x.nbytes (one block; docs/algorithms.md):
  ring   (N-1) * S sent and received, in N-1 steps
  direct (N-1) * S sent and received, in one round per exchange buffer
  bruck  (N-1) * S sent and received, in ceil(log2 N) steps
  recursive_doubling  (N-1) * S received in log2(p2) steps, p2 the largest
         power of two <= N; a rank folded beyond p2 sends S and receives N * S
  one_copy (N-1) * S sent and received: each rank reads every peer's x
         where it lies, straight into out (one copy; one_copy.py)
  one_copy_or_staged  one_copy's from the peers' mappings where every x is
         communicator-allocated, else the staged choice's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint, schedule

from . import plans
from . import ring as _ring
from . import streaming
from .arrays import address
from .algorithm import Algorithm, Family
from .one_copy import gathered, read_all, regions_or_staged
from .ranks import Fold, chunks, round_bytes


def ring(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """N-1 steps, each passing one block to the right; the first sends ``x``
    itself, whose copy into ``out`` is made while it moves."""
    n, m = ep.size, x.size
    _ring.all_gather(ep, out, [i * m for i in range(n + 1)], first=x)


_BRUCK: dict = {}  # (rank, size) -> bruck's rounds as compiled steps (bruck_plan)


def bruck_plan(rank: int, size: int) -> schedule.Plan:
    """Bruck's rounds at ``rank`` of ``size`` as the transports' compiled
    steps take them (``Endpoint.steps``), in blocks of the output, on a
    buffer whose block i ends as rank (rank + i)'s; then its blocks into
    the output (out steps), turned to rank order."""
    plan = _BRUCK.get((rank, size))
    if plan is None:
        steps, k = [(schedule.COPY, rank, rank, 0, 0, 0, 1)], 1
        while k < size:
            c = min(k, size - k)
            steps.append((schedule.SWAP, (rank - k) % size, (rank + k) % size, 0, c, k, c))
            k <<= 1
        steps.append((schedule.OUT, rank, rank, rank, 0, 0, size - rank))
        if rank:
            steps.append((schedule.OUT, rank, rank, 0, 0, size - rank, rank))
        plan = _BRUCK[rank, size] = schedule.Plan(steps)
    return plan


def bruck(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Bruck et al. 1997: round k sends the first min(k, N-k) blocks to rank
    - k; its rounds in one compiled call where the transport has one (mpi,
    hier: ``Endpoint.steps``)."""
    n, m, r = ep.size, x.size, ep.rank
    tmp = np.empty_like(out)
    if plans.compiled(ep, bruck_plan(r, n), x, tmp, None, m, out):
        return
    # round 1 sends x itself and copies it into tmp (while its messages move)
    _ring.first_step(ep, x, (r - 1) % n, tmp[m:2 * m], (r + 1) % n, tmp[:m])
    k = 2
    while k < n:
        c = min(k, n - k)
        ep.sendrecv(tmp[:c * m], (r - k) % n, tmp[k * m:(k + c) * m], (r + k) % n)
        k <<= 1
    # tmp block i holds rank (r + i)'s data
    np.copyto(out[r * m:], tmp[:(n - r) * m])
    np.copyto(out[:r * m], tmp[(n - r) * m:])


_DOUBLING: dict = {}  # (rank, size) -> recursive_doubling's steps (doubling_plan)


def doubling_plan(rank: int, size: int) -> schedule.Plan:
    """recursive_doubling's steps at ``rank`` of ``size``, in blocks of the
    output.  Where N is not a power of two, the first 2*rem ranks fold
    (ranks.Fold): an extra rank hands its block to its helper and gets the
    whole output back at the end; new rank g stands for the blocks of the
    world ranks it plays, so every group's blocks stay contiguous."""
    plan = _DOUBLING.get((rank, size))
    if plan is None:
        f, r = Fold(rank, size), rank
        steps = [(schedule.COPY, r, r, 0, 0, r, 1)]
        if f.extra:
            steps += [(schedule.SEND, r + 1, r + 1, r, 1, 0, 0),
                      (schedule.RECV, r + 1, r + 1, 0, 0, 0, size)]
        else:
            if f.helper:
                steps.append((schedule.RECV, r - 1, r - 1, 0, 0, r - 1, 1))

            def start(g: int) -> int:  # first block of new rank g's ranks
                return 2 * g if g <= f.rem else g + f.rem
            mask = 1
            while mask < f.p2:
                peer = f.new ^ mask
                mine, theirs = f.new & ~(mask - 1), peer & ~(mask - 1)
                steps.append((schedule.SWAP, f.real(peer), f.real(peer), start(mine),
                              start(mine + mask) - start(mine), start(theirs),
                              start(theirs + mask) - start(theirs)))
                mask <<= 1
            if f.helper:
                steps.append((schedule.SEND, r - 1, r - 1, 0, size, 0, 0))
        plan = _DOUBLING[rank, size] = schedule.Plan(steps)
    return plan


def recursive_doubling(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """log2(p2) rounds, each with partner rank ^ mask: the blocks gathered so
    far both ways, straight into ``out`` (Thakur, Rabenseifner & Gropp 2005;
    ranks beyond a power of two folded, ``doubling_plan``)."""
    plans.run(ep, doubling_plan(ep.rank, ep.size), x, out, None, x.size)


def direct(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Every rank's block reaches every rank (ep.exchange), one round per
    chunk of at most ranks.ROUND_BYTES of a block (and the exchange buffer:
    N = 4, 4 MiB 1.7x sooner than whole buffers, docs/performance.md)."""
    m = x.size
    for lo, hi in chunks(round_bytes(ep, x, every_size=True), m, x.itemsize):
        for i, v in enumerate(ep.exchange(x[lo:hi])):
            np.copyto(out[i * m + lo:i * m + hi], v)


def one_copy(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Every rank reads every peer's ``x`` straight into its block of ``out``,
    then copies its own (the peers need not wait for it); in one compiled
    call where the transport has one (one_copy.py's ``gathered``)."""
    own = address(out[ep.rank * x.size:(ep.rank + 1) * x.size]) != address(x)
    if not gathered(ep, x, out, x.nbytes, 0, own):
        _one_copy(ep, ep.expose(x), x, out)


def _one_copy(ep: Endpoint, rem, x: np.ndarray, out: np.ndarray) -> None:
    """``one_copy`` once ``x`` is published (``rem``)."""
    n, m, r = ep.size, x.size, ep.rank
    copy = streaming.copier(out, n)
    # reads first: at N = 4 7-11 % sooner (performance.md)
    read_all(rem, ep, lambda p: (0, out[p * m:(p + 1) * m]), copy)
    _own(x, out, r, copy)
    rem.finish(sent=(n - 1) * x.nbytes)


def _own(x: np.ndarray, out: np.ndarray, r: int, copy=np.copyto) -> None:
    """This rank's block of ``out`` (in place, x is already there)."""
    mine = out[r * x.size:(r + 1) * x.size]
    if address(mine) != address(x):
        copy(mine, x)


def one_copy_or_staged(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """``one_copy`` from the peers' mappings where every rank's ``x`` is a
    communicator-allocated array; else the staged choice (one_copy.py's
    ``regions_or_staged``: the first publication decides, alike everywhere)."""
    regions_or_staged(ep, x, lambda rem: _one_copy(ep, rem, x, out),
                      lambda: FAMILY.run_chosen(x.nbytes, ep, x, out, shared=True))


def alone(x: np.ndarray, out: np.ndarray) -> None:
    _own(x, out, 0)


FAMILY = Family("all_gather", (
    Algorithm("ring", ring),
    Algorithm("bruck", bruck),
    Algorithm("recursive_doubling", recursive_doubling),
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
