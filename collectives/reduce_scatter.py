"""Reduce-scatter algorithms: rank r's ``out`` is block r of the reduction of all ``x``.

Bytes on the wire per rank, S = x.nbytes (N blocks; docs/algorithms.md):
  ring               (N-1)/N * S sent and received, in N-1 steps
  recursive_halving  (p2-1)/p2 * S in log2(p2) steps, plus S for the ranks
                     of the fold (and their block back)
  recursive_doubling log2(p2) * S: all_reduce's recursive doubling of the
                     whole of x, then this rank's block (plus S for the
                     ranks of the fold)
  direct             (N-1)/N * S sent and received, one round per exchange buffer
  one_copy           the same bytes: each rank reads block ``rank`` of every
                     peer's x where it lies and reduces it (one_copy.py)
  one_copy_or_staged one_copy's where every rank's x is communicator-allocated
                     (read from the peers' mappings), else direct's
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint, schedule

from . import all_reduce as _all_reduce
from . import plans
from . import ring as _ring
from .algorithm import Algorithm, Family
from .halving import halving
from .one_copy import reduce_pieces, regions_or_staged
from .ops import in_rank_order
from .ranks import Fold, chunks, peer_index, round_bytes


def ring(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    m = out.size
    _ring.reduce_scatter_into(ep, x, [i * m for i in range(ep.size + 1)], op, out)


_HALVING: dict = {}  # (rank, size) -> recursive_halving as compiled steps


def halving_plan(rank: int, size: int) -> schedule.Plan:
    """recursive_halving's messages and reductions at ``rank`` of ``size``
    as the transports' compiled steps take them (``Endpoint.steps``), in
    blocks, on a copy of x: the fold, the halving (``halving.halving``'s
    ranges), the fold back; this rank's block is the result."""
    plan = _HALVING.get((rank, size))
    if plan is None:
        f, r, steps = Fold(rank, size), rank, [(schedule.COPY, rank, rank, 0, 0, 0, size)]
        if f.extra:
            steps += [(schedule.SEND, r + 1, r + 1, 0, size, 0, 0),
                      (schedule.RECV, r + 1, r + 1, 0, 0, r, 1)]
        else:
            if f.helper:
                steps.append((schedule.RECV_REDUCE, r - 1, r - 1, 0, 0, 0, size))

            def start(g: int) -> int:  # first block of group g
                return 2 * g if g <= f.rem else g + f.rem
            lo, hi, mask = 0, f.p2, f.p2 >> 1
            while mask:
                peer, mid = f.real(f.new ^ mask), (lo + hi) // 2
                (klo, khi), (glo, ghi) = (((mid, hi), (lo, mid)) if f.new & mask
                                          else ((lo, mid), (mid, hi)))
                steps.append((schedule.SWAP_REDUCE, peer, peer, start(glo), start(ghi) - start(glo),
                              start(klo), start(khi) - start(klo)))
                lo, hi = klo, khi
                mask >>= 1
            if f.helper:
                steps.append((schedule.SEND, r - 1, r - 1, r - 1, 1, 0, 0))
        steps.append((schedule.OUT, r, r, 0, 0, r, 1))
        plan = _HALVING[rank, size] = schedule.Plan(steps)
    return plan


def recursive_halving(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    """Halve the range of blocks each round, exchanging with partner rank ^ mask.

    In a non-power-of-two world the new rank g of the fold stands for the
    contiguous blocks of the world ranks it plays (two for a helper), so the
    halving works on p2 groups of blocks.  In one compiled call where the
    transport has one (mpi, hier: ``Endpoint.steps``).
    """
    n, m, r = ep.size, out.size, ep.rank
    acc = np.empty_like(x)
    if plans.compiled(ep, halving_plan(r, n), x, acc, op, m, out):
        return
    f = Fold(r, n)
    if f.extra:
        ep.send(x, r + 1)
        ep.recv(out, r + 1)
        return
    np.copyto(acc, x)
    if f.helper:
        ep.recv_reduce(acc, r - 1, op)

    def start(g: int) -> int:  # first element of group g
        return (2 * g if g <= f.rem else g + f.rem) * m

    halving(ep, f, acc, start, op)
    if f.helper:
        ep.send(acc[(r - 1) * m:r * m], r - 1)
    np.copyto(out, acc[r * m:(r + 1) * m])


def recursive_doubling(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    """All-reduce of the whole of x by recursive doubling, then this rank's
    block: more bytes than halving's, but its first round is with rank ^ 1,
    its last with rank ^ p2/2, where halving's go the other way: on hosts of
    consecutive ranks joined by a network, the first is the one on shared
    memory (hosts.md, "Small messages")."""
    acc = np.empty_like(x)
    m, r = out.size, ep.rank
    if plans.compiled(ep, doubling_plan(r, ep.size), x, acc, op, m, out):
        return
    _all_reduce.recursive_doubling(ep, x, acc, op)
    np.copyto(out, acc[r * m:(r + 1) * m])


_DOUBLING: dict = {}  # (rank, size) -> recursive_doubling as compiled steps


def doubling_plan(rank: int, size: int) -> schedule.Plan:
    """recursive_doubling's steps at ``rank`` of ``size``, in blocks:
    all_reduce's (``all_reduce.doubling_plan``) on the whole of x, then this
    rank's block out."""
    plan = _DOUBLING.get((rank, size))
    if plan is None:
        whole = _all_reduce.doubling_plan(rank, size).steps
        steps = [(k, to, fro, so * size, sl * size, ro * size, rl * size)
                 for k, to, fro, so, sl, ro, rl in whole]
        steps.append((schedule.OUT, rank, rank, 0, 0, rank, 1))
        plan = _DOUBLING[rank, size] = schedule.Plan(steps)
    return plan


def direct(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    """Each round, every rank puts a chunk of each of the other ranks' blocks
    into shared memory (ep.exchange) and reduces its own block's chunks, in
    rank order (its own chunk straight from ``x``)."""
    n, m, r = ep.size, out.size, ep.rank
    in_place = np.may_share_memory(x, out)
    for lo, hi in chunks(round_bytes(ep, x), m, x.itemsize, parts=n - 1):
        c = hi - lo
        each = (n - 1) * c * x.itemsize  # a peer reads one piece
        v = ep.exchange([x[i * m + lo:i * m + hi] for i in range(n) if i != r],
                        sent=each, recv=each)
        own = x[r * m + lo:r * m + hi]
        if in_place:  # out is x's block r: keep this rank's chunk until it is added
            own = own.copy()
        j = [peer_index(r, p) * c for p in range(n)]  # where p staged r's piece
        in_rank_order([own if p == r else v[p][j[p]:j[p] + c] for p in range(n)], op,
                      out[lo:hi])


def one_copy(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    """Each rank reads its block of every peer's ``x`` and reduces the N
    blocks in rank order into ``out``, a chunk at a time."""
    _one_copy(ep, ep.expose(x), x, out, op)


def _one_copy(ep: Endpoint, rem, x: np.ndarray, out: np.ndarray, op) -> None:
    """``one_copy`` once every rank has exposed its ``x`` (``rem``)."""
    n, m, r = ep.size, out.size, ep.rank
    reduce_pieces(rem, ep, x[r * m:(r + 1) * m], r * m, out, op)
    rem.finish(sent=(n - 1) * out.nbytes)


def one_copy_or_staged(ep: Endpoint, x: np.ndarray, out: np.ndarray, op) -> None:
    """``one_copy`` where every rank's ``x`` is a communicator-allocated array
    (the peers reduce their blocks straight from their mappings of it), else
    the staged default (as ``all_reduce.one_copy_or_staged``, one_copy.py)."""
    regions_or_staged(ep, x, lambda rem: _one_copy(ep, rem, x, out, op),
                      lambda: FAMILY.run_chosen(x.nbytes, ep, x, out, op, shared=True))


def alone(x: np.ndarray, out: np.ndarray, op) -> None:
    np.copyto(out, x)


FAMILY = Family("reduce_scatter", (
    Algorithm("ring", ring),
    Algorithm("recursive_halving", recursive_halving),
    Algorithm("recursive_doubling", recursive_doubling),
    Algorithm("direct", direct),
    Algorithm("one_copy", one_copy, needs_one_copy=True),
    Algorithm("one_copy_or_staged", one_copy_or_staged, needs_one_copy=True),
), alone)
