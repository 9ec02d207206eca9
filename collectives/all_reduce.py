"""All-reduce algorithms: ``run(ep, src, out, op)`` leaves the reduction of
every rank's ``src`` in ``out`` (flat; ``src`` is ``out`` in place).

Bytes on the wire per rank, S = out.nbytes, N ranks, p2 the largest power of
two <= N (see docs/algorithms.md):
  direct              (N-1) * S, in one round per exchange buffer
  two_shot            S + (N-2) * P, P the bytes of the pieces this rank
                      reduces (about S/N): about 2(N-1)/N * S, in K+1 rounds
                      for K chunks of at most an exchange buffer; only where
                      exchange() goes through shared memory
  ring                2(N-1)/N * S
  recursive_doubling  log2(p2) * S, plus S for each rank in the fold
  halving_doubling    2(p2-1)/p2 * S, plus S for each rank in the fold
  one_copy            2(N-1)/N * S: each rank reads its piece of every peer's
                      input where it lies and reduces it, then reads the
                      peers' reduced pieces (one copy each way; one_copy.py)
  one_copy_or_staged  one_copy's where every rank's input is communicator-
                      allocated (read from the peers' mappings), else the
                      staged choice's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint, schedule

from . import plans
from . import ring as _ring
from . import streaming
from .algorithm import Algorithm, Family
from .halving import halving
from .one_copy import read_all, reduce_piece, regions_or_staged
from .ops import in_rank_order
from .ranks import Fold, block_bounds, chunks, peer_index, round_bytes


def _start(src: np.ndarray, buf: np.ndarray) -> None:
    """The algorithms that reduce in place on ``buf`` start from ``src`` there."""
    if src is not buf:
        np.copyto(buf, src)


def ring(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Chunked ring: reduce-scatter pass, then all-gather pass (Patarasuk & Yuan 2009)."""
    bounds = block_bounds(buf.size, ep.size)
    if ep.size > 1 and type(src) is np.ndarray and not np.may_share_memory(src, buf):
        owned = _ring.reduce_scatter(ep, buf, bounds, op, src=src)  # src is never copied
    else:
        _start(src, buf)
        owned = _ring.reduce_scatter(ep, buf, bounds, op)
    _ring.all_gather(ep, buf, bounds, shift=owned - ep.rank)


def direct(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Every rank's vector reaches every rank (ep.exchange: one copy into shared
    memory, direct reads), a buffer-sized chunk per round, and each rank reduces
    all N in rank order, so every rank gets the same bits."""
    for lo, hi in chunks(round_bytes(ep, buf), buf.size, buf.itemsize):
        one_round(ep, src[lo:hi], buf[lo:hi], op)


def one_round(ep: Endpoint, src: np.ndarray, out: np.ndarray, op) -> None:
    """One round of ``direct``: every rank's ``src`` (at most one exchange
    buffer) to every rank, reduced in rank order into the flat ``out``.  The
    small-call path (collectives/small.py) runs this alone."""
    in_rank_order(ep.exchange(src), op, out)


def two_shot(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Reduce-scatter then all-gather through shared memory, pipelined so that
    each round is one exchange: in round k a rank stages chunk k's N-1 pieces
    that its peers reduce, and its own reduced piece of chunk k-1 (reduced in
    rank order from the pieces its peers staged in round k-1, straight into
    its exchange buffer); after the round every rank copies chunk k-1's
    reduced pieces into ``buf``.  A rank reduces 1/N of the vector where
    ``direct`` reduces all of it, so every rank does N times less arithmetic."""
    n, r, total = ep.size, ep.rank, buf.size
    align = max(1, 64 // buf.itemsize)
    c = -(-total // n)
    c = -(-c // align) * align  # a slot: the most one rank reduces per round
    room = ep.chunk_bytes(buf)
    if room:
        c = min(c, max(align, room // (n * buf.itemsize) // align * align))
    rounds = -(-total // (n * c))
    res = (n - 1) * c  # the reduced piece's place in a stage; pieces before it

    def piece(k: int, i: int) -> tuple[int, int]:  # near-equal pieces of chunk k
        base = k * n * c
        q, rem = divmod(max(0, min(total, base + n * c) - base), n)
        lo = min(total, base + i * q + min(i, rem))
        return lo, lo + q + (i < rem)

    def slot(p: int) -> int:  # where rank p's stage holds this rank's piece
        return peer_index(r, p) * c

    def size(k: int, i: int) -> int:
        lo, hi = piece(k, i) if k >= 0 else (0, 0)
        return hi - lo

    prev = None  # the views of the previous round
    isz = buf.itemsize
    copy = streaming.copier(buf, n)
    for k in range(rounds + 1):
        mine = ep.stage(n * c, buf)
        if k < rounds:
            for i in range(n):
                if i != r:
                    lo, hi = piece(k, i)
                    j = peer_index(i, r) * c
                    np.copyto(mine[j:j + hi - lo], src[lo:hi])
        if prev is not None:
            lo, hi = piece(k - 1, r)
            m = hi - lo
            parts = [src[lo:hi] if p == r else prev[p][slot(p):slot(p) + m] for p in range(n)]
            in_rank_order(parts, op, mine[res:res + m])
            if k >= 2:
                _gather_pieces(buf, prev, piece, k - 2, n, res, copy)
        # bytes the peers take: their pieces of chunk k and this rank's reduced
        # piece of chunk k-1; and what this rank takes of theirs
        sent = sum(size(k, i) for i in range(n) if i != r) + (n - 1) * size(k - 1, r)
        recv = (n - 1) * size(k, r) + sum(size(k - 1, i) for i in range(n) if i != r)
        prev = ep.exchange(mine, sent=sent * isz, recv=recv * isz)
    _gather_pieces(buf, prev, piece, rounds - 1, n, res, copy)


def _gather_pieces(buf, views, piece, k: int, n: int, res: int, copy) -> None:
    """Copy chunk k's reduced pieces, each from its rank's stage, into ``buf``
    (streamed where the outputs are too large for the caches: streaming.py)."""
    for p in range(n):
        lo, hi = piece(k, p)
        if hi > lo:
            copy(buf[lo:hi], views[p][res:res + hi - lo])


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


_PLANS: dict = {}  # (rank, size) -> recursive doubling's steps (doubling_plan)


def doubling_plan(rank: int, size: int) -> schedule.Plan:
    """recursive_doubling's messages and reductions at ``rank`` of ``size``,
    as the transports' compiled steps take them (``Endpoint.steps``)."""
    plan = _PLANS.get((rank, size))
    if plan is None:
        whole = (0, 1, 0, 1)  # the whole buffer, sent and received (its unit)
        f, steps = Fold(rank, size), [(schedule.COPY, rank, rank, *whole)]
        if f.extra:
            steps += [(schedule.SEND, rank + 1, rank + 1, *whole),
                      (schedule.RECV, rank + 1, rank + 1, *whole)]
        else:
            if f.helper:
                steps.append((schedule.RECV_REDUCE, rank - 1, rank - 1, *whole))
            mask = 1
            while mask < f.p2:
                peer = f.real(f.new ^ mask)
                steps.append((schedule.SWAP_REDUCE, peer, peer, *whole))
                mask <<= 1
            if f.helper:
                steps.append((schedule.SEND, rank - 1, rank - 1, *whole))
        plan = _PLANS[rank, size] = schedule.Plan(steps)
    return plan


def recursive_doubling(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """log2(p2) rounds of whole-vector exchange with partner rank ^ mask:
    in one compiled call where the transport has one (mpi, hier: its
    messages and the kernel's reductions, ``Endpoint.steps``), else here."""
    if plans.compiled(ep, doubling_plan(ep.rank, ep.size), src, buf, op):
        return
    _start(src, buf)
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


def halving_doubling(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Rabenseifner: reduce-scatter by recursive halving, all-gather by doubling."""
    _start(src, buf)
    f = Fold(ep.rank, ep.size)
    _fold_in(ep, f, buf, op)
    if not f.extra:
        b = block_bounds(buf.size, f.p2)
        lo, hi = halving(ep, f, buf, b.__getitem__, op)
        mask = 1
        while mask < f.p2:
            peer = f.real(f.new ^ mask)
            plo, phi = (lo - mask, lo) if f.new & mask else (hi, hi + mask)
            ep.sendrecv(buf[b[lo]:b[hi]], peer, buf[b[plo]:b[phi]], peer)
            lo, hi = min(lo, plo), max(hi, phi)
            mask <<= 1
    _fold_out(ep, f, buf)


def one_copy(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Reduce-scatter then all-gather, each byte read once from where it
    lies: rank r reads piece r of every peer's input and reduces the N
    pieces in rank order into its piece of ``buf``, then reads the peers'
    reduced pieces out of their ``buf``.  In place, the pieces a rank writes
    are never those its peers read in the same phase."""
    _one_copy(ep, ep.expose(src), buf, op, src)


def _one_copy(ep: Endpoint, rem, buf: np.ndarray, op, src: np.ndarray) -> None:
    """``one_copy`` once every rank has exposed its ``src`` (``rem``)."""
    n, r, isz = ep.size, ep.rank, buf.itemsize
    b = block_bounds(buf.size, n)
    reduce_piece(ep, src, b, buf[b[r]:b[r + 1]], op, rem)
    rem = ep.expose(buf)
    read_all(rem, ep, lambda p: (b[p] * isz, buf[b[p]:b[p + 1]]))
    rem.finish(sent=(n - 1) * (b[r + 1] - b[r]) * isz)


def one_copy_or_staged(ep: Endpoint, src: np.ndarray, buf: np.ndarray, op) -> None:
    """``one_copy`` where every rank's input is a communicator-allocated
    array (``comm.empty``/``zeros``): the peers reduce it straight from their
    mappings of it, and gather the reduced pieces from the owners' ``buf``
    (from their mappings too where those are such arrays).  Otherwise the
    staged algorithm that the selection table takes without one-copy.  The first
    publication decides, and every rank decides alike (one_copy.py)."""
    regions_or_staged(ep, src, lambda rem: _one_copy(ep, rem, buf, op, src),
                      lambda: FAMILY.run_chosen(buf.nbytes, ep, src, buf, op, shared=True))


def alone(src: np.ndarray, out: np.ndarray, op) -> None:
    _start(src, out)


FAMILY = Family("all_reduce", (
    Algorithm("ring", ring),
    Algorithm("recursive_doubling", recursive_doubling),
    Algorithm("halving_doubling", halving_doubling),
    Algorithm("direct", direct),
    # written for exchange buffers that a peer reads only part of: where
    # exchange() is messages each round ships the whole stage to every peer,
    # about N times the ring's bytes
    Algorithm("two_shot", two_shot, needs_shared_exchange=True),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
