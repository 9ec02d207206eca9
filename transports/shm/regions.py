"""Communicator-allocated arrays on shared memory: regions that peers map.

A collective allocation (``comm.empty``/``comm.zeros``) gives each rank its
own region: a file in /dev/shm that the rank creates (O_EXCL, mode 0600,
an unguessable name with the segment's prefix), and every rank of the
communicator maps.  As with the segment, the files are unlinked as soon as
every rank has mapped them all: once the allocation has returned, nothing
is left in /dev/shm even if the job is killed, and the memory goes back to
the system when the last mapping of it goes.

File layout: a header page, then the data (so that the data starts on a
page boundary in every mapping)::

    header   FREED i64: 0 while the owner's array lives, 1 once it is gone
    data     the array's bytes, C order

The owner maps the header and the data separately.  Its array (and every
view of it) keeps its data mapping; a finalizer sets FREED, through the
header mapping, when the last of them is gone, before the data is unmapped.  A peer maps the
whole file; it drops its mapping of a region marked freed when it next
allocates, when it next looks the region up (``mapped``), and at ``close``.
``mapped`` reads FREED before it returns a view: the owner sets it before it
can hand out the same addresses again, so a peer never reads a freed region
for a new array that happens to lie at the same address.

At ``close`` every peer mapping and header goes; an array that the caller
still holds stays valid, as memory of its own process only (it is no longer
shared: nothing unmaps memory under a live numpy array), and goes with its
last view.
"""
from __future__ import annotations

import mmap
import os
import re
import weakref

import numpy as np

from .. import _wire
from ..copy import address as _address
from ..errors import CollectiveError
from .segment import PAGE, SHM_DIR, SHM_PREFIX, create

HEADER = PAGE  # the header's bytes; the data follows at this offset
FREED = 0      # i64 index in the header: set by the owner once its array is gone
NAME = re.compile(re.escape(SHM_PREFIX) + "[0-9a-f]{32}")


class PeerRegion:
    """A peer's region as this rank maps it: the data's address and size in
    the owner's process, the FREED word, and the data in this rank's mapping."""

    __slots__ = ("addr", "nbytes", "freed", "data")

    def __init__(self, addr: int, nbytes: int, mem: np.ndarray):
        self.addr, self.nbytes = addr, nbytes
        self.freed = mem[:8].view(np.int64)
        self.data = mem[HEADER:HEADER + nbytes]

    def live(self) -> bool:
        return not self.freed[FREED]


class Regions:
    """The regions of one communicator's shared-memory transport."""

    def __init__(self, mpicomm, rank: int, size: int):
        self.mpicomm, self.rank, self.size = mpicomm, rank, size
        # this rank's live regions: data address -> (nbytes, finalizer)
        self.mine: dict[int, tuple[int, weakref.finalize]] = {}
        self.peers: list[list[PeerRegion]] = [[] for _ in range(size)]

    def allocate(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """This rank's array of a collective allocation, zero-filled (a new
        file reads as zeros).  Every rank calls it with the same shape and
        dtype (the caller has checked), of at least one byte."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.sweep()
        name, whole, header, err = None, None, None, None
        try:
            name = create(HEADER + nbytes, "")
            whole, header = _map_own(name, nbytes)
        except OSError as e:
            err = e
        where = _wire.allgather(self.mpicomm, None if whole is None else
                                (name, _address(whole), nbytes))
        peers, ok = {}, False
        try:
            if None in where:
                err = err or f"rank {where.index(None)} could not create its region"
            else:
                peers, err = _map_peers(where, self.rank)
            ok = _wire.all_true(self.mpicomm, err is None)
        finally:
            if name is not None:
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except FileNotFoundError:
                    pass
        # No rank returns (and so none can abort the job) before the names are gone.
        self.mpicomm.Barrier()
        if not ok:
            raise CollectiveError(f"could not allocate a shared array of {nbytes} bytes on "
                                  f"every rank: {err or 'see the other ranks'}")
        for p, region in peers.items():
            self.peers[p].append(region)
        # The caller's array and every view of it have this array as their
        # base (numpy stops its chain of bases at the first array over a
        # buffer): it dies with the last of them, and numpy runs its
        # finalizer before it lets go of the mapping, so FREED is set before
        # the addresses can be reused.
        addr = _address(whole)
        flag = np.frombuffer(header, np.int64, count=1)
        self.mine[addr] = (nbytes, weakref.finalize(whole, _freed, flag, self.mine, addr))
        return whole.view(dtype).reshape(shape)

    def sweep(self) -> None:
        """Drop this rank's mappings of peers' regions that their owners freed."""
        for p, regions in enumerate(self.peers):
            if regions:
                self.peers[p] = [g for g in regions if g.live()]

    def mapped(self, peer: int, addr: int, nbytes: int) -> np.ndarray | None:
        """The bytes [addr, addr + nbytes) of ``peer``'s address space, as a
        uint8 view of this rank's mapping, where they lie in one of the
        peer's live regions; else None.  A freed region that it meets (the
        owner may since have mapped a new one at the same addresses) is
        skipped, and the mappings of freed regions are dropped."""
        stale = False
        for g in self.peers[peer]:
            if g.addr <= addr and addr + nbytes <= g.addr + g.nbytes:
                if g.live():
                    lo = addr - g.addr
                    return g.data[lo:lo + nbytes]
                stale = True
        if stale:
            self.sweep()
        return None

    def locate(self, a: np.ndarray) -> tuple[int, int] | None:
        """(the region's data address, ``a``'s offset in it) where the numpy
        array ``a``, C-contiguous, lies in one of this rank's live regions;
        else None."""
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not self.mine:
            return None
        at = _address(a)
        for base, (nbytes, fin) in list(self.mine.items()):
            if base <= at and at + a.nbytes <= base + nbytes and fin.alive:
                return base, at - base
        return None

    def close(self) -> None:
        """Drop every peer mapping and this rank's headers; arrays the caller
        still holds stay valid (unshared) until their last view goes."""
        for _, fin in list(self.mine.values()):
            fin.detach()
        self.mine.clear()
        self.peers = [[] for _ in range(self.size)]


def _freed(flag: np.ndarray, mine: dict, addr: int) -> None:
    """The owner's array is gone: mark its region freed for the peers."""
    flag[FREED] = 1
    mine.pop(addr, None)


def _open(name: str, size: int) -> int:
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR | os.O_NOFOLLOW)
    if os.fstat(fd).st_size != size:
        os.close(fd)
        raise OSError(f"{name} has the wrong size")
    return fd


def _map_own(name: str, nbytes: int) -> tuple[np.ndarray, mmap.mmap]:
    """The owner's mappings of its new region: the data, as bytes, and the header."""
    fd = _open(name, HEADER + nbytes)
    try:
        return np.frombuffer(mmap.mmap(fd, nbytes, offset=HEADER), np.uint8), \
            mmap.mmap(fd, HEADER)
    finally:
        os.close(fd)


def _map_peers(where: list, me: int) -> tuple[dict[int, PeerRegion], OSError | None]:
    """Every peer's region, mapped whole, from their (name, address, nbytes)."""
    regions: dict[int, PeerRegion] = {}
    try:
        for p, (name, addr, nbytes) in enumerate(where):
            if p != me:
                # only a name this module makes, of the size every rank agreed on
                if not NAME.fullmatch(name) or nbytes != where[me][2]:
                    raise OSError(f"rank {p} published the region {name!r} of {nbytes} bytes")
                fd = _open(name, HEADER + nbytes)
                try:
                    mem = np.frombuffer(mmap.mmap(fd, HEADER + nbytes), np.uint8)
                finally:
                    os.close(fd)
                regions[p] = PeerRegion(addr, nbytes, mem)
    except OSError as e:
        return {}, e
    return regions, None
