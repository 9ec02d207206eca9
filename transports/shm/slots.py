"""The slot protocol of a shared-memory endpoint.

Per ordered pair of ranks a channel of ``nslots`` slots (``segment``).
A message is cut into chunks of at most ``slot_bytes``; ``_push`` copies the
next chunk into the slot at ``head`` and publishes it by bumping ``head``,
``_pull`` checks the slot's header, copies or reduces the chunk out and
frees the slot by bumping ``tail``.  The ``coll`` endpoint matches a
message to the oldest posted receive from its sender (strict FIFO), and
checks that it belongs to the same collective (tag) of the same call size
(key) before a byte of it is used; ``p2p`` matches by tag, and keeps a
message that arrives before its receive as unexpected.  Progress happens in ``waitall``/``test`` (and a little when a
request is posted), under the endpoint's lock; between fruitless passes a
rank watches, then sleeps on, its doorbell.

A slot's ``kind`` says where its chunk is: in the slot (EAGER), in the
sender's memory for ``process_vm_readv`` (RENDEZVOUS), or somewhere only a
subclass of the endpoint knows (EXTERNAL; the hook is described at
``ShmEndpoint``).
"""
from __future__ import annotations

import collections
import errno
import os
import threading
from typing import Callable, Iterable

import numpy as np

from ..base import UNCHECKED, Deadline, Endpoint, Liveness, Reducer, Request, as_bytes
from ..copy import address
from ..errors import STRAY_CALLS, CollectiveError, PeerFailure, mismatched, stray
from .exchange import Exchange
from . import _cma
from .messages import Recv, Send, Unexpected
from .one_copy import OneCopy, Remote
from .regions import Regions
from .segment import MASK, Segment
from .settings import Settings

MAX_MESSAGE_BYTES = 1 << 40  # the most an unexpected message may announce
# slot kinds: data in the slot / (pid, address) of the whole message / data
# outside the segment, moved by a subclass's fill_external and drain_external
EAGER, RENDEZVOUS, EXTERNAL = 0, 1, 2
RNDV_BYTES = 16  # a rendezvous slot's data: the sender's pid and address (i64 each)
SCRATCH_BYTES = 256 * 1024  # a rendezvous receive-and-reduce goes through this much at a time
_yield = os.sched_yield


class ShmEndpoint(Endpoint):
    """An endpoint on the slots of its channels, and on the exchange buffers.

    The hook for bytes that move outside the segment: a subclass sets
    ``external_bytes`` (its chunk size), posts requests whose ``external``
    is true (``enqueue``, ``post``) and implements ``fill_external`` and
    ``drain_external``; the slot of such a chunk carries only its header,
    of kind EXTERNAL, checked here like any other.  ``unexpected_message``
    and ``deliver`` let it hold and hand over an early message of its kind.

    It runs on ``seg`` (this rank's ``Segment``) with ``settings``, tells a
    dead peer by ``liveness``, gives up after ``timeout`` seconds without
    progress, and, on the collective endpoint, looks at its peers' rank
    blocks in its waits with ``watch(seq)`` (raising what it finds; the
    segment's by default) and reads peers' communicator-allocated arrays
    through ``regions`` where it has them.
    """

    external_bytes = 0  # no EXTERNAL chunks: a slot of that kind is corrupt

    def __init__(self, seg: Segment, ctx: int, strict: bool, settings: Settings,
                 liveness: Liveness, timeout: float,
                 watch: Callable[[int], None] | None = None, regions: Regions | None = None):
        self.seg, self.ctx, self.strict = seg, ctx, strict
        self.settings, self.liveness, self.timeout = settings, liveness, timeout
        self.watch_peers = seg.watch if watch is None else watch
        self.rank, self.size = rank, size = seg.rank, seg.size
        self.slot_bytes, self.cma_bytes = settings.slot_bytes, settings.cma_bytes
        self.out_ch = {p: seg.channel(ctx, rank, p) for p in range(size) if p != rank}
        self.in_ch = {p: seg.channel(ctx, p, rank) for p in range(size) if p != rank}
        self.peers = list(self.out_ch)
        self.sendq = {p: collections.deque() for p in self.out_ch}
        self.unacked = {p: collections.deque() for p in self.out_ch}  # rendezvous sends
        self.rts_sent = dict.fromkeys(self.out_ch, 0)
        self.scratch = np.empty(SCRATCH_BYTES, np.uint8)
        self.posted = {p: collections.deque() for p in self.in_ch}
        self.unexpected = {p: collections.deque() for p in self.in_ch}
        self.incoming = dict.fromkeys(self.in_ch)
        self.lock = threading.RLock()
        self.what = "collective" if strict else "send/recv"
        self.xchg_bytes = settings.xchg_bytes if strict else 0
        # the staged exchange, on the coll endpoint of more than one rank
        self.xchg = Exchange(seg, self.peers, settings.xchg_bytes) \
            if strict and size > 1 else None
        # the one-copy path (one_copy.py), where the ranks may read each other's memory
        self.one_copy = strict and settings.one_copy
        self.reader = OneCopy(seg, self.peers, liveness, regions) \
            if self.one_copy and size > 1 else None

    def release(self) -> None:
        self.out_ch = self.in_ch = {}
        if self.xchg is not None:
            self.xchg.release()  # views of the segment

    # -- the hook for EXTERNAL chunks -----------------------------------------
    def fill_external(self, peer: int, k: int, s: Send) -> int:
        """Put the next chunk of ``s`` where the receiver will find it for
        slot k of the channel to ``peer``; returns its size."""
        raise NotImplementedError

    def drain_external(self, peer: int, k: int, cur, n: int) -> None:
        """Take the ``n`` bytes of EXTERNAL slot k from ``peer`` into ``cur``."""
        raise NotImplementedError

    def unexpected_message(self, tag: int, total: int, kind: int) -> Unexpected:
        """A buffer for a message of ``kind`` that arrived before its receive."""
        return Unexpected(tag, total)

    def deliver(self, m: Unexpected) -> None:
        """Hand a complete unexpected message to the receive that claimed it."""
        r = m.waiter
        r.consume(m.buf)
        r.finished = True

    # -- posting ----------------------------------------------------------
    def _check_peer(self, peer: int) -> None:
        if peer not in self.out_ch:
            raise ValueError(f"peer {peer} is not another rank of this communicator "
                             f"(size {self.size}, rank {self.rank})")

    def isend(self, buf, peer, tag=None) -> Request:
        return self.enqueue(Send(self, peer, as_bytes(buf), self.tag if tag is None else tag))

    def irecv_tail(self, out, peer: int, skip: int) -> Request:
        """Receive the bytes from ``skip`` on of a rendezvous message (see
        ``probe``) into ``out``, whose sender places its first ``skip``
        bytes itself (``write_into``); the message completes as a whole."""
        return self.post(Recv(self, peer, self.tag, as_bytes(out), skip=skip))

    def write_into(self, peer: int, addr: int, src) -> None:
        """Copy ``src`` (contiguous) to ``addr`` in ``peer``'s memory, with
        process_vm_writev (``one_copy``): a rank that died raises
        PeerFailure.  Not counted: the receiver counts its message whole."""
        try:
            _cma.write(self.liveness.pids[peer], addr, as_bytes(src))
        except OSError as e:
            raise self._cma_error(peer, f"writing into rank {peer}'s memory failed: {e}", e) \
                from None

    def _cma_error(self, peer: int, failed: str, e: OSError) -> CollectiveError:
        """What a failed read of ``peer``'s memory or write into it (``e``)
        raises: PeerFailure where the peer has died (ESRCH: its memory is
        gone, though it may not be reaped yet), else ``failed``."""
        if e.errno == errno.ESRCH or self.liveness.dead([peer]):
            return PeerFailure(f"rank(s) [{peer}] died during {self.what}", ranks=[peer])
        return CollectiveError(failed, ranks=[peer])

    def isend_read(self, buf, peer) -> Request:
        """A rendezvous send (the receiver reads ``buf`` with
        process_vm_readv) where the ranks may read each other's memory
        (``one_copy``), whatever ``cma_bytes`` says, for a numpy ``buf``;
        else ``isend``."""
        if not (self.one_copy and isinstance(buf, np.ndarray) and buf.nbytes):
            return self.isend(buf, peer)
        s = Send(self, peer, as_bytes(buf), self.tag)
        s.rndv, s.chunks = True, 1
        return self.enqueue(s)

    def enqueue(self, op: Send) -> Request:
        """Queue a send behind the others to its peer; start it if it is first."""
        self._check_peer(op.peer)
        with self.lock:
            self.sendq[op.peer].append(op)
            if len(self.sendq[op.peer]) == 1:
                self._push(op.peer)
        return op

    def irecv(self, out, peer, tag=None) -> Request:
        return self.post(Recv(self, peer, self.tag if tag is None else tag, as_bytes(out)))

    def irecv_reduce(self, acc, peer, op: Reducer, tag=None, src=None) -> Request:
        return self.post(Recv(self, peer, self.tag if tag is None else tag,
                              as_bytes(acc), acc.reshape(-1), op,
                              src=None if src is None else src.reshape(-1)))

    def post(self, r: Recv) -> Request:
        """Post a receive: match it to an unexpected message, or queue it."""
        self._check_peer(r.peer)
        with self.lock:
            for m in self.unexpected[r.peer]:
                if m.tag == r.tag:
                    self.unexpected[r.peer].remove(m)
                    self._check_total(r, m.total)
                    r.source = m
                    m.waiter = r
                    if m.finished:
                        self.deliver(m)
                    return r
            self.posted[r.peer].append(r)
            self._pull(r.peer)
        return r

    # -- progress ---------------------------------------------------------
    def _push(self, peer: int) -> bool:
        q = self.sendq[peer]
        if not q:
            return False
        ch = self.out_ch[peer]
        u32 = self.seg.u32
        head = int(u32[ch.head])
        free = ch.nslots - ((head - int(u32[ch.tail])) & MASK)
        moved = False
        while q and free > 0:
            s = q[0]
            k = head & (ch.nslots - 1)
            if s.rndv:
                ch.data[k][:RNDV_BYTES].view(np.int64)[:] = (os.getpid(), address(s.data))
                ch.hdr[k][:] = (s.tag, s.data.nbytes, 0, RNDV_BYTES, RENDEZVOUS, s.call_bytes)
            elif s.external:  # the subclass places the chunk; the slot holds its header
                n = self.fill_external(peer, k, s)
                ch.hdr[k][:] = (s.tag, s.data.nbytes, s.off, n, EXTERNAL, s.call_bytes)
                s.off += n
            else:
                n = min(ch.slot_bytes, s.data.nbytes - s.off)
                if n:
                    np.copyto(ch.data[k][:n], s.data[s.off:s.off + n])
                ch.hdr[k][:] = (s.tag, s.data.nbytes, s.off, n, EAGER, s.call_bytes)
                s.off += n
            head = (head + 1) & MASK
            u32[ch.head] = head
            s.chunks -= 1
            free -= 1
            moved = True
            if s.chunks == 0:
                q.popleft()
                if s.rndv:  # done once the receiver has read it: see _acked
                    self.rts_sent[peer] = s.target = (self.rts_sent[peer] + 1) & MASK
                    self.unacked[peer].append(s)
                else:
                    s.finished = True
                    self.sent_bytes += s.data.nbytes
        if moved:
            self.seg.ring(peer)
        return moved

    def _acked(self, peer: int) -> bool:
        """Complete the rendezvous sends that the receiver has finished reading."""
        q = self.unacked[peer]
        acked = self.seg.u32[self.out_ch[peer].acked]
        moved = False
        while q and ((acked - q[0].target) & MASK) < (1 << 31):
            s = q.popleft()
            s.finished = True
            self.sent_bytes += s.data.nbytes
            moved = True
        return moved

    def unclaimed(self, seq: int) -> None:
        """Raise for the first waiting slot of a peer that belongs to
        collective ``seq`` under another call key (``mismatched``), or to an
        earlier collective (``stray``: every call takes all its messages):
        nothing here will receive it.  A few words read per peer."""
        u32 = self.seg.u32
        for p, ch in self.in_ch.items():
            tail = int(u32[ch.tail])
            if int(u32[ch.head]) != tail and not self.posted[p] and self.incoming[p] is None:
                tag, *_, key = ch.hdr[tail & (ch.nslots - 1)].tolist()
                if tag == seq and key != self.call_bytes and self.call_bytes != UNCHECKED:
                    raise mismatched(p, seq, key, self.rank, self.call_bytes)
                if 0 < seq - tag < STRAY_CALLS:
                    raise stray(p, tag)

    def _pull(self, peer: int) -> bool:
        ch = self.in_ch[peer]
        u32 = self.seg.u32
        head, tail = int(u32[ch.head]), int(u32[ch.tail])
        if ((head - tail) & MASK) > ch.nslots:
            raise CollectiveError(f"corrupt channel from rank {peer}: "
                                  f"{(head - tail) & MASK} slots full of {ch.nslots}",
                                  ranks=[peer])
        moved = False
        while head != tail:
            k = tail & (ch.nslots - 1)
            tag, total, off, n, kind, key = ch.hdr[k].tolist()
            cur = self.incoming[peer]
            if cur is None:
                if off != 0:
                    raise self._corrupt(peer, f"message starts at offset {off}")
                cur = self._match(peer, tag, total, kind, key)
                if cur is None:
                    break  # collective data waits in its slot for its receive
                self.incoming[peer] = cur
            if key != cur.call_bytes:  # a chunk of a message whose first chunk matched
                raise self._corrupt(peer, f"slot of call size {key} continues a message "
                                          f"of call size {cur.call_bytes}")
            if kind == RENDEZVOUS and off == 0 and n == RNDV_BYTES and total == cur.total \
                    and tag == cur.tag:
                self._read_remote(peer, cur, ch.data[k][:RNDV_BYTES].view(np.int64).tolist())
                u32[ch.acked] = (u32[ch.acked] + 1) & MASK
            elif kind == EAGER and off == cur.off and n == min(ch.slot_bytes, total - off) \
                    and total == cur.total and tag == cur.tag:
                cur.consume(ch.data[k][:n])
            elif kind == EXTERNAL and self.external_bytes and off == cur.off \
                    and n == min(self.external_bytes, total - off) and total == cur.total \
                    and tag == cur.tag:
                self.drain_external(peer, k, cur, n)
            else:
                raise self._corrupt(peer, f"slot (kind {kind}, tag {tag}, {total} bytes, "
                                          f"offset {off}, {n} bytes) does not continue the message")
            tail = (tail + 1) & MASK
            u32[ch.tail] = tail
            moved = True
            if cur.off >= cur.total:
                self.incoming[peer] = None
                self.recv_bytes += cur.total
                cur.finished = True
                if isinstance(cur, Unexpected):
                    if cur.waiter is not None:
                        self.deliver(cur)
                else:
                    self.posted[peer].remove(cur)
        if moved:
            self.seg.ring(peer)
        return moved

    def _read_remote(self, peer: int, cur, where: list) -> None:
        pid, addr = where
        if pid != self.liveness.pids[peer]:
            raise self._corrupt(peer, f"rendezvous names process {pid}, not rank {peer}'s")
        try:
            cur.read_remote(pid, addr, self.scratch)
        except OSError as e:
            raise self._cma_error(peer, f"reading rank {peer}'s message failed: {e}", e) from None

    def _match(self, peer: int, tag: int, total: int, kind: int = EAGER, key: int = 0):
        posted = self.posted[peer]
        if self.strict:
            if not posted:
                return None
            r = posted[0]
            if tag != r.tag:
                raise CollectiveError(
                    f"mismatched collectives: rank {peer} sent a message of call "
                    f"#{tag} while this rank is in call #{r.tag}", ranks=[peer])
            if key != r.call_bytes:  # the calls move different numbers of bytes
                raise mismatched(peer, tag, key, self.rank, r.call_bytes)
            self._check_total(r, total)
            return r
        for r in posted:
            if r.tag == tag:
                self._check_total(r, total)
                return r
        if not 0 <= total <= MAX_MESSAGE_BYTES:
            raise self._corrupt(peer, f"message of {total} bytes")
        try:
            m = self.unexpected_message(tag, total, kind)
        except MemoryError:
            raise CollectiveError(f"rank {peer} sent a message of {total} bytes with tag {tag} "
                                  f"before its receive was posted, and there is no memory to "
                                  f"hold it", ranks=[peer]) from None
        self.unexpected[peer].append(m)
        return m

    def _check_total(self, r: Recv, total: int) -> None:
        if total != r.total:
            raise CollectiveError(
                f"rank {r.peer} sent {total} bytes where rank {self.rank} expects "
                f"{r.total} (shape, dtype or count differ between ranks)", ranks=[r.peer])

    def _corrupt(self, peer: int, what: str) -> CollectiveError:
        return CollectiveError(f"corrupt message from rank {peer}: {what}", ranks=[peer])

    def _progress(self) -> bool:
        moved = False
        for p in self.out_ch:
            if self.sendq[p]:
                moved |= self._push(p)
            if self.unacked[p]:
                moved |= self._acked(p)
        for p in self.in_ch:
            if self.posted[p] or not self.strict:
                moved |= self._pull(p)
        return moved

    # -- completion and waiting --------------------------------------------
    def test(self, req) -> bool:
        with self.lock:
            self._progress()
        return req.finished

    def waitall(self, reqs: Iterable[Request]) -> None:
        pending = [r for r in reqs if not r.finished]
        if not pending:
            return

        def step():
            with self.lock:
                moved = self._progress()
            return all(r.finished for r in pending), moved
        self.block(step, lambda: self._waited_peers(pending), lambda: self._missing(pending))

    def probe(self, peers: list[int], least: int = 0) -> dict[int, tuple[int, bool]]:
        """peer -> (bytes, whether it comes by rendezvous) of the next
        message of this collective from each of ``peers`` that has begun to
        arrive, once all have (or ``least`` of them); the messages stay in
        their slots for the receives that take them (a collective's data
        waits for its receive).  A first slot under another call key raises
        ``mismatched``; one of an earlier collective, ``stray``."""
        least = least or len(peers)
        sizes: dict[int, tuple[int, bool]] = {}
        u32, seq = self.seg.u32, self.tag

        def look() -> bool:  # the first slots that have come: all of them?
            for p in peers:
                ch = self.in_ch[p]
                tail = int(u32[ch.tail])
                if p in sizes or int(u32[ch.head]) == tail or self.incoming[p] is not None:
                    continue
                tag, total, _, _, kind, key = ch.hdr[tail & (ch.nslots - 1)].tolist()
                if tag != seq:
                    raise stray(p, tag)
                if key != self.call_bytes and self.call_bytes != UNCHECKED:
                    raise mismatched(p, seq, key, self.rank, self.call_bytes)
                sizes[p] = total, kind == RENDEZVOUS
            return len(sizes) >= least

        def step():
            with self.lock:
                moved = self._progress()
                return look(), moved
        with self.lock:
            ready = look()
        if not ready:  # wait, moving this endpoint's other traffic meanwhile
            self.block(step, lambda: self._waited_peers(()),
                       lambda: [p for p in peers if p not in sizes])
        return sizes

    def block(self, step, peers, missing) -> None:
        """Run ``step() -> (done, moved)`` until done; between fruitless steps,
        watch the doorbell (every event that can let us progress rings it),
        yielding the core to the ranks we wait for, then sleep on it.
        ``peers()``: whose liveness to check; ``missing()``: whom to name."""
        seg = self.seg
        dl = Deadline(self.timeout, self.rank)
        watch = self._watch if self.strict else None
        spin = self.settings.spin
        while True:
            seen = seg.doorbell()
            done, moved = step()
            if done:
                return
            if moved:
                dl.progress()
                continue
            dl.check(self.liveness, peers, missing, self.what, watch)  # rate-limited inside
            for _ in range(spin):
                if seg.doorbell() != seen:
                    break
                _yield()
            else:
                seg.sleep(self.ctx, seen, dl.remaining())

    def _watch(self) -> None:
        """A collective's look at its peers' rank blocks (``Segment.watch``)."""
        self.watch_peers(self.tag)

    def _waited_peers(self, pending) -> list[int]:
        if self.strict:
            return [p for p in range(self.size) if p != self.rank]
        return sorted({r.peer for r in pending})

    def _missing(self, pending) -> list[int]:
        if self.strict:
            seq = self.tag
            late = [p for p in range(self.size) if p != self.rank and self.seg.arrived(p) < seq]
            if late:
                return late
        return sorted({r.peer for r in pending if not r.finished})

    # -- one copy: peers read a source where it lies ----------------------------
    def expose(self, buf, huge: bool = False) -> Remote:
        """Publish where ``buf`` lies, for the peers to read in place
        (``one_copy``; ``huge``: with its share on huge pages)."""
        if self.reader is None:
            return super().expose(buf)
        return self.reader.expose(self, buf, huge)

    def gather_blocks(self, x, out, nb: int, off: int, own_off: int, own: int,
                      only: int = -1) -> bool:
        """The one-copy gather of blocks in one compiled call (``OneCopy.gather``)."""
        return self.reader is not None and \
            self.reader.gather(self, x, out, nb, off, own_off, own, only)

    # -- exchange through the exchange buffers -------------------------------
    def stage(self, count: int, like: np.ndarray) -> np.ndarray:
        """This rank's exchange buffer for the next exchange(), as ``count``
        elements of ``like``'s dtype to fill in place, where that exchange
        goes through the buffers (see ``exchange``); else a new array."""
        staged = self.xchg.stage(count, like) if self.xchg is not None else None
        return super().stage(count, like) if staged is None else staged

    def exchange_reduce(self, x: np.ndarray, out: np.ndarray, reducer) -> list[np.ndarray] | None:
        """``exchange(x)`` with the reduction into ``out`` fused in, one
        compiled call reducing with ``reducer`` (``Exchange.fused``): None
        where ``out`` holds the result, else the N contributions to reduce.
        ``x`` fits the exchange buffer.  Counts the bytes as exchange() does."""
        views = self.xchg.fused(reducer, x, out, self.tag, self.call_bytes, self.block)
        nb = x.nbytes * (self.size - 1)
        self.sent_bytes += nb
        self.recv_bytes += nb
        return views

    def exchange(self, buf, root: int | None = None, sent: int | None = None,
                 recv: int | None = None, sink: int | None = None) -> list[np.ndarray]:
        """One copy into this rank's exchange buffer and direct reads of the
        others' where the contribution fits (``exchange``), else messages.
        Counts the bytes: the whole contribution per peer, or ``sent`` and
        ``recv``, the parts the peers read (see ``Endpoint.exchange``)."""
        x = self.xchg
        nb = buf.nbytes if isinstance(buf, np.ndarray) else sum(p.nbytes for p in buf)
        if x is None or nb > self.xchg_bytes:
            return super().exchange(buf, root, sent, recv, sink)
        views = x.run(buf, nb, root, self.tag, self.call_bytes, self.block, sink)
        n, me = self.size, self.rank
        if root is None:
            self.sent_bytes += nb * (n - 1) if sent is None else sent
            self.recv_bytes += nb * (n - 1) if recv is None else recv
        elif root == me:
            self.sent_bytes += nb * (n - 1)
        else:
            self.recv_bytes += nb
        return views
