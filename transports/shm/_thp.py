"""How much of an array transparent huge pages back, from the page tables.

process_vm_readv pins the pages of the process it reads one page-table entry
at a time: a source that huge pages back (2 MiB each) reads about three
times faster than one of 4 KiB pages, while the reader's destination makes
little difference (docs/performance.md, "Huge pages").  numpy asks for huge
pages (``madvise``) for its arrays from 4 MiB, and the kernel backs the
2 MiB-aligned stretches inside them: a 4 MiB array that starts mid-stretch
has half its bytes on huge pages, one that starts on a boundary all.

``huge_share`` asks the kernel with the PAGEMAP_SCAN ioctl of
``/proc/self/pagemap`` (Linux 6.7 and later: one call over the range, a few
microseconds); where the ioctl is missing or refused it answers 0.0, and
keeps answering so without asking again.
"""
from __future__ import annotations

import ctypes
import fcntl
import os

import numpy as np

from ..copy import address

# _IOWR('f', 16, struct pm_scan_arg), the struct being 12 u64 (linux/fs.h)
PAGEMAP_SCAN = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
PAGE_IS_HUGE = 1 << 6  # the page is THP or hugetlb backed
PAGE = 4096
_VEC = 16  # regions a call returns; a range has few of them, the loop takes more


class _ScanArg(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


class _Region(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("categories", ctypes.c_uint64)]


_fd: int | None = None
_works = True
_vec = (_Region * _VEC)()


def _pagemap() -> int | None:
    global _fd, _works
    if _fd is None and _works:
        try:
            _fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            _works = False
    return _fd


def huge_bytes(addr: int, nbytes: int) -> int:
    """The bytes of ``[addr, addr + nbytes)`` in this process that huge pages
    back (0 where the kernel cannot say)."""
    global _works
    if nbytes <= 0 or not _works:
        return 0
    fd = _pagemap()
    if fd is None:
        return 0
    end = addr + nbytes
    arg = _ScanArg(size=ctypes.sizeof(_ScanArg), start=addr & ~(PAGE - 1),
                   end=(end + PAGE - 1) & ~(PAGE - 1), vec=ctypes.addressof(_vec),
                   vec_len=_VEC, category_mask=PAGE_IS_HUGE, return_mask=PAGE_IS_HUGE)
    total = 0
    while True:
        try:
            got = fcntl.ioctl(fd, PAGEMAP_SCAN, arg)
        except OSError:  # no PAGEMAP_SCAN (before Linux 6.7), or refused
            _works = False
            return 0
        for i in range(got):
            total += max(0, min(_vec[i].end, end) - max(_vec[i].start, addr))
        if got < _VEC or arg.walk_end >= arg.end:
            return total
        arg.start = arg.walk_end


def huge_share(buf: np.ndarray | None) -> float:
    """The share of ``buf``'s bytes (a contiguous array) that huge pages back."""
    if buf is None or not buf.nbytes:
        return 0.0
    return huge_bytes(address(buf), buf.nbytes) / buf.nbytes
