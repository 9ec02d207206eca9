"""One copy for large messages: peers read a rank's array where it lies.

The staged ``exchange()`` copies every byte twice (into the owner's exchange
buffer, out into the reader's destination).  Here a rank publishes where its
source lies instead, and each peer copies what it needs straight from there
into its destination: with ``process_vm_readv`` (``_cma``), or from a mapping
of the peer's memory where this rank maps it (``Regions.mapped``).

Publication k of the coll endpoint (every rank publishes each one, in the
same order; a rank with nothing to offer publishes 0 bytes)::

    owner   writes address, bytes, collective, call size in its one-copy
            block, then k as its ``posted`` word; rings every peer
    reader  waits until every peer has posted k, checks their collective and
            call size against its own, reads (``Remote.read`` / ``piece``)
    both    write k as their ``done`` word (``Remote.finish``), ring every
            peer, and wait until every peer's ``done`` is k: no rank
            returns, and lets its caller overwrite its source, while a peer
            may still read it

One block per rank is enough: a rank rewrites its block for k+1 only after
every peer has finished k.  Waiting is the endpoint's (spin a little, then
sleep on the doorbell); a dead peer is a PeerFailure, a silent one a
CollectiveTimeout, a failed read names the rank.
"""
from __future__ import annotations

import errno
import os
import time
from typing import Callable

import numpy as np

from ..base import Liveness, as_bytes
from ..copy import address
from ..errors import CollectiveError, PeerFailure, mismatched
from . import _cma, _thp
from .regions import Regions
from .segment import D_ADDR, D_BYTES, D_CALL, D_DONE, D_HUGE, D_KEY, D_POSTED, Segment

try:
    from .. import _native
    _gather = getattr(_native, "one_copy_gather", None)
except ImportError:  # not built: the Python path alone
    _gather = None

PRESPIN = 8  # looks at late peers before waiting like any call (as exchange does)
# a read that fails while its owner is being killed: how long to wait for the
# owner to be seen dead (its memory can go before its process does)
DYING_S = 0.5


class OneCopy:
    """The one-copy publications of one endpoint (the coll endpoint of more
    than one rank) on ``seg``, with ``peers`` (every other rank): their
    processes by ``liveness``, the communicator-allocated arrays that this
    rank maps by ``regions`` (None: none; every read is process_vm_readv)."""

    def __init__(self, seg: Segment, peers: list[int], liveness: Liveness,
                 regions: Regions | None = None):
        self.seg, self.peers, self.rank = seg, peers, seg.rank
        self.liveness, self.regions = liveness, regions
        self.mine = seg.layout.one_copy(seg.rank)
        self.theirs = [seg.layout.one_copy(p) for p in peers]
        self.block_of = dict(zip(peers, self.theirs))
        self.seq = 0
        # the compiled gather's plan (transports/_native.c, one_copy_gather)
        n = seg.layout.n
        self.plan = np.array(
            [seg.addr, n, seg.rank, D_POSTED, D_ADDR, D_BYTES, D_CALL, D_KEY, D_DONE, D_HUGE]
            + [w for r in range(n) for w in (seg.bells[r], seg.sleeping[r],
                                             seg.layout.one_copy(r), liveness.pids[r])],
            np.int64)

    def expose(self, ep, buf, huge: bool = False) -> Remote:
        """Publish ``buf`` (a contiguous array, or None: nothing to read here)
        for endpoint ``ep``'s collective (its tag and call size); returns
        once every peer has published too, with what they published.
        ``huge``: publish too how much of ``buf`` huge pages back (``_thp``;
        a few microseconds), for ``Remote.huge``."""
        seg, q, tag, key = self.seg, self.seg.q64, ep.tag, ep.call_bytes
        self.seq = k = self.seq + 1
        w = self.mine
        q[w + D_ADDR] = 0 if buf is None or not buf.nbytes else address(buf)
        q[w + D_BYTES] = 0 if buf is None else buf.nbytes
        q[w + D_HUGE] = int(1000 * _thp.huge_share(buf)) if huge else 0
        q[w + D_CALL] = tag
        q[w + D_KEY] = key
        q[w + D_POSTED] = k
        for p in self.peers:
            seg.ring(p)
        self._wait(D_POSTED, k, ep.block)
        self._check(tag, key)
        return Remote(self, k, ep)

    def gather(self, ep, x: np.ndarray | None, out: np.ndarray, nb: int, off: int,
               own_off: int, own: int, only: int = -1) -> bool:
        """``expose(x)``, then block p of ``out`` (``nb`` bytes at ``p * nb``)
        = bytes [off, off + nb) of every peer p's source, and (``own``: 1
        with np.copyto's copy, 2 with streaming stores) this rank's block =
        x's ``nb`` bytes from ``own_off``, then ``finish``: the whole of a
        one-copy all_gather or all_to_all in one compiled call.  ``only``
        (a scatter's root): ``out`` = those bytes of rank only's source alone
        (nothing read on only itself), or of x with ``own``
        (transports/_native.c, ``one_copy_gather``), the peers read with
        process_vm_readv.  False, having done nothing, where it is not built
        or this rank maps a peer's communicator-allocated arrays (whose reads
        go through the mapping: ``Remote.read``).  Waits, checks and errors
        are expose's, read's and finish's.  ``x`` and ``out``: contiguous."""
        regions = self.regions
        if _gather is None or (regions is not None and any(regions.peers)):
            return False
        self.seq = k = self.seq + 1
        tag, key, plan = ep.tag, ep.call_bytes, self.plan
        xb = 0 if x is None else x.nbytes
        xa, oa = address(x) if xb else 0, address(out)
        code = _gather(plan, 0, k, tag, key, xa, xb, oa, nb, off, own_off, own, only)
        if code == 1:  # a peer is late: wait as any call, then go on
            self._wait(D_POSTED, k, ep.block)
            code = _gather(plan, 1, k, tag, key, xa, xb, oa, nb, off, own_off, own, only)
        if code == 2:
            self._check(tag, key)
        if type(code) is tuple:
            what, p, v = code
            if what == 4:
                _short(p, v, self.rank, off, nb)
            pid = self.liveness.pids[p]
            Remote(self, k, ep)._failed(
                p, OSError(v, f"process_vm_readv with pid {pid}: {os.strerror(v)}"))
        n = len(self.peers) * nb
        ep.recv_bytes += n if only < 0 else 0 if only == self.rank else nb
        ep.sent_bytes += n if only in (-1, self.rank) else 0
        if code == 3:  # a peer has not finished reading
            self._wait(D_DONE, k, ep.block)
        return True

    def _check(self, tag: int, key: int) -> None:
        """Raise where a peer's publication is of another call or call size."""
        q, me = self.seg.q64, self.rank
        for p, i in zip(self.peers, self.theirs):
            if q[i + D_CALL] != tag or q[i + D_KEY] != key:
                if q[i + D_CALL] == tag:
                    raise mismatched(p, tag, q[i + D_KEY], me, key)
                raise CollectiveError(
                    f"mismatched collectives: rank {p} is in call #{q[i + D_CALL]} where rank "
                    f"{me} is in call #{tag}", ranks=[p])

    def _wait(self, field: int, k: int, block: Callable) -> None:
        """Until every peer's ``field`` word is k."""
        q = self.seg.q64
        late = [(p, i + field) for p, i in zip(self.peers, self.theirs)]
        for _ in range(PRESPIN):
            late = [(p, i) for p, i in late if q[i] != k]
            if not late:
                return

        def step():  # a peer that gets there is progress (the deadline restarts)
            nonlocal late
            was, late = len(late), [(p, i) for p, i in late if q[i] != k]
            return not late, len(late) < was
        block(step, lambda: self.peers, lambda: [p for p, _ in late])


class Remote:
    """The peers' sources of one publication, to read until ``finish()``
    (which blocks until every peer has finished too)."""

    def __init__(self, d: OneCopy, k: int, ep):
        self.d, self.k, self.ep = d, k, ep

    def _mapped(self, p: int, addr: int, n: int) -> np.ndarray | None:
        regions = self.d.regions
        return None if regions is None else regions.mapped(p, addr, n)

    def in_regions(self, own, only: int | None = None) -> bool:
        """Whether every rank's source lies in a communicator-allocated array
        (regions.py): ``own``, this rank's, in one of its own, and each
        peer's in one that this rank maps (``only``: rank ``only``'s source
        alone, as for a broadcast's root).  Every rank maps every live region
        of the communicator, so every rank gets the same answer."""
        regions, q = self.d.regions, self.d.seg.q64
        if regions is None:
            return False
        if only is None or only == self.d.rank:
            if own is None or not own.nbytes or regions.locate(own) is None:
                return False
        for p, i in self.d.block_of.items():
            if only is not None and p != only:
                continue
            n = q[i + D_BYTES]
            if not n or regions.mapped(p, q[i + D_ADDR], n) is None:
                return False
        return True

    def published(self, own) -> bool:
        """Whether every rank published a source (``own``: this rank's; a rank
        whose output overlaps its input publishes none).  Every rank reads
        the same words, so every rank gets the same answer."""
        if own is None or not own.nbytes:
            return False
        q = self.d.seg.q64
        return all(q[i + D_BYTES] for i in self.d.block_of.values())

    def huge(self, share: float) -> bool:
        """Whether huge pages back at least ``share`` of every rank's published
        source (published with ``huge``; every rank reads the same words, so
        every rank gets the same answer)."""
        q, d = self.d.seg.q64, self.d
        return all(q[i + D_HUGE] >= 1000 * share for i in (d.mine, *d.block_of.values()))

    def _where(self, p: int, off: int, n: int) -> int:
        """The address of bytes [off, off + n) of peer p's source, checked."""
        q, i = self.d.seg.q64, self.d.block_of[p]
        if off < 0 or off + n > q[i + D_BYTES]:
            _short(p, q[i + D_BYTES], self.d.rank, off, n)
        return q[i + D_ADDR] + off

    def read(self, p: int, off: int, dest, copy: Callable = np.copyto) -> None:
        """Copy ``dest.nbytes`` bytes of peer p's source, from byte ``off``, into
        ``dest`` (a contiguous array): one copy (``copy(dst, src)`` where this
        rank maps the source: np.copyto, or a streaming copy for outputs
        larger than the caches)."""
        n = dest.nbytes
        if not n:
            return
        addr = self._where(p, off, n)
        view = self._mapped(p, addr, n)
        if view is not None:
            copy(as_bytes(dest), view)
        else:
            self._cma(p, addr, as_bytes(dest))
        self.ep.recv_bytes += n

    def write(self, p: int, off: int, src, copy: Callable = np.copyto) -> None:
        """Copy ``src`` (a contiguous array) into peer p's published buffer
        from byte ``off``: one copy, made by the owner of the bytes where the
        reader would otherwise make it alone (the peer counts them as
        received in its ``finish``); ``copy`` as for ``read``."""
        n = src.nbytes
        if not n:
            return
        addr = self._where(p, off, n)
        view = self._mapped(p, addr, n)
        if view is not None:
            copy(view, as_bytes(src))
        else:
            self._cma(p, addr, as_bytes(src), write=True)
        self.ep.sent_bytes += n

    def piece(self, p: int, off: int, n: int, scratch: np.ndarray) -> np.ndarray:
        """Bytes [off, off + n) of peer p's source as a uint8 array: the
        mapping itself where there is one, else read into ``scratch``."""
        addr = self._where(p, off, n)
        self.ep.recv_bytes += n
        view = self._mapped(p, addr, n) if n else None
        if view is not None:
            return view
        out = scratch[:n]
        if n:
            self._cma(p, addr, out)
        return out

    def _cma(self, p: int, addr: int, buf: np.ndarray, write: bool = False) -> None:
        try:
            (_cma.write if write else _cma.read)(self.d.liveness.pids[p], addr, buf)
        except OSError as e:
            self._failed(p, e, write)

    def _failed(self, p: int, e: OSError, write: bool = False) -> None:
        """Raise for a read from (``write``: into) rank p's memory that failed with ``e``."""
        liveness = self.d.liveness
        if e.errno == errno.ESRCH or _dies(liveness, p):
            raise PeerFailure(f"rank(s) [{p}] died during {self.ep.what}", ranks=[p]) from None
        raise CollectiveError(f"{'writing into' if write else 'reading'} rank {p}'s "
                              f"memory failed: {e}", ranks=[p]) from None

    def finish(self, sent: int = 0, received: int = 0) -> None:
        """Say this rank has finished reading (and writing); return once every
        peer has.  ``sent``: the bytes the peers read of this rank's source,
        ``received``: the bytes they wrote into it (which it cannot see; the
        rank that copies counts them)."""
        d = self.d
        seg = d.seg
        self.ep.sent_bytes += sent
        self.ep.recv_bytes += received
        seg.q64[d.mine + D_DONE] = self.k
        for p in d.peers:
            seg.ring(p)
        d._wait(D_DONE, self.k, self.ep.block)


def _short(p: int, have: int, me: int, off: int, n: int) -> None:
    """Raise for rank ``me``'s read of bytes [off, off + n) where rank p published ``have``."""
    raise CollectiveError(
        f"rank {p} published {have} bytes where rank {me} reads bytes {off} to {off + n} "
        "(shape, dtype or count differ between ranks)", ranks=[p])


def _dies(liveness, p: int) -> bool:
    """Whether rank p is dead, or is seen dead within DYING_S."""
    end = time.monotonic() + DYING_S
    while not liveness.dead([p]):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True
