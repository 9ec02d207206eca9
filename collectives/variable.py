"""Variable-count collectives: each rank's block has its own length.

``all_gather_v``, ``gather_v``, ``scatter_v``, ``all_to_all_v`` and
``reduce_scatter_v`` (MPI's ``Allgatherv`` ... ``Reduce_scatter``).  Every
rank knows every count before anything moves (the caller's, or agreed by
the Communicator first), so that block ``i`` of a concatenation is
``buf[b[i]:b[i+1]]`` with ``b`` the same bounds everywhere (``bounds``);
but for ``all_to_all_v_learned`` and ``all_gather_v_learned``, whose first
round tells every rank the counts, and ``gather_v_learned``,
``all_gather_v_probed`` and ``all_to_all_v_probed``, whose receivers take
them from the sizes of the messages (``_probed``).
Arrays are flat (1-D) views, in elements.

Every message of these algorithms is sent, empty blocks included: a
receiver compares each message's size and call key with its own
(transports/base.py, ``call_bytes``), so a rank whose counts differ from
its peers' is caught by the first message it exchanges with them, never
waited for.

Bytes on the wire per rank, with S_i rank i's block, T = sum of S_i
(docs/algorithms.md, "Variable counts"):

  all_gather_v    ring, linear, one_copy: T - S_rank received, S_rank sent
                  to each peer ((N-1) S_rank)
  gather_v        linear, one_copy, learned: root receives T - S_root, rank i
                  sends S_i
  scatter_v       linear, one_copy: root sends T - S_root, rank i receives S_i
  all_to_all_v    pairwise, linear, one_copy, staged, one_copy_or_staged:
                  every block for another rank sent once; one_copy first
                  exchanges the bounds, 2(N+1) int64 to and from each peer,
                  staged and one_copy_or_staged in their first round (not
                  counted)
  reduce_scatter_v  ring: the blocks not its own that each step passes,
                  (N-1) blocks of the ring; linear: rank r sends every block
                  but its own to its owner and receives N-1 copies of block r,
                  reduced in rank order (numpy's bits)

A call whose counts are all equal runs its fixed-count twin (all_gather,
gather, ...; the Communicator does), with that call's choice of algorithm.
"""
from __future__ import annotations

import struct
from itertools import accumulate
from typing import Sequence

import numpy as np

from transports import CollectiveError, Endpoint

from . import ring as _ring
from . import selection, streaming
from .algorithm import Algorithm, Family
from .arrays import address, empty
from .one_copy import regions_or_staged
from .ranks import peer_index, round_bytes
from .ops import in_rank_order


def bounds(counts: Sequence[int], row: int) -> list[int]:
    """Element offsets of the blocks of ``counts`` rows of ``row`` elements:
    block i is ``[b[i], b[i+1])``."""
    return [0, *accumulate(c * row for c in counts)]


def _own(x, out, b, r: int, copy=np.copyto) -> None:
    """This rank's block of ``out`` from ``x`` (in place, it is there)."""
    mine = out[b[r]:b[r + 1]]
    if mine.size and address(mine) != address(x):
        copy(mine, x)


# -- all_gather_v: (ep, x, out, b) -------------------------------------------
def all_gather_v_ring(ep: Endpoint, x, out, b) -> None:
    """Ring: N-1 steps, each passing one block to the right; the first
    sends ``x`` itself, whose copy into ``out`` is made while it moves."""
    _ring.all_gather(ep, out, b, first=x)


def all_gather_v_linear(ep: Endpoint, x, out, b) -> None:
    """Every block posted to every peer at once: one round."""
    n, r = ep.size, ep.rank
    reqs = [ep.irecv(out[b[p]:b[p + 1]], p) for p in range(n) if p != r]
    reqs += [ep.isend(x, p) for p in range(n) if p != r]
    _own(x, out, b, r)
    ep.waitall(reqs)


def all_gather_v_one_copy(ep: Endpoint, x, out, b) -> None:
    """Every rank reads every peer's ``x`` where it lies into its block of
    ``out`` (one copy per byte), then copies its own."""
    n, r = ep.size, ep.rank
    rem = ep.expose(x)
    copy = streaming.copier(out, n)
    for i in range(1, n):
        p = (r + i) % n
        if b[p + 1] > b[p]:
            rem.read(p, 0, out[b[p]:b[p + 1]], copy)
    _own(x, out, b, r, copy)
    rem.finish(sent=(n - 1) * x.nbytes)


def all_gather_v_learned(ep: Endpoint, x, out, row: int, own_at: int, make, rest):
    """``all_gather``'s ``direct`` rounds for counts that each rank alone
    knows (``all_gather_v`` with counts None, where the exchange goes
    through shared memory): the first round carries, after this rank's
    first piece, its elements, the elements of a row (``row``), of its
    ``out`` (-1: none) and where ``x`` lies in its ``out`` (``own_at``, -1:
    apart), so that every rank learns every count in it, with no round of
    agreement first, and checks every rank's (``_heads``).  ``out``: the
    caller's flat result, or None, then ``make(elements)`` returns (the
    result, its flat view).  The rest of the blocks longer than a round's
    piece: read where they lie or in rounds, as ``rest(bytes of the longest
    block)`` says ("read", "regions", "staged": ``all_gather``'s table at
    that size).  Returns the result."""
    n, r = ep.size, ep.rank
    item, dt = x.itemsize, x.dtype
    step, nbytes = _gather_round(ep, x)
    apart = own_at < 0  # else x is its block of out already

    def stage(lo: int):
        """This rank's round from element ``lo`` of x: the stage and the
        piece's elements (none past the end of x: every rank's round has the
        same bytes)."""
        buf = ep.stage(nbytes, _BYTE)
        k = max(0, min(x.size, lo + step) - lo)
        if k:
            buf[:k * item].view(dt)[:] = x[lo:lo + k]
        return buf, k

    def place(views, lo: int, k: int) -> None:
        """Elements ``lo`` to ``lo + step`` of every peer's block, from its
        round, and this rank's ``k`` (while they are in the caches), into
        their places in ``out``; the peers' counted as received."""
        got = 0
        for p in peers:
            m = min(sizes[p], lo + step) - lo
            if m > 0:
                out[b[p] + lo:b[p] + lo + m] = views[p][:m * item].view(dt)
                got += m
        ep.recv_bytes += got * item
        if apart and k:
            out[b[r] + lo:b[r] + lo + k] = x[lo:lo + k]

    buf, k = stage(0)
    _HEAD.pack_into(buf, step * item, x.size, row, -1 if out is None else out.size, own_at)
    views = ep.exchange(buf, sent=k * item * (n - 1), recv=0)
    sizes, b = _heads([_HEAD.unpack_from(v, step * item) for v in views])
    result = None
    if out is None:
        result, out = make(b[n])
    peers = [(r + i) % n for i in range(1, n)]
    place(views, 0, k)
    most = max(sizes)
    how = rest(most * item) if most > step else "staged"

    def reads(rem):
        copy = streaming.copier(out, n)
        for p in peers:
            if sizes[p] > step:
                rem.read(p, step * item, out[b[p] + step:b[p + 1]], copy)
        if apart and x.size > step:
            copy(out[b[r] + step:b[r + 1]], x[step:])
        rem.finish(sent=(n - 1) * max(0, x.size - step) * item)

    def rounds():  # direct's: a piece of up to step elements from every rank
        for lo in range(step, most, step):
            buf, k = stage(lo)
            place(ep.exchange(buf, sent=k * item * (n - 1), recv=0), lo, k)

    if how == "read":
        reads(ep.expose(x))
    elif how == "regions":
        regions_or_staged(ep, x, reads, rounds)
    else:
        rounds()
    return result


def all_gather_v_probed(ep: Endpoint, x, out, row: int, own_at: int, make):
    """``linear`` for counts that each rank alone knows (``all_gather_v``
    with counts None where the collective endpoint probes its messages but
    the exchange is not through shared memory: mpi): this rank's block is
    posted to every peer at once; each rank takes every peer's count from
    its message (``_probed``), checks its ``out`` and where its ``x`` lies
    in it (``own_at``, -1: apart), and receives the blocks into place; no
    round of agreement.  Returns the result where ``make`` made it."""
    n, r = ep.size, ep.rank
    peers = [(r + i) % n for i in range(1, n)]
    sends = [ep.isend(x, p) for p in peers]
    b, out, result, _ = _probed(ep, peers, [x.size] * n, x, row, out, make,
                                f"rank {r}'s out", "ranks' blocks", own_at)
    reqs = [ep.irecv(out[b[p]:b[p + 1]], p) for p in peers]
    if own_at < 0:
        _own(x, out, b, r)
    ep.waitall(reqs + sends)
    return result


def _gather_round(ep: Endpoint, x) -> tuple[int, int]:
    """``all_gather_v_learned``'s round for arrays like ``x``: (the elements
    of a block that it carries, a multiple of 64 bytes, the round's bytes
    with the head after them): ``direct``'s round (ranks.round_bytes), the
    head after it where the exchange buffer holds both."""
    item, most = x.itemsize, ep.chunk_bytes(x) - _HEAD_BYTES
    step = min(round_bytes(ep, x, every_size=True), most) // item
    align = max(1, 64 // item)
    step = max(align, step - step % align)
    return step, step * item + _HEAD_BYTES


_HEAD = struct.Struct("<4q")
_HEAD_BYTES = 64


def _heads(heads) -> tuple[list[int], list[int]]:
    """Every rank's elements and their bounds, from the first round's heads
    (elements, of a row, of out or -1, where x lies in out or -1), once every rank's are
    checked: rows alike, every ``out`` as long as the blocks together, and
    an ``x`` inside its ``out`` exactly at its block; else every rank raises
    the same error."""
    n = len(heads)
    if len({h[1] for h in heads}) > 1:
        raise CollectiveError(
            "the ranks' rows differ in length: " + ", ".join(
                f"rank {p}'s rows hold {h[1]} elements" for p, h in enumerate(heads)),
            ranks=list(range(n)))
    sizes = [h[0] for h in heads]
    b = bounds(sizes, 1)
    for q, h in enumerate(heads):
        if h[2] != -1 and h[2] != b[n]:
            raise CollectiveError(
                f"rank {q}'s out differs from the blocks: it holds {h[2]} elements where "
                f"the ranks' blocks hold {b[n]}", ranks=[q])
        if h[3] != -1 and h[3] != b[q]:
            raise CollectiveError(
                f"rank {q} passes its x in place at element {h[3]} of its out, where the "
                f"ranks' counts put its block at element {b[q]} (x's place and the counts "
                "differ)", ranks=[q])
    return sizes, b


def all_gather_v_alone(x, out, b) -> None:
    _own(x, out, b, 0)


# -- gather_v: (ep, x, out, b, root), out None off root -----------------------
def gather_v_linear(ep: Endpoint, x, out, b, root: int) -> None:
    """Root receives each block straight into its place."""
    n, r = ep.size, ep.rank
    if r != root:
        ep.send(x, root)
        return
    reqs = [ep.irecv(out[b[p]:b[p + 1]], p) for p in range(n) if p != root]
    _own(x, out, b, root)
    ep.waitall(reqs)


def gather_v_one_copy(ep: Endpoint, x, out, b, root: int) -> None:
    """Every other rank writes its ``x`` into its place in root's ``out``
    while root copies its own."""
    n, r = ep.size, ep.rank
    rem = ep.expose(out if r == root else None)
    if r == root:
        _own(x, out, b, root)
    elif x.size:
        rem.write(root, b[r] * x.itemsize, x, streaming.copier(x, n))
    rem.finish(received=(b[n] - (b[r + 1] - b[r])) * x.itemsize if r == root else 0)


def gather_v_learned(ep: Endpoint, x, out, row: int, own_at: int, root: int, make):
    """``linear`` for counts that each rank alone knows (``gather_v`` with
    counts None where the collective endpoint probes its messages: shm,
    mpi): every other rank sends root its block and leaves, as linear's
    ranks do; root learns each block's length from its message before
    receiving it (``probe``: on shm the first slot's header, the block
    waiting in its sender's slots meanwhile; on mpi MPI_Iprobe and
    MPI_Get_count), checks its ``out`` against them and receives each block
    into its place, so no rank waits for an agreement first.  The call key
    carries the bytes of a row, so that a rank whose rows differ is caught
    by its message.

    A block of ``READ_BYTES`` or more, where the ranks read each other's
    memory, goes as ``one_copy``'s: its message is a rendezvous (its
    sender's address); root answers with where the block goes in its
    ``out``, and the sender writes it there while root copies its own (at
    N = 2 root reads the last third itself, as gather's ``_split``), then
    says it is done.  The answers and the done words are not counted.

    ``out`` (root): the caller's flat result or None, then
    ``make(elements)`` returns (the result, its flat view); ``own_at``:
    where root's ``x`` lies in it (-1: apart).  Returns root's result
    (None elsewhere)."""
    n, r, item = ep.size, ep.rank, x.itemsize
    if r != root:
        if not _writes(ep, x.nbytes):
            ep.isend(x, root).wait()
            return None
        where = np.empty(2, np.int64)  # (address, elements this rank writes)
        sent = ep.isend_read(x, root)
        ep.waitall([ep.irecv(where, root)])
        addr, k = where.tolist()
        if k:
            ep.write_into(root, addr, x[:k])
        ep.waitall([sent, ep.isend(_DONE, root)])
        ep.sent_bytes -= _DONE.nbytes
        ep.recv_bytes -= where.nbytes
        return None
    peers = [p for p in range(n) if p != r]
    sizes = [x.size] * n
    if out is not None and own_at < 0:
        b, got, reqs = _received_as_probed(ep, peers, sizes, x, row, out)
        result = None
    else:
        b, out, result, got = _probed(ep, peers, sizes, x, row, out, make, "root's out",
                                      "the ranks' blocks", own_at)
        reqs = None
    reads = []
    for p, nbytes, by_read in got:
        if _writes(ep, nbytes):  # its sender waits for where to write it
            if not by_read:
                raise CollectiveError(f"rank {p} sent its block of {nbytes} bytes in slots "
                                      "where the ranks' settings say it goes by rendezvous",
                                      ranks=[p])
            reads.append(p)
    if reqs is None:
        reqs = [ep.irecv(out[b[p]:b[p + 1]], p) for p in peers if p not in reads]
    if reads:  # each writer's answer: (where its block goes, the elements it writes)
        written = [_written(sizes[p], item, n) for p in reads]
        where = np.array([(address(out) + b[p] * item, k) for p, k in zip(reads, written)],
                         np.int64)
        reqs += [ep.isend(where[i], p) for i, p in enumerate(reads)]
    if own_at < 0:
        _own(x, out, b, r)
    if reads:  # the rest of each written block, then its writer's word
        done = np.empty(len(reads), np.int64)
        for i, (p, k) in enumerate(zip(reads, written)):
            reqs.append(ep.irecv_tail(out[b[p] + k:b[p + 1]], p, k * item))
            reqs.append(ep.irecv(done[i:i + 1], p))
        ep.sent_bytes -= where.nbytes  # the answers and the words are bookkeeping
        ep.recv_bytes -= done.nbytes
    ep.waitall(reqs)
    return result


def _probed(ep: Endpoint, peers, sizes: list, x, row: int, out, make, whose: str,
            blocks: str, own_at: int = -1) -> tuple:
    """The blocks of ``peers`` that their messages announce (``probe``):
    their elements into ``sizes`` (this rank's own already there), the
    bounds, the result (``out``, checked, or made by ``make``) and, where
    made, that result, and (peer, bytes, by rendezvous) per peer.  A block
    that is not whole rows of ``row`` elements of x's dtype, an ``out``
    (``whose``) of another length than the ``blocks``, or an ``x`` in place
    at element ``own_at`` of ``out`` (-1: apart) that is not this rank's
    block there raise CollectiveError."""
    got = []
    found = ep.probe(peers)
    for p in peers:
        nbytes, by_read = found[p]
        sizes[p] = _elements(p, nbytes, row, x)
        got.append((p, nbytes, by_read))
    b, result = bounds(sizes, 1), None
    if out is None:
        result, out = make(b[-1])
    else:
        _check_out(out, b[-1], whose, blocks, ep.rank)
    r = ep.rank
    if own_at != -1 and own_at != b[r]:
        raise CollectiveError(f"rank {r} passes its x in place at element {own_at} of its "
                              f"out, where the ranks' counts put its block at element {b[r]} "
                              "(x's place and the counts differ)", ranks=[r])
    return b, out, result, got


def _received_as_probed(ep: Endpoint, peers, sizes: list, x, row: int, out) -> tuple:
    """``_probed`` for gather_v_learned's root with its ``out`` given (and
    its ``x`` apart): each block is received into its place as soon as the
    blocks before it are known, so that the first blocks move while root
    waits to learn the later ones (linear's root posts every receive at
    once); a block that goes by ``_writes`` waits for the rest.  Returns
    the bounds, (peer, bytes, by rendezvous) per peer and the receives."""
    n, r = ep.size, ep.rank
    left, got, reqs = list(peers), {}, []
    k, at = 0, 0  # the first rank whose block is not placed yet, and where it starts
    while left:
        found = ep.probe(left, 1)
        for p, (nbytes, by_read) in found.items():
            sizes[p] = _elements(p, nbytes, row, x)
            got[p] = nbytes, by_read
        left = [p for p in left if p not in found]
        while k < n and (k == r or k in got):
            end = at + sizes[k]
            if k != r and end <= out.size and not _writes(ep, got[k][0]):
                reqs.append(ep.irecv(out[at:end], k))
            at, k = end, k + 1
    _check_out(out, at, "root's out", "the ranks' blocks", r)  # the receives wrote within it
    return bounds(sizes, 1), [(p, *got[p]) for p in peers], reqs


def _check_out(out, total: int, whose: str, blocks: str, r: int) -> None:
    """CollectiveError where ``out`` (``whose``) does not hold the ``total``
    elements of the blocks (``blocks``)."""
    if out.size != total:
        raise CollectiveError(f"{whose} differs from the blocks: it holds {out.size} elements "
                              f"where the {blocks} hold {total}", ranks=[r])


def _elements(p: int, nbytes: int, row: int, x) -> int:
    """The elements of rank ``p``'s block of ``nbytes`` (whole rows of
    ``row`` elements of x's dtype, else CollectiveError)."""
    if nbytes % (row * x.itemsize):
        raise CollectiveError(f"rank {p}'s block of {nbytes} bytes is not rows of {row} "
                              f"elements of {x.dtype}", ranks=[p])
    return nbytes // x.itemsize


def _writes(ep: Endpoint, nbytes: int) -> bool:
    """Whether gather_v_learned's sender of a block of ``nbytes`` writes it
    into root's ``out`` (the same answer on every rank)."""
    return nbytes >= READ_BYTES and ep.one_copy


def _written(k: int, item: int, n: int) -> int:
    """The elements of a block of ``k`` that its sender writes into root's
    ``out`` (gather_v_learned): all of them, but at N = 2 the last third
    (from a 4 KiB boundary), which root reads once its own block is copied."""
    if n != 2:
        return k
    tail, page = k // 3, max(1, 4096 // item)
    if tail > page:
        tail -= tail % page
    return k - tail


READ_BYTES = 2 << 20  # gather_v_learned's blocks go as one_copy's from this size
_DONE = np.zeros(1, np.int64)


def gather_v_alone(x, out, b, root: int) -> None:
    _own(x, out, b, 0)


# -- scatter_v: (ep, x, out, b, root), x None off root ------------------------
def scatter_v_linear(ep: Endpoint, x, out, b, root: int) -> None:
    """Root sends each block from its place."""
    n, r = ep.size, ep.rank
    if r != root:
        ep.recv(out, root)
        return
    reqs = [ep.isend(x[b[p]:b[p + 1]], p) for p in range(n) if p != root]
    _take(x, out, b, root)
    ep.waitall(reqs)


def _take(x, out, b, r: int) -> None:
    """Root's own block of ``x`` into ``out`` (in place, it is there)."""
    mine = x[b[r]:b[r + 1]]
    if mine.size and address(mine) != address(out):
        np.copyto(out, mine)


def scatter_v_one_copy(ep: Endpoint, x, out, b, root: int) -> None:
    """Every other rank reads its block of root's ``x`` where it lies."""
    n, r = ep.size, ep.rank
    rem = ep.expose(x if r == root else None)
    if r == root:
        _take(x, out, b, root)
    elif out.size:
        rem.read(root, b[r] * out.itemsize, out, streaming.copier(out, n))
    rem.finish(sent=(b[n] - (b[r + 1] - b[r])) * out.itemsize if r == root else 0)


def scatter_v_alone(x, out, b, root: int) -> None:
    _take(x, out, b, 0)


# -- all_to_all_v: (ep, x, out, sb, rb) ----------------------------------------
def _own_block(x, out, sb, rb, r: int, n: int) -> None:
    """This rank's block of ``x`` (bounds ``sb``) into its place in ``out``
    (bounds ``rb``), streamed as the fixed-count twin's (all_to_all._own)."""
    streaming.copier(out, n)(out[rb[r]:rb[r + 1]], x[sb[r]:sb[r + 1]])


def all_to_all_v_pairwise(ep: Endpoint, x, out, sb, rb) -> None:
    """Step k sends to rank + k and receives from rank - k: one peer a step."""
    n, r = ep.size, ep.rank
    _own_block(x, out, sb, rb, r, n)
    for k in range(1, n):
        d, s = (r + k) % n, (r - k) % n
        ep.sendrecv(x[sb[d]:sb[d + 1]], d, out[rb[s]:rb[s + 1]], s)


def all_to_all_v_linear(ep: Endpoint, x, out, sb, rb) -> None:
    """Every block posted at once: one round."""
    n, r = ep.size, ep.rank
    reqs = [ep.irecv(out[rb[p]:rb[p + 1]], p) for p in range(n) if p != r]
    reqs += [ep.isend(x[sb[p]:sb[p + 1]], p) for p in range(n) if p != r]
    _own_block(x, out, sb, rb, r, n)
    ep.waitall(reqs)


def all_to_all_v_one_copy(ep: Endpoint, x, out, sb, rb) -> None:
    """The ranks' bounds exchanged (``_matrix``), each rank reads its block
    of every peer's ``x`` where it lies into its place in ``out``, and
    copies its own."""
    rows = _matrix(ep, sb, rb)
    _read_blocks(ep.expose(x), ep, rows, x, out, sb, rb)


def all_to_all_v_staged(ep: Endpoint, x, out, sb, rb) -> None:
    """Rounds through the exchange buffers, as the fixed-count ``direct``:
    each round every rank stages the next piece (``_step`` elements, the
    same on every rank) of each block it sends and copies out the pieces
    addressed to it; the first round carries every rank's bounds too, from
    which every rank checks the counts and learns how many rounds follow."""
    _staged(ep, x, out, sb, rb, read=False)


def all_to_all_v_one_copy_or_staged(ep: Endpoint, x, out, sb, rb) -> None:
    """``staged``'s first round (the bounds, and every block where each
    fits one piece); then, where the count matrix is large enough that the
    fixed-count twin reads in place (``_reads``), the rest of every block is
    read where it lies in the peers' ``x``, else ``staged``'s rounds go on."""
    _staged(ep, x, out, sb, rb, read=True)


def _step(ep: Endpoint, x, head: int) -> int:
    """Elements of a block that one round carries per peer: the fixed-count
    ``direct``'s round (ranks.round_bytes) shared by the N - 1 peers, a
    multiple of 64 bytes, where it fits the exchange buffer after the
    ``head`` bytes of bounds, else what does (at least one element)."""
    n, item = ep.size, x.itemsize
    step = round_bytes(ep, x) // ((n - 1) * item)
    if head + (n - 1) * step * item > ep.chunk_bytes(x):
        step = (ep.chunk_bytes(x) - head) // ((n - 1) * item)
    align = 64 // item
    return max(1, step - step % align if step >= align > 0 else step)


def _layout(ep: Endpoint, x) -> tuple:
    """``_staged``'s round for arrays like ``x``: (the byte offset of the
    bounds, after the pieces, ``_step``, this rank's peers, the round's
    bytes, the bounds' struct of 2(N+1) int64, and per peer p (where this
    rank's round holds p's piece, in elements; p; where p's round holds
    this rank's piece, in bytes)), the same on every call of a
    shape (kept: a call's Python is most of a small one's time).  The
    pieces start the buffer, as the fixed-count ``direct``'s do: a copy
    whose destination lies a few bytes past its source modulo 4 KiB (the
    bounds first, 64 bytes, and an ``x`` from malloc, 16 bytes into a
    page) ran at half the speed of the same copy in some states of this VM
    (performance.md, "Copies a few bytes ahead of their source")."""
    key = (ep.size, ep.rank, x.dtype, ep.chunk_bytes(x))
    got = _LAYOUTS.get(key)
    if got is None:
        n, r = ep.size, ep.rank
        words = 2 * (n + 1)
        head = -(-8 * words // 64) * 64
        step = _step(ep, x, head)
        if len(_LAYOUTS) > 64:
            _LAYOUTS.clear()
        at = (n - 1) * step * x.itemsize
        peers = [p for p in range(n) if p != r]
        # per peer: its index's piece in this rank's round (elements) and
        # where its round holds this rank's piece (bytes)
        pairs = [(j * step, p, peer_index(r, p) * step * x.itemsize)
                 for j, p in enumerate(peers)]
        got = _LAYOUTS[key] = (at, step, peers, at + head, struct.Struct(f"<{words}q"), pairs)
    return got


_LAYOUTS: dict = {}


def _bare(read: bool, n: int, own: int) -> bool:
    """Whether a rank whose blocks hold ``own`` bytes in all sends its first
    round without data (``_staged``): from 3 ranks, where the rest is read
    and its own bytes alone make the total read (``_reads``)."""
    return read and n > 2 and own >= selection.ALL_TO_ALL_V_READ_TOTAL_BYTES


def _reads(n: int, total: int) -> str:
    """How ``one_copy_or_staged`` moves the rest of a count matrix of
    ``total`` bytes, as the fixed-count all_to_all's table does at its mean
    (selection.py): "read" in place; "regions" where every rank's ``x`` is
    communicator-allocated, else staged; "staged"."""
    if total >= (selection.ALL_TO_ALL_V_READ_TOTAL_BYTES if n > 2
                 else selection.ALL_TO_ALL_READ_TOTAL_BYTES):
        return "read"
    if total >= n * selection.ALL_TO_ALL_ALLOCATED_READ_BYTES:
        return "regions"
    return "staged"


def all_to_all_v_learned(ep: Endpoint, x, out, sb, row: int, make, read: bool = True):
    """``one_copy_or_staged`` where this rank does not know what it receives
    (``recv_counts`` None): the first round's bounds tell every rank the
    column of the count matrix that is its receive counts, so no round is
    spent agreeing them first.  ``row``: the elements of a row of ``x``;
    ``out``: the caller's flat result, or None, then ``make(elements)``
    returns (the result, its flat view).  Every rank raises the same error
    where the ranks' rows differ in length, where a rank's ``out`` does not
    hold what is sent to it, or where some ranks pass receive counts and
    others do not.  ``read``: the rest read in place where the fixed-count
    twin reads (else rounds only).  Returns the result."""
    got = [out]
    _staged(ep, x, out, sb, None, read, learn=(row, make, got))
    return got[0]


def _staged(ep: Endpoint, x, out, sb, rb, read: bool, lo: int = 0, rows=None,
            learn=None) -> None:
    """``staged`` (``read``: ``one_copy_or_staged``) from element ``lo`` of
    every block on, where the first round is done (``rows``, every rank's
    bounds, known); ``learn``: ``all_to_all_v_learned``'s, ``rb`` None."""
    n, r = ep.size, ep.rank
    at_b, step, peers, nbytes, bounds_of, pairs = _layout(ep, x)
    rounds = 1 if rows is None else _rounds(rows, n, step)
    item, dt = x.itemsize, x.dtype
    # from 3 ranks, a rank whose own blocks alone reach the total from which
    # the rest is read (_reads) knows that it will be: its first round
    # carries its bounds and no data (every rank tells so from its bounds:
    # _bare), and the peers read its blocks whole
    first = rows is None  # this round carries the bounds
    bare_me = first and _bare(read, n, sb[n] * item)
    while lo < rounds * step:
        stage = ep.stage(nbytes, _BYTE)
        if rows is None and learn is None:  # the bounds: send then receive
            bounds_of.pack_into(stage, at_b, *sb, *rb)
        elif rows is None:  # send, then LEARN, the elements of a row and of out
            bounds_of.pack_into(stage, at_b, *sb, LEARN, learn[0],
                                -1 if out is None else out.size, *(0,) * (n - 2))
        slots = stage[:at_b].view(dt)
        sent = 0
        if not (bare_me and first):
            for j, p, _ in pairs:  # j: p's index among this rank's peers
                a = sb[p] + lo
                e = sb[p + 1]
                if e > a + step:
                    e = a + step
                if e > a:
                    slots[j:j + e - a] = x[a:e]
                    sent += e - a
        # what comes in is counted below, once the first round's bounds are known
        views = ep.exchange(stage, sent=sent * item, recv=0)
        bare = ()
        if first:  # every rank's bounds
            first = False
            rows = [bounds_of.unpack_from(v, at_b) for v in views]
            rounds = _rounds(rows, n, step)  # checks the matrix first
            if learn is not None:
                rb = _learned(rows, n, r)
                if out is None:
                    learn[2][0], out = learn[1](rb[n])
            if read and n > 2:
                bare = {p for p in peers if _bare(read, n, rows[p][n] * item)}
        got = 0
        for _, p, at in pairs:  # at: where p's round holds this rank's piece
            a = rb[p] + lo
            e = rb[p + 1]
            if e > a + step:
                e = a + step
            if e > a and p not in bare:
                out[a:e] = views[p][at:at + (e - a) * item].view(dt)
                got += e - a
        ep.recv_bytes += got * item
        lo += step
        if read and (rounds > 1 or bare or bare_me) and lo == step:
            how = _reads(n, sum(v[n] for v in rows) * item)
            if how != "staged":
                _read_rest(ep, rows, x, out, sb, rb, step, how, bare, bare_me)
                return
    out[rb[r]:rb[r + 1]] = x[sb[r]:sb[r + 1]]


LEARN = -1  # where a rank's receive bounds start (always 0): it learns them


def _learned(rows, n: int, r: int) -> tuple[int, ...]:
    """``_checked_learned``, remembered for the count matrices seen last."""
    return _remember(_LEARNED, (r, *rows), lambda: tuple(_checked_learned(rows, n, r)))


def _checked_learned(rows, n: int, r: int) -> list[int]:
    """Rank ``r``'s receive bounds: the column ``r`` of the count matrix
    (every rank's send bounds and, at ``n + 2`` and ``n + 3``, the elements
    of its rows and of its ``out``, -1 for none), once every rank's rows
    are checked alike and every ``out`` against what is sent to it."""
    if len({v[n + 2] for v in rows}) > 1:
        raise CollectiveError(
            "the ranks' rows differ in length: " + ", ".join(
                f"rank {p}'s rows hold {v[n + 2]} elements" for p, v in enumerate(rows)),
            ranks=list(range(n)))
    for q, w in enumerate(rows):
        total = sum(v[q + 1] - v[q] for v in rows)
        if w[n + 3] != -1 and w[n + 3] != total:
            raise CollectiveError(
                f"rank {q}'s out differs from what is sent to it: it holds "
                f"{w[n + 3]} elements where the blocks sent to it hold {total}", ranks=[q])
    return bounds([v[r + 1] - v[r] for v in rows], 1)


def _rounds(rows, n: int, step: int) -> int:
    """``_checked_rounds``, remembered for the count matrices seen last (a
    call's Python is much of a small one's time; a matrix passes or fails
    alike every time)."""
    return _remember(_ROUNDS, (step, *rows), lambda: _checked_rounds(rows, n, step))


def _remember(memo: dict, key, make):
    """``memo[key]``, made by ``make()`` the first time (a few dozen kept;
    what fails raises every time)."""
    got = memo.get(key)
    if got is None:
        got = make()
        if len(memo) > 64:
            memo.clear()
        memo[key] = got
    return got


_ROUNDS: dict = {}
_LEARNED: dict = {}


def _checked_rounds(rows, n: int, step: int) -> int:
    """The rounds of ``step`` elements a block that the longest block of the
    count matrix (every rank's bounds, ``rows``) takes, at least one, once
    the matrix is checked: where rank p's block for rank q (its send
    bounds, ``rows[p][:n+1]``) is not the length that q expects from p
    (q's receive bounds, ``rows[q][n+1:]``, where it passed them), every
    rank raises the same error before a byte of ``out`` is written; so it
    does where some ranks pass their receive counts and others do not."""
    learn = [p for p, v in enumerate(rows) if v[n + 1] == LEARN]
    if learn and len(learn) < n:
        raise CollectiveError(
            f"the ranks' recv_counts differ: rank(s) {learn} pass None "
            "where the others pass counts",
            ranks=learn)
    most = 0
    for p, v in enumerate(rows):
        for q in range(n):
            sent = v[q + 1] - v[q]
            if sent > most and p != q:
                most = sent
            if not learn:
                w = rows[q]
                if sent != w[n + 2 + p] - w[n + 1 + p]:
                    raise CollectiveError(
                        f"all_to_all_v counts disagree: rank {p} sends rank {q} {sent} "
                        f"elements where rank {q} expects {w[n + 2 + p] - w[n + 1 + p]}",
                        ranks=sorted({p, q}))
    return max(1, -(-most // step))


def _read_rest(ep: Endpoint, rows, x, out, sb, rb, lo: int, how: str, bare=(),
               bare_me: bool = False) -> None:
    """Elements from ``lo`` on of every block, read where they lie in the
    peers' ``x`` (``how``: "read", or "regions": only where every rank's
    ``x`` is communicator-allocated, else in ``staged``'s rounds); and the
    own block.  The blocks of the ranks in ``bare`` (this rank's:
    ``bare_me``), whose first round carried no data, are read whole
    (``_bare``: then ``how`` is "read")."""
    def reads(rem):
        _read_blocks(rem, ep, rows, x, out, sb, rb, lo, bare, bare_me)
    if how == "read":
        reads(ep.expose(x))
    else:
        regions_or_staged(ep, x, reads, lambda: _staged(ep, x, out, sb, rb, False, lo, rows),
                          huge=reads)


def _matrix(ep: Endpoint, sb, rb) -> list[list[int]]:
    """Every rank's send bounds then receive bounds (one small exchange of
    2(N+1) int64 a rank through shared memory, left out of the traffic as
    the one-copy publication's words are, so that the bytes counted are the
    blocks', as for every algorithm), checked (``_rounds``)."""
    n = ep.size
    stage = ep.stage(2 * (n + 1), _INT64)
    stage[:] = (*sb, *rb)
    rows = [tuple(v.tolist()) for v in ep.exchange(stage, sent=0, recv=0)]
    _rounds(rows, n, 1)
    return rows


_INT64 = np.empty(0, np.int64)
_BYTE = np.empty(0, np.uint8)


def _read_blocks(rem, ep: Endpoint, rows, x, out, sb, rb, lo: int = 0, bare=(),
                 bare_me: bool = False) -> None:
    """Block ``rank`` of every peer's ``x`` (published: ``rem``; where
    ``rows``, ``_matrix``, says it lies), from element ``lo`` on (from 0 for
    the peers in ``bare``, and for this rank's blocks where ``bare_me``),
    read into its place in ``out``; then the own block."""
    n, r = ep.size, ep.rank
    item = x.itemsize
    copy = streaming.copier(out, n)
    for i in range(1, n):
        p = (r + i) % n
        at = 0 if p in bare else lo
        rem.read(p, (rows[p][r] + at) * item, out[rb[p] + at:rb[p + 1]], copy)
    copy(out[rb[r]:rb[r + 1]], x[sb[r]:sb[r + 1]])
    mine = 0 if bare_me else lo
    rem.finish(sent=sum(max(0, sb[q + 1] - sb[q] - mine) for q in range(n) if q != r) * item)


def all_to_all_v_probed(ep: Endpoint, x, out, sb, row: int, make):
    """``linear`` for receive counts that each rank learns from its
    messages (``all_to_all_v`` without recv_counts where the collective
    endpoint probes them but the exchange is not through shared memory:
    mpi): every block for another rank is sent at once; each rank then
    takes the length of every block for it from its message (``probe``:
    MPI_Iprobe, MPI_Get_count), checks its ``out`` against them and
    receives each block into its place; no round of agreement first.  The
    call key carries the bytes of a row.  ``out``: the caller's flat result
    or None, then ``make(elements)`` returns (the result, its flat view).
    Returns the result."""
    n, r = ep.size, ep.rank
    peers = [(r + i) % n for i in range(1, n)]
    sends = [ep.isend(x[sb[p]:sb[p + 1]], p) for p in peers]
    rb, out, result, _ = _probed(ep, peers, [sb[r + 1] - sb[r]] * n, x, row, out, make,
                                 f"rank {r}'s out", "blocks for it")
    reqs = [ep.irecv(out[rb[p]:rb[p + 1]], p) for p in peers]
    ep.waitall(reqs + sends)
    _own_block(x, out, sb, rb, r, n)
    return result


def all_to_all_v_alone(x, out, sb, rb) -> None:
    np.copyto(out, x)


# -- reduce_scatter_v: (ep, x, out, b, op) -------------------------------------
def reduce_scatter_v_ring(ep: Endpoint, x, out, b, op) -> None:
    """Ring: step s passes the block just reduced to the right; after N-1
    steps block ``rank`` holds every rank's sum (ring.reduce_scatter_into,
    as the fixed-count ring)."""
    _ring.reduce_scatter_into(ep, x, b, op, out)


def reduce_scatter_v_linear(ep: Endpoint, x, out, b, op) -> None:
    """Every block to its owner at once; the owner reduces the N copies of
    its block in rank order (numpy's bits)."""
    n, r = ep.size, ep.rank
    m = b[r + 1] - b[r]
    got = empty((n - 1, m), x)
    reqs = [ep.irecv(got[p if p < r else p - 1], p) for p in range(n) if p != r]
    reqs += [ep.isend(x[b[p]:b[p + 1]], p) for p in range(n) if p != r]
    ep.waitall(reqs)
    own = x[b[r]:b[r + 1]]
    if np.may_share_memory(own, out):
        own = own.copy()
    parts = [got[p if p < r else p - 1] for p in range(n) if p != r]
    parts.insert(r, own)
    if m:
        in_rank_order(parts, op, out)


def reduce_scatter_v_alone(x, out, b, op) -> None:
    if address(out) != address(x):
        np.copyto(out, x)


ALL_GATHER_V = Family("all_gather_v", (
    Algorithm("ring", all_gather_v_ring),
    Algorithm("linear", all_gather_v_linear),
    Algorithm("one_copy", all_gather_v_one_copy, needs_one_copy=True),
), all_gather_v_alone)
GATHER_V = Family("gather_v", (
    Algorithm("linear", gather_v_linear),
    Algorithm("one_copy", gather_v_one_copy, needs_one_copy=True),
), gather_v_alone)
SCATTER_V = Family("scatter_v", (
    Algorithm("linear", scatter_v_linear),
    Algorithm("one_copy", scatter_v_one_copy, needs_one_copy=True),
), scatter_v_alone)
ALL_TO_ALL_V = Family("all_to_all_v", (
    Algorithm("pairwise", all_to_all_v_pairwise),
    Algorithm("linear", all_to_all_v_linear),
    Algorithm("one_copy", all_to_all_v_one_copy, needs_one_copy=True),
    Algorithm("staged", all_to_all_v_staged, needs_shared_exchange=True),
    Algorithm("one_copy_or_staged", all_to_all_v_one_copy_or_staged, needs_one_copy=True,
              needs_shared_exchange=True),
), all_to_all_v_alone)
REDUCE_SCATTER_V = Family("reduce_scatter_v", (
    Algorithm("ring", reduce_scatter_v_ring),
    Algorithm("linear", reduce_scatter_v_linear),
), reduce_scatter_v_alone)

# each call with its fixed-count twin, which it runs where every count is equal
FAMILIES: dict[str, Family] = {f.call: f for f in (
    ALL_GATHER_V, GATHER_V, SCATTER_V, ALL_TO_ALL_V, REDUCE_SCATTER_V)}
TWIN = {"all_gather_v": "all_gather", "gather_v": "gather", "scatter_v": "scatter",
        "all_to_all_v": "all_to_all", "reduce_scatter_v": "reduce_scatter"}
