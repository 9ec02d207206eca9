"""Gather and scatter between root's N blocks and every rank's one block.

Bytes on the wire, S = one block (docs/algorithms.md):
  linear    root receives (scatter: sends) (N-1) * S, one message per rank
  binomial  the same total at root in ceil(log2 N) messages; an inner
            rank forwards its subtree's blocks
  one_copy  the linear bytes: root reads every block where it lies
            (scatter: every rank reads its block of root's x; one_copy.py)

In place at the root (gather: ``x`` is root's block of ``out``; scatter:
``out`` is root's block of ``x``), root's own block is not copied.
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from . import selection, streaming
from .arrays import address, empty
from .one_copy import gathered
from .algorithm import Algorithm, Family
from .ranks import absolute, rel


def _subtree(vr: int, n: int) -> int:
    """Blocks in the binomial subtree rooted at relative rank vr."""
    return n if vr == 0 else min(vr & -vr, n - vr)


def _is_block(whole, i: int, part) -> bool:
    """Whether ``part`` is block ``i`` of ``whole`` (in place at the root)."""
    return whole is not None and address(whole) + i * part.nbytes == address(part)


def _rotate(out: np.ndarray, tmp: np.ndarray, root: int, m: int, n: int,
            to_rank_order: bool) -> None:
    """Relative block v <-> rank (v + root) mod N."""
    k = (n - root) * m
    if to_rank_order:
        np.copyto(out[root * m:], tmp[:k])
        np.copyto(out[:root * m], tmp[k:])
    else:
        np.copyto(tmp[:k], out[root * m:])
        np.copyto(tmp[k:], out[:root * m])


def gather_linear(ep: Endpoint, x: np.ndarray, out, root: int) -> None:
    n, m = ep.size, x.size
    if ep.rank != root:
        ep.send(x, root)
        return
    if not _is_block(out, root, x):
        np.copyto(out[root * m:(root + 1) * m], x)
    ep.waitall([ep.irecv(out[s * m:(s + 1) * m], s) for s in range(n) if s != root])


def gather_binomial(ep: Endpoint, x: np.ndarray, out, root: int) -> None:
    n, m = ep.size, x.size
    vr = rel(ep.rank, root, n)
    if vr & 1:  # a leaf sends its block as it is
        ep.send(x, absolute(vr - 1, root, n))
        return
    tmp = out if (vr == 0 and root == 0) else empty(_subtree(vr, n) * m, x)
    if tmp is not out or not _is_block(out, 0, x):
        np.copyto(tmp[:m], x)
    mask = 1
    while mask < n:
        if vr & mask:
            ep.send(tmp[:min(mask, n - vr) * m], absolute(vr - mask, root, n))
            return
        child = vr + mask
        if child < n:
            c = min(mask, n - child)
            ep.recv(tmp[mask * m:(mask + c) * m], absolute(child, root, n))
        mask <<= 1
    if tmp is not out:
        _rotate(out, tmp, root, m, n, to_rank_order=True)


def scatter_linear(ep: Endpoint, x, out: np.ndarray, root: int) -> None:
    n, m = ep.size, out.size
    if ep.rank != root:
        ep.recv(out, root)
        return
    reqs = [ep.isend(x[d * m:(d + 1) * m], d) for d in range(n) if d != root]
    if not _is_block(x, root, out):
        np.copyto(out, x[root * m:(root + 1) * m])
    ep.waitall(reqs)


def scatter_binomial(ep: Endpoint, x, out: np.ndarray, root: int) -> None:
    n, m = ep.size, out.size
    vr = rel(ep.rank, root, n)
    if vr == 0:
        tmp = x
        if root != 0:
            tmp = np.empty_like(x)
            _rotate(x, tmp, root, m, n, to_rank_order=False)
    else:
        sz = _subtree(vr, n)
        tmp = out if sz == 1 else empty(sz * m, out)
    mask = 1
    while mask < n:
        if vr & mask:
            ep.recv(tmp[:_subtree(vr, n) * m], absolute(vr - mask, root, n))
            break
        mask <<= 1
    mask >>= 1
    reqs = []
    while mask > 0:
        child = vr + mask
        if child < n:
            c = min(mask, n - child)
            reqs.append(ep.isend(tmp[mask * m:(mask + c) * m], absolute(child, root, n)))
        mask >>= 1
    ep.waitall(reqs)
    if tmp is not out and not _is_block(x, root, out):
        np.copyto(out, tmp[:m])


def gather_one_copy(ep: Endpoint, x: np.ndarray, out, root: int) -> None:
    """Every other rank writes its ``x`` straight into its block of root's
    ``out`` while root copies its own: one copy per block, the N blocks
    copied at once (root reading them all would copy N-1 of them alone).
    At N = 2, from blocks of selection.SPLIT_BLOCK_BYTES, root then reads the last
    third of its peer's block itself (``_split``) while the peer writes the
    rest: its own copy alone is shorter than the peer's write."""
    n, m, me = ep.size, x.size, ep.rank
    if n == 2 and x.nbytes >= selection.SPLIT_BLOCK_BYTES:
        return _split(ep, x, out, root)
    rem = ep.expose(out if me == root else None)
    if me == root and not _is_block(out, root, x):
        np.copyto(out[root * m:(root + 1) * m], x)
    if me != root:
        rem.write(root, me * x.nbytes, x, streaming.copier(x, n))
    rem.finish(received=(n - 1) * x.nbytes if me == root else 0)


def _split(ep: Endpoint, x: np.ndarray, out, root: int) -> None:
    """``gather_one_copy`` at N = 2 with the copy of the peer's block shared:
    both publish (root its ``out``, the peer its ``x``); the peer writes the
    block but its last third (from a 4 KiB boundary) into root's ``out``,
    root copies its own block and then reads that third.  Each counts what
    it copies, and in ``done`` what the other copied of its array."""
    m, me, isz = x.size, ep.rank, x.itemsize
    peer = 1 - me
    tail, page = m // 3, max(1, 4096 // isz)  # the elements root reads
    if tail > page:
        tail -= tail % page  # from a 4 KiB boundary of the block
    head = m - tail
    rem = ep.expose(out if me == root else x)
    if me == root:
        if not _is_block(out, root, x):
            np.copyto(out[root * m:(root + 1) * m], x)
        rem.read(peer, head * isz, out[peer * m + head:(peer + 1) * m])
        rem.finish(received=head * isz)
    else:
        rem.write(root, me * x.nbytes, x[:head], streaming.copier(x, 2))
        rem.finish(sent=tail * isz)


def scatter_one_copy(ep: Endpoint, x, out: np.ndarray, root: int) -> None:
    """Every other rank reads its block of root's ``x`` straight into ``out``
    (root copies its own while they read); in one compiled call where the
    transport has one (one_copy.py's ``gathered``)."""
    n, me = ep.size, ep.rank
    if gathered(ep, x if me == root else None, out, out.nbytes, me * out.nbytes,
                me == root and not _is_block(x, root, out), root):
        return
    rem = ep.expose(x if me == root else None)
    if me == root and not _is_block(x, root, out):
        np.copyto(out, x[root * out.size:(root + 1) * out.size])
    if me != root:
        rem.read(root, me * out.nbytes, out, streaming.copier(out, n))
    rem.finish(sent=(n - 1) * out.nbytes if me == root else 0)


def gather_alone(x: np.ndarray, out, root: int) -> None:
    if not _is_block(out, 0, x):
        np.copyto(out, x)


def scatter_alone(x, out: np.ndarray, root: int) -> None:
    if not _is_block(x, 0, out):
        np.copyto(out, x)


GATHER = Family("gather", (
    Algorithm("binomial", gather_binomial),
    Algorithm("linear", gather_linear),
    Algorithm("one_copy", gather_one_copy, needs_one_copy=True),
), gather_alone)
SCATTER = Family("scatter", (
    Algorithm("binomial", scatter_binomial),
    Algorithm("linear", scatter_linear),
    Algorithm("one_copy", scatter_one_copy, needs_one_copy=True),
), scatter_alone)
