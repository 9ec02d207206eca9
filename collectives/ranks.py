"""Rank and block arithmetic shared by every algorithm (one helper, one place)."""
from __future__ import annotations


def block_bounds(n: int, parts: int) -> list[int]:
    """Offsets of ``parts`` near-equal blocks of ``n`` elements (first ones larger).

    Block i is ``[b[i], b[i+1])``; sizes differ by at most one element.
    """
    q, r = divmod(n, parts)
    b, acc = [0], 0
    for i in range(parts):
        acc += q + (i < r)
        b.append(acc)
    return b


def chunks(xchg_bytes: int, count: int, itemsize: int, parts: int = 1) -> list[tuple[int, int]]:
    """Element ranges ``[lo, hi)`` covering ``count`` elements such that ``parts``
    ranges of ``itemsize``-byte elements fit one exchange buffer of
    ``xchg_bytes`` (each range a multiple of 64 bytes but the last); one range
    for everything where ``xchg_bytes`` is 0 (exchange() is point-to-point)."""
    if not xchg_bytes:
        return [(0, count)]
    step = xchg_bytes // (parts * itemsize)
    step = max(1, step - step % max(1, 64 // itemsize))
    return [(lo, min(lo + step, count)) for lo in range(0, count, step)]


# the most a round of the staged direct algorithms moves at N = 2 (all_reduce,
# reduce_scatter, all_to_all; all_gather's at every N): the exchange buffer's
# 1 MiB rounds ran at two speeds from one job to the next for the same work
# (docs/performance.md, "Half-megabyte rounds")
ROUND_BYTES = 512 * 1024


def round_bytes(ep, a, every_size: bool = False) -> int:
    """The ``xchg_bytes`` to hand ``chunks`` for a direct algorithm's rounds of
    arrays like ``a``: ``ep.chunk_bytes(a)`` (0: exchange() is messages, one
    round), at most ROUND_BYTES at N = 2 (``every_size``: at every N)."""
    xb = ep.chunk_bytes(a)
    if xb and (every_size or ep.size == 2):
        return min(xb, ROUND_BYTES)
    return xb


def peer_index(r: int, p: int) -> int:
    """The index of rank ``r`` among the peers of rank ``p`` (every rank but
    ``p``, in rank order): where ``p``'s per-peer pieces hold ``r``'s."""
    return r if r < p else r - 1


def pof2_floor(n: int) -> int:
    """The largest power of two not above ``n`` (n >= 1)."""
    return 1 << (n.bit_length() - 1)


class Fold:
    """Folds a non-power-of-two world onto its largest power of two p2.

    The first ``2*rem`` ranks (rem = size - p2) pair up: even rank 2i hands its
    data to odd rank 2i+1 and sits out; the others keep going with a new rank
    in ``0..p2-1`` (as in MPICH and Thakur, Rabenseifner & Gropp 2005).
    """

    def __init__(self, rank: int, size: int):
        self.p2 = pof2_floor(size)
        self.rem = size - self.p2
        if rank < 2 * self.rem:
            self.new = -1 if rank % 2 == 0 else rank // 2
        else:
            self.new = rank - self.rem
        self.rank = rank

    @property
    def extra(self) -> bool:
        """This rank sits out of the power-of-two part."""
        return self.new < 0

    @property
    def helper(self) -> bool:
        """This rank works for itself and an extra rank (its even neighbour)."""
        return self.rank < 2 * self.rem and not self.extra

    def real(self, new: int) -> int:
        """The world rank that plays new rank ``new``."""
        return 2 * new + 1 if new < self.rem else new + self.rem


def rel(rank: int, root: int, size: int) -> int:
    """Rank relative to ``root`` (the root is 0)."""
    return (rank - root) % size


def absolute(vrank: int, root: int, size: int) -> int:
    return (vrank + root) % size
