"""All-to-all: rank r's ``out`` block j is rank j's ``x`` block r.

Bytes on the wire per rank, S = x.nbytes (N blocks; docs/algorithms.md):
  pairwise  (N-1)/N * S sent and received, in N-1 steps
  linear    the same bytes, all N-1 exchanges posted at once
  direct    the same bytes, one round per exchange buffer
  one_copy  the same bytes: each rank reads its block of every peer's x
            where it lies (one copy; one_copy.py)
  one_copy_or_staged  one_copy's where it pays (communicator-allocated x,
            N > 2, or sources on huge pages), else the staged choice's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import selection, streaming
from .algorithm import Algorithm, Family
from .one_copy import gathered, read_all, regions_or_staged
from .ranks import chunks, peer_index, round_bytes


def _prepare(ep: Endpoint, x: np.ndarray, out: np.ndarray, whole: bool = False) -> np.ndarray:
    """``x``, copied where ``out`` overlaps it (in place, the peers' blocks
    only: ``_kept``; ``whole``: all of it), once its own block is in ``out``."""
    if out is x and not whole:
        return _kept(ep, x)
    if np.may_share_memory(out, x):
        x = x.copy()
    _own(ep, x, out)
    return x


def _kept(ep: Endpoint, x: np.ndarray) -> np.ndarray:
    """In place (``out is x``): the blocks that go to the peers, copied out of
    ``x`` before it is overwritten, at their places in an array of x's size;
    this rank's own block stays where it is in ``x`` (it is not copied, and
    that block of the array returned is never read)."""
    m, r = x.size // ep.size, ep.rank
    keep = np.empty_like(x)
    np.copyto(keep[:r * m], x[:r * m])
    np.copyto(keep[(r + 1) * m:], x[(r + 1) * m:])
    return keep


def _own(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    m, r = out.size // ep.size, ep.rank
    streaming.copier(out, ep.size)(out[r * m:(r + 1) * m], x[r * m:(r + 1) * m])


def pairwise(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Step i exchanges with rank + i and rank - i (one partner each way per step)."""
    n, r = ep.size, ep.rank
    m = out.size // n
    x = _prepare(ep, x, out)
    for i in range(1, n):
        dst, src = (r + i) % n, (r - i) % n
        ep.sendrecv(x[dst * m:(dst + 1) * m], dst, out[src * m:(src + 1) * m], src)


def linear(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    n, r = ep.size, ep.rank
    m = out.size // n
    x = _prepare(ep, x, out)
    reqs = [ep.irecv(out[s * m:(s + 1) * m], s) for s in range(n) if s != r]
    reqs += [ep.isend(x[d * m:(d + 1) * m], d) for d in range(n) if d != r]
    ep.waitall(reqs)


def direct(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Each round, every rank puts a chunk of each of the blocks it sends into
    shared memory (ep.exchange) and copies out the chunks addressed to it
    (at N = 2 at most ranks.ROUND_BYTES a round).  Chunk k is copied in
    before any of it is written, so ``out`` may be ``x``."""
    n, r = ep.size, ep.rank
    m = out.size // n
    for lo, hi in chunks(round_bytes(ep, x), m, x.itemsize, parts=max(1, n - 1)):
        c = hi - lo
        each = (n - 1) * c * x.itemsize  # a peer reads one piece
        v = ep.exchange([x[i * m + lo:i * m + hi] for i in range(n) if i != r] or [x[:0]],
                        sent=each, recv=each)
        for p in range(n):
            if p != r:
                j = peer_index(r, p) * c
                np.copyto(out[p * m + lo:p * m + hi], v[p][j:j + c])
        if out is not x:
            np.copyto(out[r * m + lo:r * m + hi], x[r * m + lo:r * m + hi])


def one_copy(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """Each rank reads block ``rank`` of every peer's ``x`` straight into
    ``out``, then copies its own (in place, x is copied first: the peers
    read it while out fills); in one compiled call where the transport has
    one (one_copy.py's ``gathered``)."""
    own = out is not x
    if not own:
        x = _kept(ep, x)
    elif np.may_share_memory(out, x):
        x = x.copy()
    b = out.nbytes // ep.size
    if not gathered(ep, x, out, b, ep.rank * b, own):
        _one_copy(ep, ep.expose(x), x, out, own)


def _one_copy(ep: Endpoint, rem, x: np.ndarray, out: np.ndarray, own: bool = True) -> None:
    """``one_copy`` once ``x`` (apart from ``out``) is published (``rem``):
    the reads first (N = 2: 0-13 % sooner than the own block first,
    performance.md), then the own block (``own``: not where it is in
    ``out`` already)."""
    n, r = ep.size, ep.rank
    m = out.size // n
    b = m * out.itemsize
    read_all(rem, ep, lambda p: (r * b, out[p * m:(p + 1) * m]), streaming.copier(out, n))
    if own:
        _own(ep, x, out)
    rem.finish(sent=(n - 1) * b)


def one_copy_or_staged(ep: Endpoint, x: np.ndarray, out: np.ndarray) -> None:
    """``one_copy`` from the peers' mappings where every rank's ``x`` is a
    communicator-allocated array that ``out`` does not overlap (one that it
    does is overwritten while the peers read it); else, from 3 ranks and
    where no rank's ``out`` overlaps its ``x``, ``one_copy`` from the same
    publication with process_vm_readv (N = 4: 0.92-1.06x MPICH at 4-8 MiB
    against the staged ``direct``'s 0.84-0.90x); else the staged choice
    (one_copy.py's ``regions_or_staged``: the first publication decides).
    At N = 2 ``direct``'s half-megabyte rounds beat process_vm_readv (4 and
    8 MiB: 175 and 495 us against 227 and 539, docs/performance.md) but
    where huge pages back at least selection.HUGE_SHARE of every rank's
    ``x``: such sources read about three times faster (4 MiB: 140 us
    against 175, performance.md, "Huge pages")."""
    apart = not np.may_share_memory(out, x)

    def from_regions(rem):
        _one_copy(ep, rem, x, out)
    cma = ep.size > 2 or ep.size * x.nbytes >= selection.ALL_TO_ALL_READ_TOTAL_BYTES
    regions_or_staged(ep, x if apart else None, from_regions,
                      lambda: FAMILY.run_chosen(x.nbytes, ep, x, out, shared=True),
                      plain=from_regions if cma else None, huge=from_regions)


def alone(x: np.ndarray, out: np.ndarray) -> None:
    if out is not x:
        np.copyto(out, x)


FAMILY = Family("all_to_all", (
    Algorithm("pairwise", pairwise),
    Algorithm("linear", linear),
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
