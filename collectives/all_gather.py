"""All-gather algorithms: ``out`` (N blocks) gets rank i's ``x`` in block i.

Bytes on the wire per rank, S = x.nbytes (one block; docs/algorithms.md):
  ring   (N-1) * S sent and received, in N-1 steps
  direct (N-1) * S sent and received, in one round per exchange buffer
  bruck  (N-1) * S sent and received, in ceil(log2 N) steps
  one_copy (N-1) * S sent and received: each rank reads every peer's x
         where it lies, straight into out (one copy; one_copy.py)
  one_copy_or_staged  one_copy's from the peers' mappings where every x is
         communicator-allocated, else the staged choice's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import ring as _ring
from . import streaming
from .arrays import address
from .algorithm import Algorithm, Family
from .one_copy import read_all, regions_or_staged
from .ranks import chunks, round_bytes


def ring(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """N-1 steps, each passing one block to the right; the first sends ``x``
    itself, whose copy into ``out`` is made while it moves."""
    n, m = ep.size, x.size
    _ring.all_gather(ep, out, [i * m for i in range(n + 1)], first=x)


def bruck(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Bruck et al. 1997: round k sends the first min(k, N-k) blocks to rank - k."""
    n, m, r = ep.size, x.size, ep.rank
    tmp = np.empty_like(out)
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
    then copies its own (the peers need not wait for it)."""
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
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
