"""Broadcast algorithms; ``buf`` (flat) is filled in place with root's values.

Bytes on the wire, S = buf.nbytes (docs/algorithms.md):
  binomial           S received by every non-root; a rank sends S per child
  scatter_allgather  root sends (N-1)/N*S in the scatter; every rank sends
                     about (N-1)/N*S in the ring all-gather
  chain              every rank but the last sends S, every non-root receives S
  direct             root sends (N-1)*S, every non-root receives S, one round
                     per exchange buffer
  one_copy           the same bytes: every non-root reads root's buf where it
                     lies (one copy; one_copy.py)
  one_copy_or_staged one_copy's from root's mapping where root's buf is
                     communicator-allocated, else the staged choice's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import ring as _ring
from . import selection, streaming
from .algorithm import Algorithm, Family
from .one_copy import regions_or_staged
from .ranks import absolute, block_bounds, chunks, rel

CHAIN_CHUNK_BYTES = 256 * 1024


def binomial(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """ceil(log2 N) rounds: in round k, ranks holding the data send to rank + 2^k."""
    n = ep.size
    vr = rel(ep.rank, root, n)
    mask = 1
    while mask < n:
        if vr & mask:
            ep.recv(buf, absolute(vr - mask, root, n))
            break
        mask <<= 1
    mask >>= 1
    reqs = []
    while mask > 0:
        if vr + mask < n:
            reqs.append(ep.isend(buf, absolute(vr + mask, root, n)))
        mask >>= 1
    ep.waitall(reqs)


def scatter_allgather(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """Root scatters N blocks, then a ring all-gather (van de Geijn)."""
    n = ep.size
    b = block_bounds(buf.size, n)
    vr = rel(ep.rank, root, n)
    if vr == 0:
        ep.waitall([ep.isend(buf[b[v]:b[v + 1]], absolute(v, root, n)) for v in range(1, n)])
    else:
        ep.recv(buf[b[vr]:b[vr + 1]], root)
    order = [absolute(v, root, n) for v in range(n)]
    _ring.all_gather(ep, buf, b, order=order)


def chain(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """Pipelined chain root -> root+1 -> ...: chunk k+1 arrives while chunk k is forwarded."""
    n = ep.size
    vr = rel(ep.rank, root, n)
    step = max(1, CHAIN_CHUNK_BYTES // max(1, buf.itemsize))
    reqs = []
    for lo in range(0, max(buf.size, 1), step):
        piece = buf[lo:lo + step]
        if vr > 0:
            ep.recv(piece, absolute(vr - 1, root, n))
        if vr < n - 1:
            reqs.append(ep.isend(piece, absolute(vr + 1, root, n)))
    ep.waitall(reqs)


def direct(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """Root puts a chunk into shared memory, every other rank copies it out
    (ep.exchange with a root), one round per exchange buffer."""
    me = ep.rank
    for lo, hi in chunks(ep.chunk_bytes(buf), buf.size, buf.itemsize):
        piece = buf[lo:hi]
        v = ep.exchange(piece, root)
        if me != root:
            np.copyto(piece, v[root])


def one_copy(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """Every other rank reads root's ``buf`` straight into its own, all but
    a last share of about S/N that root writes into it meanwhile (one copy
    either way; the N ranks copy about (N-1)/N*S each, where readers alone
    would copy S while root waits)."""
    n, me = ep.size, ep.rank
    rem = ep.expose(buf)
    s = buf.view(np.uint8)
    k = read_share(buf.nbytes, n)
    copy = streaming.copier(buf, n)  # where a buffer is mapped
    if me != root:
        rem.read(root, 0, s[:k], copy)
    else:
        for i in range(1, n):
            rem.write((root + i) % n, k, s[k:], copy)
    rem.finish(sent=(n - 1) * k if me == root else 0, received=0 if me == root else buf.nbytes - k)


def read_share(nbytes: int, n: int) -> int:
    """The leading bytes of a broadcast of ``nbytes`` that every non-root
    reads (the rest root writes): (N-1)/N of them, to a whole page; all of
    them below selection.WRITE_FROM_BYTES."""
    if nbytes < selection.WRITE_FROM_BYTES:
        return nbytes
    return min(nbytes, -(-(nbytes * (n - 1) // n) // 4096) * 4096)



def _read_root(ep: Endpoint, rem, buf: np.ndarray, root: int) -> None:
    """Every non-root reads root's published ``buf`` (``rem``) whole."""
    n, me = ep.size, ep.rank
    if me != root:
        rem.read(root, 0, buf, streaming.copier(buf, n))
    rem.finish(sent=(n - 1) * buf.nbytes if me == root else 0)


def one_copy_or_staged(ep: Endpoint, buf: np.ndarray, root: int) -> None:
    """``one_copy`` from root's mapping where root's ``buf`` is a
    communicator-allocated array; else the staged choice (one_copy.py's
    ``regions_or_staged``, on root's buffer alone)."""
    regions_or_staged(ep, buf if ep.rank == root else None,
                      lambda rem: _read_root(ep, rem, buf, root),
                      lambda: FAMILY.run_chosen(buf.nbytes, ep, buf, root, shared=True),
                      only=root)


def alone(buf: np.ndarray, root: int) -> None:
    """One rank: root's buf is already where it goes."""


FAMILY = Family("broadcast", (
    Algorithm("binomial", binomial),
    Algorithm("scatter_allgather", scatter_allgather),
    Algorithm("chain", chain),
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
