"""Reduce algorithms: ``out`` on root receives the reduction of every rank's ``x``.

Bytes on the wire, S = x.nbytes (docs/algorithms.md):
  binomial               every non-root sends S once; a rank receives S per child
  reduce_scatter_gather  (N-1)/N*S in a ring reduce-scatter, then each
                         non-root sends its block (about S/N) to root
  direct                 every rank sends S (root: (N-1)*S received), one round
                         per exchange buffer
  one_copy               the bytes of reduce_scatter_gather: each rank reads its
                         piece of every peer's x where it lies and reduces it,
                         then root reads the reduced pieces (one_copy.py)
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import ring as _ring
from .algorithm import Algorithm, Family
from .one_copy import read_all, reduce_piece
from .ops import in_rank_order
from .ranks import absolute, block_bounds, chunks, rel


def binomial(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op, root: int) -> None:
    n = ep.size
    vr = rel(ep.rank, root, n)
    acc, writable = x, False  # x is the caller's: never reduce into it
    if vr == 0:
        acc, writable = out, out is x
    mask = 1
    while mask < n:
        if vr & mask:
            ep.send(acc, absolute(vr - mask, root, n))
            return
        if vr + mask < n:
            peer = absolute(vr + mask, root, n)
            if writable:
                ep.recv_reduce(acc, peer, op)
            else:  # the first child: x op its sum lands in acc, x left as it is
                if acc is x:
                    acc = np.empty_like(x)  # leaves (odd vr) never copy their input
                ep.recv_reduce(acc, peer, op, src=x)
                writable = True
        mask <<= 1


def reduce_scatter_gather(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op,
                          root: int) -> None:
    """Rabenseifner's reduce: ring reduce-scatter, then the blocks gathered at root."""
    n = ep.size
    b = block_bounds(x.size, n)
    if n > 1 and type(x) is np.ndarray:  # the ring reads x where it lies
        buf = np.empty_like(x)
        owned = _ring.reduce_scatter(ep, buf, b, op, src=x)
    else:
        buf = x.copy()
        owned = _ring.reduce_scatter(ep, buf, b, op)
    if ep.rank != root:
        ep.send(buf[b[owned]:b[owned + 1]], root)
        return
    reqs = []
    for r in range(n):
        blk = (r + 1) % n  # the block that rank r owns after the ring pass
        if r == root:
            np.copyto(out[b[blk]:b[blk + 1]], buf[b[blk]:b[blk + 1]])
        else:
            reqs.append(ep.irecv(out[b[blk]:b[blk + 1]], r))
    ep.waitall(reqs)


def direct(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op, root: int) -> None:
    """Every rank but root puts a chunk of ``x`` into shared memory
    (ep.exchange, root its ``sink``) and root reduces the N chunks in rank
    order, its own where it lies, one round per exchange buffer: the others
    copy chunk k+1 in while root reduces chunk k."""
    is_root = ep.rank == root
    # in_rank_order's out may overlap only the first two parts: an in-place
    # root further on reduces from a copy of its chunk
    own_copy = is_root and root > 1 and np.may_share_memory(x, out)
    for lo, hi in chunks(ep.chunk_bytes(x), x.size, x.itemsize):
        nb = (hi - lo) * x.itemsize  # only root reads
        v = ep.exchange(x[lo:hi], sent=0 if is_root else nb,
                        recv=(ep.size - 1) * nb if is_root else 0, sink=root)
        if is_root:
            v = list(v)
            v[root] = x[lo:hi].copy() if own_copy else x[lo:hi]
            in_rank_order(v, op, out[lo:hi])


def one_copy(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op, root: int) -> None:
    """Each rank reduces its piece of every rank's ``x`` (read where it lies,
    in rank order), then root reads the reduced pieces into ``out``."""
    n, r = ep.size, ep.rank
    b = block_bounds(x.size, n)
    mine = out[b[r]:b[r + 1]] if r == root else np.empty(b[r + 1] - b[r], x.dtype)
    reduce_piece(ep, x, b, mine, op)
    rem = ep.expose(None if r == root else mine)
    if r == root:
        read_all(rem, ep, lambda p: (0, out[b[p]:b[p + 1]]))
    rem.finish(sent=0 if r == root else mine.nbytes)




def alone(x: np.ndarray, out: np.ndarray | None, op, root: int) -> None:
    if out is not x:
        np.copyto(out, x)


FAMILY = Family("reduce", (
    Algorithm("binomial", binomial),
    Algorithm("reduce_scatter_gather", reduce_scatter_gather),
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
), alone)
