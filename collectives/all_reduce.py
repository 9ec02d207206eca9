"""All-reduce algorithms; each reduces ``buf`` (flat) in place on every rank.

Bytes on the wire per rank, S = buf.nbytes, N ranks, p2 the largest power of
two <= N (see docs/algorithms.md):
  direct              (N-1) * S, in one round
  ring                2(N-1)/N * S
  recursive_doubling  log2(p2) * S, plus S for each rank in the fold
  halving_doubling    2(p2-1)/p2 * S, plus S for each rank in the fold
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import ring as _ring
from .ranks import Fold, block_bounds


def ring(ep: Endpoint, buf: np.ndarray, op) -> None:
    """Chunked ring: reduce-scatter pass, then all-gather pass (Patarasuk & Yuan 2009)."""
    if ep.size == 1:
        return
    bounds = block_bounds(buf.size, ep.size)
    owned = _ring.reduce_scatter(ep, buf, bounds, op)
    _ring.all_gather(ep, buf, bounds, shift=owned - ep.rank)


def direct(ep: Endpoint, buf: np.ndarray, op) -> None:
    """One round: every rank's vector reaches every rank (ep.exchange), and each
    reduces all N in rank order, so every rank gets the same bits."""
    if ep.size == 1:
        return
    v = ep.exchange(buf)
    op(v[0], v[1], out=buf)
    for x in v[2:]:
        op(buf, x, out=buf)


def _fold_in(ep: Endpoint, f: Fold, buf: np.ndarray, op) -> None:
    if f.extra:
        ep.send(buf, ep.rank + 1)
    elif f.helper:
        ep.recv_reduce(buf, ep.rank - 1, op)


def _fold_out(ep: Endpoint, f: Fold, buf: np.ndarray) -> None:
    if f.extra:
        ep.recv(buf, ep.rank + 1)
    elif f.helper:
        ep.send(buf, ep.rank - 1)


def recursive_doubling(ep: Endpoint, buf: np.ndarray, op) -> None:
    """log2(p2) rounds of whole-vector exchange with partner rank ^ mask."""
    if ep.size == 1:
        return
    f = Fold(ep.rank, ep.size)
    _fold_in(ep, f, buf, op)
    if not f.extra:
        tmp = np.empty_like(buf)
        mask = 1
        while mask < f.p2:
            peer = f.real(f.new ^ mask)
            ep.sendrecv(buf, peer, tmp, peer)
            op(buf, tmp, out=buf)
            mask <<= 1
    _fold_out(ep, f, buf)


def halving_doubling(ep: Endpoint, buf: np.ndarray, op) -> None:
    """Rabenseifner: reduce-scatter by recursive halving, all-gather by doubling."""
    if ep.size == 1:
        return
    f = Fold(ep.rank, ep.size)
    _fold_in(ep, f, buf, op)
    if not f.extra:
        b = block_bounds(buf.size, f.p2)
        lo, hi = _ring.halving(ep, f, buf, b.__getitem__, op)
        mask = 1
        while mask < f.p2:
            peer = f.real(f.new ^ mask)
            plo, phi = (lo - mask, lo) if f.new & mask else (hi, hi + mask)
            ep.sendrecv(buf[b[lo]:b[hi]], peer, buf[b[plo]:b[phi]], peer)
            lo, hi = min(lo, plo), max(hi, phi)
            mask <<= 1
    _fold_out(ep, f, buf)


ALGORITHMS = {"ring": ring, "recursive_doubling": recursive_doubling,
              "halving_doubling": halving_doubling, "direct": direct}


def choose(nbytes: int, size: int) -> str:
    """Latency-bound sizes take the fewest rounds; large ones the fewest bytes.
    Switch points from docs/performance.md's sweep (N = 4, shm)."""
    if nbytes <= 32 * 1024:  # one round through the exchange buffers
        return "direct"
    if nbytes <= 128 * 1024:
        return "recursive_doubling"
    if nbytes <= 512 * 1024 and size & (size - 1) == 0:
        return "halving_doubling"
    return "ring"
