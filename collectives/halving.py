"""Recursive halving, the reduce-scatter step of the halving algorithms
(all_reduce's halving_doubling, reduce_scatter's recursive_halving)."""
from __future__ import annotations

import numpy as np

from transports import Endpoint


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
