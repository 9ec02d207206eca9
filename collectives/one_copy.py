"""What the one-copy algorithms share (``one_copy`` and ``one_copy_or_staged``
in each call's table; their records say ``needs_one_copy``).

Each rank exposes its source where it lies (``Endpoint.expose``; on shm,
transports/shm/one_copy.py) and every peer copies what it needs straight
into its destination: one copy per byte where the staged algorithms make
two.  They are offered only where the transport declares ``one_copy``
(``Algorithm.offered``); the selection table takes them from the sizes docs/performance.md
measured.  A reduction reads the peers' pieces a chunk at a time into a
cache-sized scratch buffer (or from a mapping of the peer's memory, where
the transport has one) and reduces them in rank order in one pass.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import selection, streaming
from .ops import in_rank_order

CHUNK_BYTES = 256 * 1024  # of each peer's piece per step of a reduction


def regions_or_staged(ep, src: np.ndarray | None, in_regions: Callable, staged: Callable,
                      only: int | None = None, plain: Callable | None = None,
                      huge: Callable | None = None) -> None:
    """The ``one_copy_or_staged`` algorithms: publish ``src``; where every rank's source
    (``only``: rank ``only``'s alone) lies in a communicator-allocated array
    (``Remote.in_regions``: every rank answers alike), ``in_regions(rem)``
    reads the peers' straight from this rank's mappings; else, where
    ``plain`` is given and every rank published a source, ``plain(rem)``
    reads them where they lie (process_vm_readv: one copy), and so does
    ``huge(rem)`` where huge pages back at least selection.HUGE_SHARE of every rank's
    source (``Remote.huge``: process_vm_readv reads those about three times
    faster); else, once every peer has seen the answer too, ``staged()``
    (the staged default), after a publication that moved nothing."""
    rem = ep.expose(src, huge=huge is not None and src is not None)
    if rem.in_regions(src, only):
        in_regions(rem)
        return
    if only is None and rem.published(src):
        if plain is None and huge is not None and rem.huge(selection.HUGE_SHARE):
            plain = huge
        if plain is not None:
            plain(rem)
            return
    rem.finish()
    staged()


def gathered(ep, x: np.ndarray | None, out: np.ndarray, nb: int, off: int, own: bool,
             only: int = -1) -> bool:
    """Block p of ``out`` (``nb`` bytes) = bytes [off, off + nb) of every
    peer p's ``x``, and this rank's (``own``) = the same bytes of its own
    ``x`` (``only``, a scatter's root: ``out`` = those bytes of its ``x``
    alone), in one compiled call where the transport has one
    (``Endpoint.gather_blocks``; the own block streamed as
    ``streaming.copier`` would); False, having done nothing, elsewhere."""
    kind = 0 if not own else 2 if streaming.copier(out, ep.size) is streaming.stream_copy else 1
    return ep.gather_blocks(x, out, nb, off, off, kind, only)


def read_all(rem, ep, blocks: Callable[[int], tuple[int, np.ndarray]],
             copy: Callable = np.copyto) -> None:
    """Read from every peer, nearest ranks to the right first (so that not
    every rank starts at rank 0): ``blocks(p) -> (byte offset in p's source,
    destination)``; ``copy``: how a mapped source is copied (``Remote.read``)."""
    n, r = ep.size, ep.rank
    for i in range(1, n):
        p = (r + i) % n
        off, dest = blocks(p)
        rem.read(p, off, dest, copy)


def reduce_piece(ep, src: np.ndarray, bounds, out: np.ndarray, op, rem=None) -> None:
    """The first phase of all_reduce and reduce: ``out`` = piece ``rank``
    (``bounds``: ``block_bounds``) of every rank's ``src``, reduced in rank
    order, the peers' read where they lie; returns once every peer has read
    its piece of this rank's ``src``.  ``rem``: ``src``'s publication, where
    it is made already (``regions_or_staged``)."""
    r = ep.rank
    rem = ep.expose(src) if rem is None else rem
    reduce_pieces(rem, ep, src[bounds[r]:bounds[r + 1]], bounds[r], out, op)
    rem.finish(sent=src.nbytes - out.nbytes)


def reduce_pieces(rem, ep, own: np.ndarray, start: int, out: np.ndarray, op) -> None:
    """``out`` = the rank-order reduction of elements ``[start, start +
    out.size)`` of every rank's exposed source (this rank's: ``own``, the
    same elements here), a CHUNK_BYTES piece of each peer at a time."""
    n, r, isz = ep.size, ep.rank, out.itemsize
    step = max(1, CHUNK_BYTES // isz)
    span = min(out.nbytes, step * isz)  # one peer's piece of a step
    scratch = np.empty(span * (n - 1), np.uint8)
    overlap = r >= 2 and np.may_share_memory(own, out)  # in place: keep own until added
    for lo in range(0, out.size, step):
        hi = min(out.size, lo + step)
        nb = (hi - lo) * isz
        parts, j = [], 0
        for p in range(n):
            if p == r:
                parts.append(own[lo:hi].copy() if overlap else own[lo:hi])
                continue
            s = scratch[j * span:j * span + nb]
            parts.append(rem.piece(p, (start + lo) * isz, nb, s).view(out.dtype))
            j += 1
        in_rank_order(parts, op, out[lo:hi])
