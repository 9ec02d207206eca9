"""The ring passes that the ring algorithms are built from.

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
