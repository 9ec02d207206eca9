"""The passes that the ring and halving algorithms are built from.

Positions ``0..n-1`` around the ring map to ranks through ``order``; block i of
``buf`` is ``buf[bounds[i]:bounds[i+1]]``.  Each step sends one block to the
right neighbour while receiving another from the left; the transport cuts each
block into slot-sized chunks, so that the sender copies chunk k+1 while the
receiver reduces chunk k.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from transports import Endpoint


def _neighbours(ep: Endpoint, order: Sequence[int] | None):
    n = ep.size
    if order is None:
        p = ep.rank
        return p, (p + 1) % n, (p - 1) % n
    p = order.index(ep.rank)
    return p, order[(p + 1) % n], order[(p - 1) % n]


def reduce_scatter(ep: Endpoint, buf: np.ndarray, bounds: Sequence[int], op,
                   shift: int = 0, order: Sequence[int] | None = None) -> int:
    """Ring reduce-scatter in place; returns the block this position owns, reduced.

    Step s sends block (p - s + shift) and reduces block (p - s - 1 + shift)
    from the left, so the block sent next is the one just reduced.  After
    n-1 steps position p owns block (p + 1 + shift) mod n.
    """
    n = ep.size
    p, right, left = _neighbours(ep, order)
    for s in range(n - 1):
        si, ri = (p - s + shift) % n, (p - s - 1 + shift) % n
        ep.sendrecv_reduce(buf[bounds[si]:bounds[si + 1]], right,
                           buf[bounds[ri]:bounds[ri + 1]], left, op)
    return (p + 1 + shift) % n


def all_gather(ep: Endpoint, buf: np.ndarray, bounds: Sequence[int],
               shift: int = 0, order: Sequence[int] | None = None) -> None:
    """Ring all-gather in place, position p starting with block (p + shift)."""
    n = ep.size
    p, right, left = _neighbours(ep, order)
    for s in range(n - 1):
        si, ri = (p - s + shift) % n, (p - s - 1 + shift) % n
        ep.sendrecv(buf[bounds[si]:bounds[si + 1]], right,
                    buf[bounds[ri]:bounds[ri + 1]], left)


def halving(ep: Endpoint, f, buf: np.ndarray, start, op) -> tuple[int, int]:
    """Recursive halving among the p2 ranks of fold ``f``, in place on ``buf``.

    Group g of the vector is ``buf[start(g):start(g+1)]``.  Each round splits
    this rank's range of groups in two, sends the half the partner keeps and
    reduces the half it keeps; the highest bit of the new rank picks the half
    first.  Returns the range of groups left, fully reduced: ``(f.new, f.new+1)``.
    """
    lo, hi = 0, f.p2
    mask = f.p2 >> 1
    while mask:
        peer = f.real(f.new ^ mask)
        mid = (lo + hi) // 2
        (klo, khi), (glo, ghi) = ((mid, hi), (lo, mid)) if f.new & mask else ((lo, mid), (mid, hi))
        ep.sendrecv_reduce(buf[start(glo):start(ghi)], peer, buf[start(klo):start(khi)], peer, op)
        lo, hi = klo, khi
        mask >>= 1
    return lo, hi
