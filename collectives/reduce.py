"""Reduce algorithms: ``out`` on root receives the reduction of every rank's ``x``.

Bytes on the wire, S = x.nbytes (docs/algorithms.md):
  binomial               every non-root sends S once; a rank receives S per child
  reduce_scatter_gather  (N-1)/N*S in a ring reduce-scatter, then each
                         non-root sends its block (about S/N) to root
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import ring as _ring
from .ranks import absolute, block_bounds, rel


def binomial(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op, root: int) -> None:
    n = ep.size
    vr = rel(ep.rank, root, n)
    acc, writable = x, False  # x is the caller's: never reduce into it
    if vr == 0:
        if out is not x:
            np.copyto(out, x)
        acc, writable = out, True
    mask = 1
    while mask < n:
        if vr & mask:
            ep.send(acc, absolute(vr - mask, root, n))
            return
        if vr + mask < n:
            if not writable:
                acc, writable = x.copy(), True  # leaves (odd vr) never copy their input
            ep.recv_reduce(acc, absolute(vr + mask, root, n), op)
        mask <<= 1


def reduce_scatter_gather(ep: Endpoint, x: np.ndarray, out: np.ndarray | None, op,
                          root: int) -> None:
    """Rabenseifner's reduce: ring reduce-scatter, then the blocks gathered at root."""
    n = ep.size
    if n == 1:
        if out is not x:
            np.copyto(out, x)
        return
    buf = x.copy()
    b = block_bounds(x.size, n)
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


ALGORITHMS = {"binomial": binomial, "reduce_scatter_gather": reduce_scatter_gather}


def choose(nbytes: int, size: int) -> str:
    return "binomial" if nbytes <= 64 * 1024 or size <= 2 else "reduce_scatter_gather"
