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

from .arrays import address


def _neighbours(ep: Endpoint, order: Sequence[int] | None):
    n = ep.size
    if order is None:
        p = ep.rank
        return p, (p + 1) % n, (p - 1) % n
    p = order.index(ep.rank)
    return p, order[(p + 1) % n], order[(p - 1) % n]


def reduce_scatter(ep: Endpoint, buf: np.ndarray, bounds: Sequence[int], op,
                   shift: int = 0, order: Sequence[int] | None = None,
                   src: np.ndarray | None = None, place=None) -> int:
    """Ring reduce-scatter; returns the block this position owns, reduced.

    Step s sends block (p - s + shift) and reduces block (p - s - 1 + shift)
    from the left, so the block sent next is the one just reduced.  After
    n-1 steps position p owns block (p + 1 + shift) mod n.

    In place on ``buf`` where ``src`` is None.  With ``src`` (a numpy array
    apart from ``buf``, left as it is) nothing is copied whole: the first
    step sends src's block, and each step receives the left's partial sum
    of a block into its place in ``buf`` (or into ``place(step, elements)``)
    and reduces src's block into it there.  The ops are commutative, so the
    bits are those of the in-place form.
    """
    n = ep.size
    p, right, left = _neighbours(ep, order)
    sent = None
    for s in range(n - 1):
        si, ri = (p - s + shift) % n, (p - s - 1 + shift) % n
        if src is None:
            ep.sendrecv_reduce(buf[bounds[si]:bounds[si + 1]], right,
                               buf[bounds[ri]:bounds[ri + 1]], left, op)
            continue
        mine = src[bounds[ri]:bounds[ri + 1]]
        dst = buf[bounds[ri]:bounds[ri + 1]] if place is None else place(s, mine.size)
        ep.sendrecv(src[bounds[si]:bounds[si + 1]] if sent is None else sent, right, dst, left)
        op(dst, mine, out=dst)
        sent = dst
    return (p + 1 + shift) % n


def reduce_scatter_into(ep: Endpoint, src: np.ndarray, bounds: Sequence[int], op,
                        out: np.ndarray) -> None:
    """Ring reduce-scatter of ``src`` (left as it is) whose block ``rank``
    lands in ``out``: the partial sums pass through two scratch blocks in
    turn, and the last step receives into ``out`` (at N = 2: one exchange
    and one reduction into ``out``, no copy).  Where ``src`` is not a numpy
    array, or overlaps ``out``, the ring runs in place on a copy of it."""
    n = ep.size
    if type(src) is not np.ndarray or np.may_share_memory(src, out):
        acc = src.copy()
        owned = reduce_scatter(ep, acc, bounds, op, shift=-1)  # ends owning block rank
        np.copyto(out, acc[bounds[owned]:bounds[owned + 1]])
        return
    if n == 1:
        np.copyto(out, src[bounds[0]:bounds[1]])
        return
    most = max(bounds[i + 1] - bounds[i] for i in range(n))
    scratch = np.empty((2, most), src.dtype) if n > 2 else None
    reduce_scatter(ep, None, bounds, op, shift=-1, src=src,
                   place=lambda s, k: out if s == n - 2 else scratch[s % 2, :k])


def all_gather(ep: Endpoint, buf: np.ndarray, bounds: Sequence[int],
               shift: int = 0, order: Sequence[int] | None = None,
               first: np.ndarray | None = None) -> None:
    """Ring all-gather in place, position p starting with block (p + shift).
    ``first``: that block where the caller has it (its input, apart from
    ``buf`` or in place there): the first step sends it from there and,
    where it lies apart, copies it into ``buf`` while the step's messages
    move."""
    n = ep.size
    p, right, left = _neighbours(ep, order)
    for s in range(n - 1):
        si, ri = (p - s + shift) % n, (p - s - 1 + shift) % n
        mine, theirs = buf[bounds[si]:bounds[si + 1]], buf[bounds[ri]:bounds[ri + 1]]
        if s == 0 and first is not None:
            first_step(ep, first, right, theirs, left, mine)
        else:
            ep.sendrecv(mine, right, theirs, left)
    if n == 1 and first is not None:  # no step: only the copy
        _place(buf[bounds[0]:bounds[1]], first)


# a first step's copy of fewer bytes is too short to hide behind its
# messages: one send-receive (one compiled call on mpi) costs less there
# than two posts and a wait
OVERLAP_BYTES = 64 << 10


def first_step(ep: Endpoint, send: np.ndarray, dst: int, recv: np.ndarray, src: int,
               place: np.ndarray) -> None:
    """Send ``send`` to ``dst`` and receive ``recv`` from ``src``, and copy
    ``send`` into ``place`` (unless it lies there): while the messages move
    where it is large enough to be worth hiding."""
    if send.nbytes < OVERLAP_BYTES:
        ep.sendrecv(send, dst, recv, src)
        _place(place, send)
        return
    reqs = [ep.irecv(recv, src), ep.isend(send, dst)]
    _place(place, send)
    ep.waitall(reqs)


def _place(dst: np.ndarray, src: np.ndarray) -> None:
    """``src`` into ``dst`` unless it lies there already (in place)."""
    if address(dst) != address(src):
        np.copyto(dst, src)
