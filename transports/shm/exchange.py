"""The staged exchange of the collective endpoint, through the exchange buffers.

Every rank has two exchange buffers in the segment.  Exchange k: a rank
copies its contribution into its buffer k mod 2 (no copy when it filled the
buffer in place, through ``stage``), publishes its size, collective and call
size in that buffer's fields and then k as its ``exchanged`` word, rings
every peer, waits until every peer has published k, checks what they
published against its own, and returns views of all N buffers.  Two buffers are enough: a rank in exchange
k has finished k-1, so every peer has entered k-1 and finished reading k-2.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import CollectiveError, mismatched
from . import _futex

try:
    from .. import _native
except ImportError:  # not built: fused() runs the Python exchange
    _native = None
from .copy import Copier
from .segment import DOORBELL, EXCHANGED, MASK, SLEEPING, XMETA_CALL, XMETA_KEY, Segment

# how many times exchange() looks for late peers before it waits like any call
PRESPIN = 8


class Exchange:
    """The exchanges of one endpoint (the coll endpoint of more than one
    rank) on ``seg``, with ``peers`` (every other rank) and exchange buffers
    of ``xchg_bytes``.  ``seq``: the number of the last exchange."""

    def __init__(self, seg: Segment, peers: list[int], xchg_bytes: int):
        self.seg, self.peers, self.rank, self.xchg_bytes = seg, peers, seg.rank, xchg_bytes
        self.seq = 0
        self._cache: dict = {}  # (parity, dtype, nbytes) -> views of every rank's buffer
        self.staged = None  # stage()'s array, published by the next exchange
        self.copier = Copier()  # a root's copies into the buffer, cached or streamed
        self.last: tuple = (None, -1)  # the last call's dtype, nbytes, views per parity
        # the words in the rank blocks: this rank's exchanged word and
        # (bytes, call, call size) per buffer parity; the peers' doorbells,
        # exchanged words and (bytes, call, call size) per parity
        lay, me = seg.layout, seg.rank
        self.my_seq = lay.i64(me, EXCHANGED)
        self.my_meta = [lay.xmeta(me, b) for b in (0, 1)]
        self.bells = [(seg.bells[p], seg.sleeping[p]) for p in peers]
        self.peer_seq = [lay.i64(p, EXCHANGED) for p in peers]
        self.peer_meta = [[lay.xmeta(p, b) for p in peers] for b in (0, 1)]
        # the call's and the call size's words after the bytes' word
        self.call, self.size_at = XMETA_CALL // 8, XMETA_KEY // 8
        self.plan = self._plan()

    def _plan(self) -> np.ndarray:
        """Where the compiled exchange (``fused``) finds the words and buffers:
        the segment's address, the exchange buffer's bytes, N, this rank, and
        per rank its doorbell and coll SLEEPING flag (u32 indices), its
        exchanged word and its two buffers' (bytes, call, call size) words
        (i64 indices), and its two buffers (byte offsets)."""
        seg, lay = self.seg, self.seg.layout
        words = [seg.addr, self.xchg_bytes, seg.size, self.rank]
        for r in range(seg.size):
            words += [lay.u32(r, DOORBELL), lay.u32(r, SLEEPING), lay.i64(r, EXCHANGED),
                      lay.xmeta(r, 0), lay.xmeta(r, 1), lay.xchg(r, 0), lay.xchg(r, 1)]
        return np.array(words, np.int64)

    def release(self) -> None:
        self.last, self.staged = (None, -1), None  # views of the segment
        self._cache.clear()

    def views(self, seq: int, dtype: np.dtype, nbytes: int) -> list[np.ndarray]:
        """Every rank's exchange buffer for exchange ``seq``, as ``nbytes`` of ``dtype``."""
        key = (seq & 1, dtype, nbytes)
        views = self._cache.get(key)
        if views is None:
            if len(self._cache) > 64:
                self._cache.clear()
            lay, mem = self.seg.layout, self.seg.mem
            base = [lay.xchg(r, seq & 1) for r in range(self.seg.size)]
            views = [mem[b:b + nbytes].view(dtype) for b in base]
            self._cache[key] = views
        return views

    def stage(self, count: int, like) -> np.ndarray | None:
        """This rank's buffer for the next exchange, as ``count`` elements of
        ``like``'s dtype to fill in place; exchange() of the array returned
        then publishes it without a copy.  The views that the previous
        exchange returned stay valid until that exchange (peers cannot
        reuse their buffers before this rank has published).  None where the
        next exchange would not go through the buffers."""
        nb = count * like.itemsize
        if nb > self.xchg_bytes or not isinstance(like, np.ndarray):
            return None
        self.staged = self.views(self.seq + 1, like.dtype, nb)[self.rank]
        return self.staged

    def run(self, buf, nb: int, root: int | None, tag: int, key: int,
            block: Callable, sink: int | None = None) -> list[np.ndarray]:
        """Exchange ``buf`` (an array or a list of arrays, ``nb`` bytes in all,
        at most xchg_bytes) in collective ``tag`` of call size ``key``;
        ``root``: only its contribution is published (the others publish 0
        bytes); ``sink``: the one rank that reads, which publishes 0 bytes.
        ``block`` is the endpoint's wait (``ShmEndpoint.block``)."""
        seg = self.seg
        if isinstance(buf, np.ndarray):
            pieces, dtype = None, buf.dtype
        else:
            pieces, dtype = buf, buf[0].dtype
        self.seq = k = self.seq + 1
        if dtype is self.last[0] and nb == self.last[1]:  # the last call's shape again
            views = self.last[2 + (k & 1)]
        else:
            views = self.views(k, dtype, nb)
            self.last = (dtype, nb, *(self.views(j, dtype, nb) for j in (0, 1)))
        me = self.rank
        mine = _published(me, nb, root, sink)
        if mine and buf is not self.staged:
            v = views[me]
            if pieces is None and root is not None:  # a root's copy: copy.py decides
                self.copier.copy([(v, buf.reshape(-1))], nb)
            elif pieces is None:
                v[...] = buf if buf.ndim == 1 else buf.reshape(-1)
            else:
                o = 0
                for p in pieces:
                    np.copyto(v[o:o + p.size], p.reshape(-1))
                    o += p.size
        self.staged = None
        # publish: size, call and call size (kept per buffer, like the data),
        # then the sequence number; then ring every peer (inline: this is the
        # hot path of every small call)
        q, u32, par, call, kw = seg.q64, seg.u32, k & 1, self.call, self.size_at
        w = self.my_meta[par]
        q[w] = mine
        q[w + call] = tag
        q[w + kw] = key
        q[self.my_seq] = k
        for i, s in self.bells:
            u32[i] = (u32[i] + 1) & MASK
            if u32[s] or u32[s + 1]:  # a SLEEPING flag (coll or p2p) is set
                _futex.wake(seg.addr + 4 * i)
        seqs = self.peer_seq
        for _ in range(PRESPIN):  # a peer a few microseconds behind: no sleep
            for i in seqs:
                if q[i] < k:
                    break
            else:
                break
        else:
            self._wait(k, block)
        self._check(par, nb, root, tag, key, sink)
        return views

    def fused(self, reducer, x: np.ndarray, out: np.ndarray, tag: int, key: int,
              block: Callable) -> list[np.ndarray] | None:
        """Exchange ``x`` (at most xchg_bytes, every rank's whole contribution)
        as run() does, in one compiled call (transports/_native.c,
        ``exchange_reduce``) that copies, publishes, rings, looks for the
        peers a bounded number of times, checks their words and reduces the
        N buffers into ``out`` in rank order with ``reducer`` (a capsule of
        transports/native_api.h: the collectives' kernels provide them).
        Returns None where it did all that; else, where a peer was late or
        published other words, the N views after this waits like any call
        and checks the words (raising run()'s errors), for the caller to
        reduce.  Where the extension is not built, run() and its views.  An
        argument the call refuses raises before anything moves."""
        if _native is None:
            return self.run(x, x.nbytes, None, tag, key, block)
        k = self.seq + 1
        bx, bout = x, out
        if x.dtype.isbuiltin == 2:  # a user dtype (bfloat16): older numpy exports no buffer
            bx, bout = x.view(np.uint8), out.view(np.uint8)
        code = _native.exchange_reduce(reducer, self.plan, bx, bout, k, tag, key)
        self.seq = k
        self.staged = None
        if code == 0:
            return None
        if code == 1:  # a peer is late
            self._wait(k, block)
        self._check(k & 1, x.nbytes, None, tag, key)
        return self.views(k, x.dtype, x.nbytes)

    def _check(self, par: int, nb: int, root: int | None, tag: int, key: int,
               sink: int | None = None) -> None:
        """Raise where a peer published other bytes, call or call size in
        buffer ``par`` than this rank expects."""
        q, call, kw, me = self.seg.q64, self.call, self.size_at, self.rank
        for p, i in zip(self.peers, self.peer_meta[par]):
            want = _published(p, nb, root, sink)
            if q[i] != want or q[i + call] != tag or q[i + kw] != key:
                if q[i + call] == tag and q[i + kw] != key:
                    raise mismatched(p, tag, q[i + kw], me, key)
                raise CollectiveError(
                    f"mismatched collectives: rank {p} contributed {q[i]} bytes to call "
                    f"#{q[i + call]} where rank {me} expects {want} bytes in call #{tag}",
                    ranks=[p])

    def _wait(self, k: int, block: Callable) -> None:
        """Wait like any call until every peer has published exchange ``k``."""
        q, peers = self.seg.q64, self.peers
        late = list(zip(peers, self.peer_seq))

        def step():
            nonlocal late
            late = [(p, i) for p, i in late if q[i] < k]
            return not late, False
        block(step, lambda: peers, lambda: [p for p, _ in late])


def _published(rank: int, nb: int, root: int | None, sink: int | None) -> int:
    """The bytes ``rank`` publishes in an exchange of ``nb`` bytes a rank:
    all of them, but none where only ``root``'s count and it is another,
    or where it is the ``sink`` (the one rank that reads)."""
    if rank == sink or (root is not None and root != rank):
        return 0
    return nb
