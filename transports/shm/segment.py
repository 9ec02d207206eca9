"""The shared-memory segment: its creation and unlink, its layout, and
``Segment``, one rank's mapping of it with the words every part of the
transport shares (doorbells, sleeping flags, arrival and failure words).

One segment per communicator, created by rank 0 under an unguessable name
with O_EXCL and mode 0600, opened by the others, and unlinked as soon as all
have mapped it: once a communicator is up, nothing is left in /dev/shm even
if the job is killed (only a kill inside the few milliseconds of start-up
between creation and unlink can leave a segment behind).

Layout (every offset named below; all 64-byte aligned)::

    rank block   per rank: doorbell u32 | sleeping u32 per endpoint | arrived,
                 its call size (i64) | exchanged i64 | per exchange buffer:
                 bytes, call, call size (i64) | failed, note length (i64) | note
    exchange     per rank, two buffers of xchg_bytes (alternating calls)
    channels     per endpoint (coll, p2p), per ordered pair (src -> dst):
                 head u32 (sender writes) | tail u32 (receiver writes)
                              | acked u32 (receiver: rendezvous messages read)
                 nslots x [header: tag, total, offset, nbytes, kind, key (i64)
                           | data]
    one-copy     per rank, a line: posted, address, bytes, call, call size,
                 done (i64; one_copy.py), after everything above so that no
                 offset before it moves
"""
from __future__ import annotations

import mmap
import os
import secrets

import numpy as np

from .. import _wire
from ..errors import CollectiveError, mismatched, peer_notice
from . import _futex

SHM_DIR = "/dev/shm"
SHM_PREFIX = "collectives-"
PAGE = 4096  # the exchange and channel areas start on page boundaries
MASK = 0xFFFFFFFF  # the u32 words (doorbells, head, tail, acked) count modulo 2**32

# The rank block of rank r: RANK_BLOCK bytes at RANK_BLOCK * r.  Byte offsets:
RANK_BLOCK = 512
DOORBELL = 0     # u32, incremented by anyone who has news for rank r
SLEEPING = 4     # u32 per endpoint (coll at +4, p2p at +8): 1 while r sleeps in a wait on it
ARRIVED = 16     # i64, the sequence number of the last collective r entered
ARRIVED_KEY = 24  # i64, its call size (ARRIVED is 0 while r rewrites this)
EXCHANGED = 32   # i64, the number of the last exchange r has published
XMETA = 40       # per exchange buffer b, at XMETA + XMETA_STEP * b: the bytes (i64)
XMETA_STEP = 24  # of r's exchange in it; XMETA_CALL further its collective, and
XMETA_CALL = 8   # XMETA_KEY further that collective's call size (i64 each)
XMETA_KEY = 16
FAILED = 88      # i64, the collective in which r detected an error and gave up (0: none)
NOTE_LEN = 96    # i64, the length of r's note: what it detected, UTF-8, from NOTE on
NOTE = 128
NOTE_BYTES = RANK_BLOCK - NOTE  # the longest note

# A channel, at its offset.  Byte offsets (head and tail on lines of their own):
HEAD = 0         # u32, slots filled, written by the sender only
TAIL = 64        # u32, slots emptied, written by the receiver only
ACKED = 96       # u32, rendezvous messages read, written by the receiver only
SLOTS = 128      # the first slot; each slot is a header then slot_bytes of data
SLOT_HEADER = 64
# The fields of a slot header, i64 each, in this order (KEY: the sender's call
# size, on the coll endpoint; 0 on p2p):
TAG, TOTAL, OFFSET, NBYTES, KIND, KEY = range(6)
HEADER_FIELDS = 6

# The one-copy block of rank r (one_copy.py): one line at Layout.direct(r),
# written by r only.  The fields, i64 each, in this order: the number of r's
# last published source, where it lies (address in r's memory, bytes), the
# collective and call size it belongs to, and the number of the last
# publication whose reads r has finished.
ONE_COPY_BLOCK = 64
# D_HUGE: the share of the source that huge pages back, in 1/1000 (where asked)
D_POSTED, D_ADDR, D_BYTES, D_CALL, D_KEY, D_DONE, D_HUGE = range(7)


def align(n: int, a: int) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return -(-n // a) * a


class Layout:
    """Where everything lies in the segment of ``n`` ranks (byte offsets)."""

    def __init__(self, n: int, nslots: int, slot_bytes: int, xchg_bytes: int):
        self.n, self.nslots, self.slot_bytes, self.xchg_bytes = n, nslots, slot_bytes, xchg_bytes
        self.slot_step = SLOT_HEADER + slot_bytes
        self.chan_bytes = SLOTS + nslots * self.slot_step
        self.xchg_base = align(RANK_BLOCK * n, PAGE)
        self.chan_base = self.xchg_base + 2 * n * xchg_bytes
        self.one_copy_base = self.chan_base + 2 * n * n * self.chan_bytes
        self.total = align(self.one_copy_base + n * ONE_COPY_BLOCK, PAGE)

    def u32(self, r: int, field: int) -> int:
        """Index, in u32 words, of ``field`` of rank r's block."""
        return (RANK_BLOCK * r + field) // 4

    def i64(self, r: int, field: int) -> int:
        """Index, in i64 words, of ``field`` of rank r's block."""
        return (RANK_BLOCK * r + field) // 8

    def xmeta(self, r: int, parity: int) -> int:
        """Index, in i64 words, of the bytes of rank r's exchange in buffer
        ``parity``; the call and the call size follow it."""
        return self.i64(r, XMETA + XMETA_STEP * parity)

    def note(self, r: int) -> int:
        """Byte offset of rank r's note."""
        return RANK_BLOCK * r + NOTE

    def xchg(self, r: int, parity: int) -> int:
        """Rank r's exchange buffer of ``parity`` (exchange k uses k mod 2)."""
        return self.xchg_base + (2 * r + parity) * self.xchg_bytes

    def channel(self, ctx: int, src: int, dst: int) -> int:
        """Channel src -> dst of endpoint ``ctx`` (coll 0, p2p 1)."""
        return self.chan_base + ((ctx * self.n + src) * self.n + dst) * self.chan_bytes

    def one_copy(self, r: int) -> int:
        """Index, in i64 words, of rank r's one-copy block (its D_POSTED)."""
        return (self.one_copy_base + r * ONE_COPY_BLOCK) // 8

    def slot(self, chan: int, k: int) -> int:
        """Slot k of the channel at ``chan``: its header, then its data."""
        return chan + SLOTS + k * self.slot_step


class Channel:
    """One direction between one pair: the indices of head, tail and acked
    (u32 words), and each slot's header (i64 fields) and data, as views."""

    __slots__ = ("head", "tail", "acked", "hdr", "data", "nslots", "slot_bytes")

    def __init__(self, layout: Layout, mem: np.ndarray, off: int):
        self.head, self.tail, self.acked = ((off + f) // 4 for f in (HEAD, TAIL, ACKED))
        self.nslots, self.slot_bytes = layout.nslots, layout.slot_bytes
        i64 = mem.view(np.int64)
        slots = [layout.slot(off, k) for k in range(layout.nslots)]
        self.hdr = [i64[s // 8:s // 8 + HEADER_FIELDS] for s in slots]
        self.data = [mem[s + SLOT_HEADER:s + layout.slot_step] for s in slots]


def open_segment(mpicomm, nbytes: int) -> mmap.mmap:
    """Create (rank 0), open (all), then unlink the communicator's segment."""
    rank = mpicomm.Get_rank()
    name, err = None, None
    if rank == 0:
        try:
            name = create(nbytes)
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


def create(nbytes: int, hint: str = "; set COLLECTIVES_SHM_SLOT_BYTES or "
           "COLLECTIVES_SHM_SLOTS lower") -> str:
    """A new file of ``nbytes`` in /dev/shm under a fresh unguessable name
    (the segment's, or a region's: regions.py), or OSError (``hint``: what
    to do where /dev/shm lacks the room)."""
    st = os.statvfs(SHM_DIR)
    if st.f_bavail * st.f_frsize < nbytes:
        raise OSError(f"{SHM_DIR} has {st.f_bavail * st.f_frsize} bytes free{hint}")
    name = SHM_PREFIX + secrets.token_hex(16)
    fd = os.open(os.path.join(SHM_DIR, name),
                 os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)
    return name


class Segment:
    """Rank ``rank``'s mapping of a segment laid out as ``layout`` says: the
    bytes (``mem``, and ``u32``/``q64`` for the control words as plain Python
    ints: cheaper than numpy scalars), their address, and the words of the
    rank blocks that every part of the transport uses -- doorbells and
    sleeping flags (``ring``, ``sleep``, ``doorbell``), arrival (``set_arrived``,
    ``arrived``) and the failure path (``notify``, ``watch``).  ``buf`` is the
    mapping (``open_segment``'s; ``close`` closes it) or any writable buffer
    of ``layout.total`` bytes (a test's)."""

    def __init__(self, buf, layout: Layout, rank: int):
        self.layout, self.rank, self.size = layout, rank, layout.n
        self._buf = buf
        self.mem = np.frombuffer(buf, dtype=np.uint8)
        if self.mem.nbytes < layout.total:
            raise ValueError(f"a segment of {layout.total} bytes in a buffer of {self.mem.nbytes}")
        self.u32 = memoryview(buf).cast("B").cast("I")
        self.q64 = memoryview(buf).cast("B").cast("q")
        self.addr = self.mem.ctypes.data
        n = layout.n  # each rank's doorbell and first sleeping flag, as u32 indices
        self.bells = [layout.u32(r, DOORBELL) for r in range(n)]
        self.sleeping = [layout.u32(r, SLEEPING) for r in range(n)]
        self.others = [p for p in range(n) if p != rank]
        # every rank's arrival (collective, call size) and failure words, as i64 indices
        self.board = [(layout.i64(r, ARRIVED), layout.i64(r, ARRIVED_KEY)) for r in range(n)]
        self.failed = [layout.i64(r, FAILED) for r in range(n)]

    # -- doorbells ----------------------------------------------------------
    def ring(self, peer: int) -> None:
        """Tell ``peer`` there is news: bump its doorbell, wake it if it sleeps."""
        i, s = self.bells[peer], self.sleeping[peer]
        u32 = self.u32
        u32[i] = (u32[i] + 1) & MASK
        if u32[s] or u32[s + 1]:  # the SLEEPING flag of coll (ctx 0) or of p2p (ctx 1)
            _futex.wake(self.addr + 4 * i)

    def sleep(self, ctx: int, seen: int, timeout: float) -> None:
        """Sleep on this rank's doorbell; a wake-up lost to a race costs at most 2 ms."""
        flag = self.sleeping[self.rank] + ctx
        self.u32[flag] = 1
        _futex.wait(self.addr + 4 * self.bells[self.rank], seen, max(0.0, min(timeout, 0.002)))
        self.u32[flag] = 0

    def doorbell(self) -> int:
        return self.u32[self.bells[self.rank]]

    def channel(self, ctx: int, src: int, dst: int) -> Channel:
        return Channel(self.layout, self.mem, self.layout.channel(ctx, src, dst))

    # -- arrival ------------------------------------------------------------
    def set_arrived(self, seq: int, call_bytes: int = 0) -> None:
        # ARRIVED is 0 while the call size changes: a peer that reads the same
        # sequence number before and after it has read that call's size
        q, (a, k) = self.q64, self.board[self.rank]
        q[a] = 0
        q[k] = call_bytes
        q[a] = seq

    def arrived(self, r: int) -> int:
        return self.q64[self.board[r][0]]

    # -- the failure path ---------------------------------------------------
    def notify(self, seq: int, text: str) -> None:
        """Write this rank's note, then its failure word, and ring every peer."""
        note = text.encode()[:NOTE_BYTES]
        at = self.layout.note(self.rank)
        self.mem[at:at + len(note)] = np.frombuffer(note, np.uint8)
        self.q64[self.layout.i64(self.rank, NOTE_LEN)] = len(note)
        self.q64[self.failed[self.rank]] = seq
        for p in self.others:
            self.ring(p)

    def told(self, seq: int) -> None:
        """Raise the note of a peer that gave up collective ``seq`` or an
        earlier one (its rank block's)."""
        q = self.q64
        for p in self.others:
            f = q[self.failed[p]]
            if 0 < f <= seq:
                n = max(0, min(q[self.layout.i64(p, NOTE_LEN)], NOTE_BYTES))
                at = self.layout.note(p)
                raise peer_notice(p, bytes(self.mem[at:at + n]).decode("utf-8", "replace"))

    def watch(self, seq: int) -> None:
        """Raise what a peer's rank block says about collective ``seq``: its
        note (``told``); ``mismatched``, where it has entered this call with
        another call size than this rank's (as published: debug mode
        publishes UNCHECKED everywhere)."""
        self.told(seq)
        q = self.q64
        mine = q[self.board[self.rank][1]]
        for p in self.others:
            a, k = self.board[p]
            if q[a] != seq:
                continue
            theirs = q[k]
            if theirs != mine and q[a] == seq:  # still that call: its size
                raise mismatched(p, seq, theirs, self.rank, mine)

    def close(self) -> None:
        """Drop the views and close the mapping (where no view is still alive
        elsewhere; else it goes with the last one)."""
        for mv in (self.u32, self.q64):
            if mv is not None:
                mv.release()
        self.mem = self.u32 = self.q64 = None
        if isinstance(self._buf, mmap.mmap):
            try:
                self._buf.close()
            except (BufferError, ValueError):
                pass
        self._buf = None
