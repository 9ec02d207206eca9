"""POSIX shared-memory transport for the ranks of one host.

One segment per communicator, created by rank 0 under an unguessable name
with O_EXCL and mode 0600, opened by the others, and unlinked as soon as all
have mapped it: once a communicator is up, nothing is left in /dev/shm even
if the job is killed (only a kill inside the few milliseconds of start-up
between creation and unlink can leave a segment behind).

Layout (all offsets 64-byte aligned)::

    rank block   per rank: doorbell u32 | sleeping u32 per endpoint | arrived u64
                 | exchange sequence u64 | per buffer: bytes, call (u64)
    exchange     per rank, two buffers of xchg_bytes (alternating calls)
    channels     per endpoint (coll, p2p), per ordered pair (src -> dst):
                 head u32 (sender writes) | tail u32 (receiver writes)
                              | acked u32 (receiver: rendezvous messages read)
                 nslots x [header: tag, total, offset, nbytes, kind (i64) | data]

A message is cut into slot-sized chunks.  The sender copies a chunk into a
free slot and bumps ``head``; the receiver copies (or reduces) it out and
bumps ``tail``.  With several slots per channel the sender fills chunk k+1
while the receiver reduces chunk k.  Each side then rings the other's
doorbell; a rank with nothing to do spins a little, then sleeps on its own
doorbell with a futex, so ranks oversubscribing a core do not starve each
other.  Every header read from the segment is checked against the receiving
buffer before a byte is written: a corrupt or hostile peer gets an error,
not an out-of-bounds write.
"""
from __future__ import annotations

import collections
import mmap
import os
import platform
import secrets
import sys
import threading
from typing import Iterable

import numpy as np

from . import _cma, _futex, _wire
from .base import Deadline, Endpoint, Reducer, Request, Transport
from .errors import CollectiveError, PeerFailure

SHM_DIR = "/dev/shm"
SHM_PREFIX = "collectives-"
_MASK = 0xFFFFFFFF
_RANK_BLOCK = 64
# the rank block in u32 and u64 words: doorbell (u32 0), sleeping flags (u32 1,
# 2), arrived (u64 2), exchange sequence (u64 3), size and call per buffer (u64 4..7)
_U_PER_RANK, _Q_PER_RANK = _RANK_BLOCK // 4, _RANK_BLOCK // 8
_Q_XSEQ, _Q_XMETA = 3, 4
_CHAN_CTRL = 128
_HDR = 64


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v else default


# The slot protocol orders its plain stores (data, header, then head) by the
# processor's own store order: x86-64 keeps stores in program order (TSO).
SUPPORTED_MACHINES = ("x86_64", "AMD64")
MAX_MESSAGE_BYTES = 1 << 40


def supported() -> bool:
    return (sys.platform.startswith("linux") and platform.machine() in SUPPORTED_MACHINES
            and _futex.available)


def _settings() -> tuple[int, int, int, int]:
    slot_bytes = _env_int("COLLECTIVES_SHM_SLOT_BYTES", 256 * 1024)
    nslots = _env_int("COLLECTIVES_SHM_SLOTS", 4)
    # the largest contribution that exchange() moves in one copy
    xchg_bytes = _env_int("COLLECTIVES_SHM_XCHG_BYTES", 1024 * 1024)
    # off by default: on the 2-core VM this was measured on, process_vm_readv
    # was no faster than two slot copies (docs/performance.md)
    cma_bytes = _env_int("COLLECTIVES_SHM_CMA_BYTES", 0)
    if slot_bytes % 64 or slot_bytes <= 0:
        raise ValueError("COLLECTIVES_SHM_SLOT_BYTES must be a positive multiple of 64")
    if nslots < 1 or nslots & (nslots - 1):
        raise ValueError("COLLECTIVES_SHM_SLOTS must be a power of two")
    if xchg_bytes % 64 or xchg_bytes < 4096:
        raise ValueError("COLLECTIVES_SHM_XCHG_BYTES must be a multiple of 64, at least 4096")
    return slot_bytes, nslots, xchg_bytes, max(0, cma_bytes)


def rank0_settings(mpicomm, read):
    """``read()`` on rank 0, broadcast; or rank 0's ValueError raised on every rank."""
    settings = None
    if mpicomm.Get_rank() == 0:
        try:
            settings = read()
        except ValueError as e:
            settings = str(e)
    settings = _wire.bcast(mpicomm, settings)
    if isinstance(settings, str):  # every rank raises rank 0's complaint
        raise ValueError(settings)
    return settings


class ShmTransport(Transport):
    name = "shm"

    def __init__(self, mpicomm, timeout: float, pids, local):
        super().__init__(mpicomm.Get_rank(), mpicomm.Get_size(), timeout, pids, local)
        if not supported():
            raise ValueError(f"transport='shm' needs an x86-64 Linux host (this is "
                             f"{platform.machine()}); use transport='mpi'")
        # rank 0's settings hold for all: the layout must be the same everywhere
        self.slot_bytes, self.nslots, self.xchg_bytes, cma_bytes = \
            rank0_settings(mpicomm, _settings)
        # messages of cma_bytes and more go by rendezvous: the receiver copies
        # them straight out of the sender's buffer (one copy instead of two)
        self.cma_bytes = cma_bytes if cma_bytes and _cma.works_between(mpicomm) else 0
        self.spin = _env_int("COLLECTIVES_SPIN", 20)
        n = self.size
        self._chan_bytes = _CHAN_CTRL + self.nslots * (_HDR + self.slot_bytes)
        self._xchg_base = _align(_RANK_BLOCK * n, 4096)
        self._chan_base = self._xchg_base + 2 * n * self.xchg_bytes
        self.xchg_seq = 0
        self._xchg_cache: dict = {}
        total = _align(self._chan_base + 2 * n * n * self._chan_bytes, 4096)
        self._mm = _open_segment(mpicomm, total)
        self._mem = np.frombuffer(self._mm, dtype=np.uint8)
        # scalar control words through memoryviews (plain loads and stores of
        # Python ints, cheaper than numpy scalars); numpy for slot headers
        self._u32 = memoryview(self._mm).cast("I")
        self._q64 = memoryview(self._mm).cast("q")
        self._i64 = self._mem.view(np.int64)
        self._addr = self._mem.ctypes.data
        self.coll = ShmEndpoint(self, 0, strict=True)
        self.p2p = ShmEndpoint(self, 1, strict=False)

    # -- rank block -------------------------------------------------------
    def _db(self, r: int) -> int:
        return (_RANK_BLOCK * r) // 4

    def ring(self, peer: int) -> None:
        i = self._db(peer)
        u32 = self._u32
        u32[i] = (u32[i] + 1) & _MASK
        if u32[i + 1] or u32[i + 2]:
            _futex.wake(self._addr + 4 * i)

    def set_arrived(self, seq: int) -> None:
        self._q64[(_RANK_BLOCK * self.rank + 16) // 8] = seq

    def arrived(self, r: int) -> int:
        return self._q64[(_RANK_BLOCK * r + 16) // 8]

    def xchg_views(self, seq: int, dtype: np.dtype, nbytes: int) -> list[np.ndarray]:
        """Every rank's exchange buffer for call ``seq``, as ``nbytes`` of ``dtype``."""
        key = (seq & 1, dtype, nbytes)
        views = self._xchg_cache.get(key)
        if views is None:
            if len(self._xchg_cache) > 64:
                self._xchg_cache.clear()
            xb = self.xchg_bytes
            base = [self._xchg_base + (2 * r + (seq & 1)) * xb for r in range(self.size)]
            views = [self._mem[b:b + nbytes].view(dtype) for b in base]
            self._xchg_cache[key] = views
        return views

    def sleep(self, ctx: int, seen: int, timeout: float) -> None:
        """Sleep on this rank's doorbell; a wake-up lost to a race costs at most 2 ms."""
        i = self._db(self.rank)
        self._u32[i + 1 + ctx] = 1
        _futex.wait(self._addr + 4 * i, seen, max(0.0, min(timeout, 0.002)))
        self._u32[i + 1 + ctx] = 0

    def doorbell(self) -> int:
        return self._u32[self._db(self.rank)]

    # -- channels ---------------------------------------------------------
    def channel(self, ctx: int, src: int, dst: int) -> "_Channel":
        off = self._chan_base + ((ctx * self.size + src) * self.size + dst) * self._chan_bytes
        return _Channel(self, off)

    def close(self) -> None:
        for ep in (self.coll, self.p2p):
            ep.release()
        self._xchg_cache.clear()
        for mv in (self._u32, self._q64):
            mv.release()
        self._mem = self._u32 = self._q64 = self._i64 = None
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass  # a view is still alive somewhere; the mapping goes with it


class _Channel:
    """One direction between one pair: head, tail and the slots."""

    __slots__ = ("head", "tail", "acked", "hdr", "data", "nslots", "slot_bytes")

    def __init__(self, t: ShmTransport, off: int):
        self.head = off // 4
        self.tail = (off + 64) // 4
        self.acked = (off + 96) // 4
        self.nslots, self.slot_bytes = t.nslots, t.slot_bytes
        base = off + _CHAN_CTRL
        step = _HDR + t.slot_bytes
        self.hdr = [t._i64[(base + k * step) // 8:(base + k * step) // 8 + 5]
                    for k in range(t.nslots)]
        self.data = [t._mem[base + k * step + _HDR:base + (k + 1) * step]
                     for k in range(t.nslots)]


# slot kinds: data in the slot / (pid, address) of the data / data in the
# sender's device slot of the same index (the cuda transport, transports/cuda.py)
EAGER, RENDEZVOUS, DEVICE = 0, 1, 2


class _Send(Request):
    __slots__ = ("ep", "peer", "data", "tag", "off", "chunks", "finished", "rndv", "target")
    dev = False  # device data (the cuda transport's subclass)

    def __init__(self, ep, peer, data, tag):
        self.ep, self.peer, self.data, self.tag = ep, peer, data, tag
        self.off = 0
        self.rndv = 0 < ep.t.cma_bytes <= data.nbytes
        self.chunks = 1 if self.rndv else max(1, -(-data.nbytes // ep.t.slot_bytes))
        self.target = 0  # the acked count that completes a rendezvous send
        self.finished = False

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.finished or self.ep.test(self)


class _Recv(Request):
    """A posted receive; ``acc``/``op`` set for a receive-and-reduce."""

    __slots__ = ("ep", "peer", "tag", "out", "acc", "op", "total", "off",
                 "finished", "source")
    dev = False

    def __init__(self, ep, peer, tag, out, acc=None, op=None):
        self.ep, self.peer, self.tag = ep, peer, tag
        self.out = out  # uint8 view of the destination
        self.acc, self.op = acc, op
        self.total = out.nbytes
        self.off = 0
        self.finished = False
        self.source = None  # an _Unexpected message this receive was matched to

    def consume(self, chunk: np.ndarray) -> None:
        n = chunk.nbytes
        if self.op is None:
            np.copyto(self.out[self.off:self.off + n], chunk)
        else:
            isz = self.acc.itemsize
            a = self.acc[self.off // isz:(self.off + n) // isz]
            self.op(a, chunk.view(self.acc.dtype), out=a)
        self.off += n

    def read_remote(self, pid: int, addr: int, scratch: np.ndarray) -> None:
        """Copy the whole message out of the sender's memory (rendezvous)."""
        if self.op is None:
            _cma.read(pid, addr, self.out)
            self.off = self.total
            return
        step = scratch.nbytes  # reduce chunk by chunk through a cache-sized buffer
        while self.off < self.total:
            n = min(step, self.total - self.off)
            _cma.read(pid, addr + self.off, scratch[:n])
            self.consume(scratch[:n])

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.finished or self.ep.test(self)


class _Unexpected:
    """A point-to-point message that arrived before its receive was posted."""

    __slots__ = ("tag", "total", "off", "buf", "finished", "waiter")
    dev = False

    def __init__(self, tag, total):
        self.tag, self.total, self.off = tag, total, 0
        self.buf = np.empty(total, np.uint8)
        self.finished = False
        self.waiter = None

    def consume(self, chunk: np.ndarray) -> None:
        np.copyto(self.buf[self.off:self.off + chunk.nbytes], chunk)
        self.off += chunk.nbytes

    def read_remote(self, pid: int, addr: int, scratch: np.ndarray) -> None:
        _cma.read(pid, addr, self.buf)
        self.off = self.total


class ShmEndpoint(Endpoint):
    dev_slot_bytes = 0  # the cuda transport's device chunk size (none here)

    def __init__(self, t: ShmTransport, ctx: int, strict: bool):
        self.t, self.ctx, self.strict = t, ctx, strict
        self.rank, self.size = t.rank, t.size
        self.out_ch = {p: t.channel(ctx, t.rank, p) for p in range(t.size) if p != t.rank}
        self.in_ch = {p: t.channel(ctx, p, t.rank) for p in range(t.size) if p != t.rank}
        self.peers = list(self.out_ch)
        self.sendq = {p: collections.deque() for p in self.out_ch}
        self.unacked = {p: collections.deque() for p in self.out_ch}  # rendezvous sends
        self.rts_sent = dict.fromkeys(self.out_ch, 0)
        self.scratch = np.empty(256 * 1024, np.uint8)
        self.posted = {p: collections.deque() for p in self.in_ch}
        self.unexpected = {p: collections.deque() for p in self.in_ch}
        self.incoming = dict.fromkeys(self.in_ch)
        self.lock = threading.RLock()
        self.what = "collective" if strict else "send/recv"
        self.xchg_bytes = t.xchg_bytes if strict else 0
        self._staged = None  # stage()'s array, published by the next exchange()
        self._last: tuple = (None, -1)  # exchange(): dtype, nbytes, views per parity
        # exchange()'s words in the rank blocks: this rank's sequence number and
        # (size, call) per buffer parity; the peers' doorbells, sequence numbers
        # and (size, call) per parity
        me = t.rank
        self._my_seq = _Q_PER_RANK * me + _Q_XSEQ
        self._my_meta = [_Q_PER_RANK * me + _Q_XMETA + 2 * b for b in (0, 1)]
        self._bells = [_U_PER_RANK * p for p in self.peers]
        self._peer_seq = [_Q_PER_RANK * p + _Q_XSEQ for p in self.peers]
        self._peer_meta = [[_Q_PER_RANK * p + _Q_XMETA + 2 * b for p in self.peers]
                           for b in (0, 1)]

    def release(self) -> None:
        self.out_ch = self.in_ch = {}
        self._last, self._staged = (None, -1), None  # views of the segment

    # -- posting ----------------------------------------------------------
    def _check_peer(self, peer: int) -> None:
        if peer not in self.out_ch:
            raise ValueError(f"peer {peer} is not another rank of this communicator "
                             f"(size {self.size}, rank {self.rank})")

    def isend(self, buf, peer, tag=None) -> Request:
        self._check_peer(peer)
        return self._enqueue(_Send(self, peer, _bytes(buf), self.tag if tag is None else tag))

    def _enqueue(self, op: "_Send") -> Request:
        """Queue a send behind the others to its peer; start it if it is first."""
        with self.lock:
            self.sendq[op.peer].append(op)
            if len(self.sendq[op.peer]) == 1:
                self._push(op.peer)
        return op

    def irecv(self, out, peer, tag=None) -> Request:
        return self._post(_Recv(self, peer, self.tag if tag is None else tag, _bytes(out)))

    def irecv_reduce(self, acc, peer, op: Reducer, tag=None) -> Request:
        return self._post(_Recv(self, peer, self.tag if tag is None else tag,
                                _bytes(acc), acc.reshape(-1), op))

    def _post(self, r: _Recv) -> Request:
        self._check_peer(r.peer)
        with self.lock:
            for m in self.unexpected[r.peer]:
                if m.tag == r.tag:
                    self.unexpected[r.peer].remove(m)
                    self._check_total(r, m.total)
                    r.source = m
                    m.waiter = r
                    if m.finished:
                        self._deliver(m)
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
        u32 = self.t._u32
        head = int(u32[ch.head])
        free = ch.nslots - ((head - int(u32[ch.tail])) & _MASK)
        moved = False
        while q and free > 0:
            s = q[0]
            k = head & (ch.nslots - 1)
            if s.rndv:
                ch.data[k][:16].view(np.int64)[:] = (os.getpid(), s.data.ctypes.data)
                ch.hdr[k][:] = (s.tag, s.data.nbytes, 0, 16, RENDEZVOUS)
            elif s.dev:  # the chunk goes into this rank's device slot k
                n = self._fill_device(peer, k, s)
                ch.hdr[k][:] = (s.tag, s.data.nbytes, s.off, n, DEVICE)
                s.off += n
            else:
                n = min(ch.slot_bytes, s.data.nbytes - s.off)
                if n:
                    np.copyto(ch.data[k][:n], s.data[s.off:s.off + n])
                ch.hdr[k][:] = (s.tag, s.data.nbytes, s.off, n, EAGER)
                s.off += n
            head = (head + 1) & _MASK
            u32[ch.head] = head
            s.chunks -= 1
            free -= 1
            moved = True
            if s.chunks == 0:
                q.popleft()
                if s.rndv:  # done once the receiver has read it: see _acked
                    self.rts_sent[peer] = s.target = (self.rts_sent[peer] + 1) & _MASK
                    self.unacked[peer].append(s)
                else:
                    s.finished = True
                    self.sent_bytes += s.data.nbytes
        if moved:
            self.t.ring(peer)
        return moved

    def _acked(self, peer: int) -> bool:
        """Complete the rendezvous sends that the receiver has finished reading."""
        q = self.unacked[peer]
        acked = self.t._u32[self.out_ch[peer].acked]
        moved = False
        while q and ((acked - q[0].target) & _MASK) < (1 << 31):
            s = q.popleft()
            s.finished = True
            self.sent_bytes += s.data.nbytes
            moved = True
        return moved

    def _pull(self, peer: int) -> bool:
        ch = self.in_ch[peer]
        u32 = self.t._u32
        head, tail = int(u32[ch.head]), int(u32[ch.tail])
        if ((head - tail) & _MASK) > ch.nslots:
            raise CollectiveError(f"corrupt channel from rank {peer}: "
                                  f"{(head - tail) & _MASK} slots full of {ch.nslots}",
                                  ranks=[peer])
        moved = False
        while head != tail:
            k = tail & (ch.nslots - 1)
            tag, total, off, n, kind = ch.hdr[k].tolist()
            cur = self.incoming[peer]
            if cur is None:
                if off != 0:
                    raise self._corrupt(peer, f"message starts at offset {off}")
                cur = self._match(peer, tag, total, kind)
                if cur is None:
                    break  # collective data waits in its slot for its receive
                self.incoming[peer] = cur
            if kind == RENDEZVOUS and off == 0 and n == 16 and total == cur.total \
                    and tag == cur.tag:
                self._read_remote(peer, cur, ch.data[k][:16].view(np.int64).tolist())
                u32[ch.acked] = (u32[ch.acked] + 1) & _MASK
            elif kind == EAGER and off == cur.off and n == min(ch.slot_bytes, total - off) \
                    and total == cur.total and tag == cur.tag:
                cur.consume(ch.data[k][:n])
            elif kind == DEVICE and self.dev_slot_bytes and off == cur.off \
                    and n == min(self.dev_slot_bytes, total - off) and total == cur.total \
                    and tag == cur.tag:
                self._drain_device(peer, k, cur, n)
            else:
                raise self._corrupt(peer, f"slot (kind {kind}, tag {tag}, {total} bytes, "
                                          f"offset {off}, {n} bytes) does not continue the message")
            tail = (tail + 1) & _MASK
            u32[ch.tail] = tail
            moved = True
            if cur.off >= cur.total:
                self.incoming[peer] = None
                self.recv_bytes += cur.total
                cur.finished = True
                if isinstance(cur, _Unexpected):
                    if cur.waiter is not None:
                        self._deliver(cur)
                else:
                    self.posted[peer].remove(cur)
        if moved:
            self.t.ring(peer)
        return moved

    def _read_remote(self, peer: int, cur, where: list) -> None:
        pid, addr = where
        if pid != self.t.liveness.pids[peer]:
            raise self._corrupt(peer, f"rendezvous names process {pid}, not rank {peer}'s")
        try:
            cur.read_remote(pid, addr, self.scratch)
        except OSError as e:
            if self.t.liveness.dead([peer]):
                raise PeerFailure(f"rank(s) [{peer}] died during {self.what}",
                                  ranks=[peer]) from None
            raise CollectiveError(f"reading rank {peer}'s message failed: {e}",
                                  ranks=[peer]) from None

    def _match(self, peer: int, tag: int, total: int, kind: int = EAGER):
        posted = self.posted[peer]
        if self.strict:
            if not posted:
                return None
            r = posted[0]
            if tag != r.tag:
                raise CollectiveError(
                    f"mismatched collectives: rank {peer} sent a message of call "
                    f"#{tag} while this rank is in call #{r.tag}", ranks=[peer])
            self._check_total(r, total)
            return r
        for r in posted:
            if r.tag == tag:
                self._check_total(r, total)
                return r
        if not 0 <= total <= MAX_MESSAGE_BYTES:
            raise self._corrupt(peer, f"message of {total} bytes")
        try:
            m = self._unexpected_message(tag, total, kind)
        except MemoryError:
            raise CollectiveError(f"rank {peer} sent a message of {total} bytes with tag {tag} "
                                  f"before its receive was posted, and there is no memory to "
                                  f"hold it", ranks=[peer]) from None
        self.unexpected[peer].append(m)
        return m

    def _unexpected_message(self, tag: int, total: int, kind: int) -> "_Unexpected":
        return _Unexpected(tag, total)

    def _check_total(self, r: _Recv, total: int) -> None:
        if total != r.total:
            raise CollectiveError(
                f"rank {r.peer} sent {total} bytes where rank {self.rank} expects "
                f"{r.total} (shape, dtype or count differ between ranks)", ranks=[r.peer])

    def _corrupt(self, peer: int, what: str) -> CollectiveError:
        return CollectiveError(f"corrupt message from rank {peer}: {what}", ranks=[peer])

    def _deliver(self, m: _Unexpected) -> None:
        r = m.waiter
        r.consume(m.buf)
        r.finished = True

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
        self._block(step, lambda: self._waited_peers(pending), lambda: self._missing(pending))

    def _block(self, step, peers, missing) -> None:
        """Run ``step() -> (done, moved)`` until done; between fruitless steps,
        watch the doorbell (every event that can let us progress rings it),
        yielding the core to the ranks we wait for, then sleep on it."""
        t = self.t
        dl = Deadline(t.timeout, t.rank)
        while True:
            seen = t.doorbell()
            done, moved = step()
            if done:
                return
            if moved:
                dl.progress()
                continue
            dl.check(t.liveness, peers, missing, self.what)  # rate-limited inside
            for _ in range(t.spin):
                if t.doorbell() != seen:
                    break
                _yield()
            else:
                t.sleep(self.ctx, seen, dl.remaining())

    def stage(self, count: int, like: np.ndarray) -> np.ndarray:
        """This rank's exchange buffer for the next exchange(), as ``count``
        elements of ``like``'s dtype to fill in place; exchange() of the array returned
        then publishes it without a copy.  The views that the previous
        exchange() returned stay valid until that exchange() (peers cannot
        reuse their buffers before this rank has published)."""
        nb = count * like.itemsize
        if not self.strict or self.size == 1 or nb > self.xchg_bytes \
                or not isinstance(like, np.ndarray):
            return super().stage(count, like)
        self._staged = self.t.xchg_views(self.t.xchg_seq + 1, like.dtype, nb)[self.rank]
        return self._staged

    def exchange(self, buf, root: int | None = None, sent: int | None = None,
                 recv: int | None = None) -> list[np.ndarray]:
        """One copy into this rank's exchange buffer, then direct reads of the
        others'.  Call k writes buffer k mod 2: a rank in call k has finished
        call k-1, so every peer has entered k-1 and finished reading k-2.
        ``sent``/``recv``: the bytes the peers read of this rank's buffer and
        this rank reads of theirs, where they do not read it all."""
        t, n = self.t, self.size
        if isinstance(buf, np.ndarray):
            pieces, nb, dtype = None, buf.nbytes, buf.dtype
        else:
            pieces, nb, dtype = buf, sum(p.nbytes for p in buf), buf[0].dtype
        if not self.strict or n == 1 or nb > self.xchg_bytes:
            return super().exchange(buf, root, sent, recv)
        t.xchg_seq = k = t.xchg_seq + 1
        if dtype is self._last[0] and nb == self._last[1]:  # the last call's shape again
            views = self._last[2 + (k & 1)]
        else:
            views = t.xchg_views(k, dtype, nb)
            self._last = (dtype, nb, *(t.xchg_views(j, dtype, nb) for j in (0, 1)))
        me = self.rank
        mine = nb if root is None or root == me else 0
        if mine and buf is not self._staged:
            v = views[me]
            if pieces is None:
                v[...] = buf if buf.ndim == 1 else buf.reshape(-1)
            else:
                o = 0
                for p in pieces:
                    np.copyto(v[o:o + p.size], p.reshape(-1))
                    o += p.size
        self._staged = None
        # publish: size and call (kept per buffer, like the data), then the
        # sequence number; then ring every peer (inline: this is the hot path
        # of every small call)
        q, u32, tag, par = t._q64, t._u32, self.tag, k & 1
        w = self._my_meta[par]
        q[w] = mine
        q[w + 1] = tag
        q[self._my_seq] = k
        for i in self._bells:
            u32[i] = (u32[i] + 1) & _MASK
            if u32[i + 1] or u32[i + 2]:
                _futex.wake(t._addr + 4 * i)
        seqs = self._peer_seq
        for _ in range(_PRESPIN):  # a peer a few microseconds behind: no sleep
            for i in seqs:
                if q[i] < k:
                    break
            else:
                break
        else:
            peers = self.peers
            late = list(peers)

            def step():
                nonlocal late
                late = [p for p in late if q[_Q_PER_RANK * p + _Q_XSEQ] < k]
                return not late, False
            self._block(step, lambda: peers, lambda: list(late))
        for p, i in zip(self.peers, self._peer_meta[par]):
            want = nb if root is None or root == p else 0
            if q[i] != want or q[i + 1] != tag:
                raise CollectiveError(
                    f"mismatched collectives: rank {p} contributed {q[i]} bytes to call "
                    f"#{q[i + 1]} where rank {me} expects {want} bytes in call #{tag}",
                    ranks=[p])
        if root is None:
            self.sent_bytes += nb * (n - 1) if sent is None else sent
            self.recv_bytes += nb * (n - 1) if recv is None else recv
        elif root == me:
            self.sent_bytes += nb * (n - 1)
        else:
            self.recv_bytes += nb
        return views

    def _waited_peers(self, pending) -> list[int]:
        if self.strict:
            return [p for p in range(self.size) if p != self.rank]
        return sorted({r.peer for r in pending})

    def _missing(self, pending) -> list[int]:
        if self.strict:
            seq = self.tag
            late = [p for p in range(self.size) if p != self.rank and self.t.arrived(p) < seq]
            if late:
                return late
        return sorted({r.peer for r in pending if not r.finished})


_yield = os.sched_yield
# how many times exchange() looks for late peers before it waits like any call
_PRESPIN = 8


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _open_segment(mpicomm, nbytes: int) -> mmap.mmap:
    """Create (rank 0), open (all), then unlink the communicator's segment."""
    rank = mpicomm.Get_rank()
    name, err = None, None
    if rank == 0:
        try:
            st = os.statvfs(SHM_DIR)
            if st.f_bavail * st.f_frsize < nbytes:
                raise OSError(f"{SHM_DIR} has {st.f_bavail * st.f_frsize} bytes free; "
                              f"set COLLECTIVES_SHM_SLOT_BYTES or COLLECTIVES_SHM_SLOTS lower")
            name = SHM_PREFIX + secrets.token_hex(16)
            fd = os.open(os.path.join(SHM_DIR, name),
                         os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.ftruncate(fd, nbytes)
            finally:
                os.close(fd)
        except OSError as e:
            name, err = None, e
    name = _wire.bcast(mpicomm, name, root=0)
    if name is None:
        raise CollectiveError(f"could not create a shared-memory segment of {nbytes} "
                              f"bytes in {SHM_DIR}: {err or 'see rank 0'}")
    path = os.path.join(SHM_DIR, name)
    mm, err = None, None
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_size != nbytes:
                raise OSError(f"segment {path} has the wrong size")
            mm = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
    except OSError as e:
        err = e
    try:
        ok = _wire.all_true(mpicomm, mm is not None)
    finally:
        if rank == 0:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    # No rank returns (and so none can abort the job) before the name is gone.
    mpicomm.Barrier()
    if not ok:
        raise CollectiveError(f"a rank could not open the shared-memory segment: {err or 'see other ranks'}")
    return mm

