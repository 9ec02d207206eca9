"""Flat parameter buffers cut into groups, and each group into N pieces.

Every strategy keeps its half-precision parameters and gradients in one flat buffer so
that a bucket (or a layer) is one contiguous array for a collective.  Each
group is split into N pieces, rank r owning piece r of every group: with
``pad``, groups are padded to a multiple of N with zeros and the pieces are
equal (DDP's buckets: the ring's blocks); without (ZeRO), nothing is added
and the pieces differ by at most one element (``split_rows``), which the
variable-count collectives move as they are.  Bucket-wise reduce-scatter
therefore leaves each rank exactly its own pieces, and the rank's shard
(optimizer states, ZeRO gradients and parameters) is the concatenation of
its pieces.
"""
from __future__ import annotations

import numpy as np


def pad_to(n: int, k: int) -> int:
    return -(-n // k) * k


def split_rows(rows: int, parts: int) -> list[int]:
    """Offsets of ``parts`` near-equal row ranges (the first ones larger)."""
    q, r = divmod(rows, parts)
    return [i * q + min(i, r) for i in range(parts + 1)]


def buckets(sizes: list[int], bucket_bytes: int, itemsize: int) -> list[list[int]]:
    """Parameter indices in reverse order (the order backward produces their
    gradients), cut into buckets of at least ``bucket_bytes``; a parameter is
    never split, so a bucket holds at least one."""
    out, cur, nbytes = [], [], 0
    for j in reversed(range(len(sizes))):
        cur.append(j)
        nbytes += sizes[j] * itemsize
        if nbytes >= bucket_bytes:
            out.append(cur)
            cur, nbytes = [], 0
    if cur:
        out.append(cur)
    return out


def per_layer(n_layers: int) -> list[list[int]]:
    """One group per layer (its W and b), last layer first."""
    return [[2 * i, 2 * i + 1] for i in reversed(range(n_layers))]


class Layout:
    def __init__(self, sizes: list[int], groups: list[list[int]], n: int, pad: bool = True):
        self.sizes, self.groups, self.n = list(sizes), groups, n
        self.offset = [0] * len(sizes)      # of each parameter in the flat buffer
        self.group_of = [0] * len(sizes)
        self.start, self.length = [], []    # of each group (padded) in the flat buffer
        off = 0
        for g, members in enumerate(groups):
            self.start.append(off)
            for j in members:
                self.offset[j], self.group_of[j] = off, g
                off += sizes[j]
            used = off - self.start[g]
            self.length.append(pad_to(used, n) if pad else used)
            off = self.start[g] + self.length[g]
        self.total = off
        # piece r of group g: elements bounds[g][r] .. bounds[g][r+1] of the group
        self.bounds = [split_rows(length, n) for length in self.length]
        self.counts = [[b[r + 1] - b[r] for r in range(n)] for b in self.bounds]
        # each rank's shard: its pieces, group after group
        self.shard_starts = [np.cumsum([0] + [c[r] for c in self.counts]).tolist()
                             for r in range(n)]
        self.n_params = sum(sizes)
        self.padding = self.total - self.n_params

    def shard_len(self, r: int) -> int:
        return self.shard_starts[r][-1]

    def param(self, flat: np.ndarray, j: int, shape) -> np.ndarray:
        return flat[self.offset[j]:self.offset[j] + self.sizes[j]].reshape(shape)

    def param_in_group(self, buf: np.ndarray, j: int, shape) -> np.ndarray:
        """Parameter j inside a buffer that holds only its group."""
        o = self.offset[j] - self.start[self.group_of[j]]
        return buf[o:o + self.sizes[j]].reshape(shape)

    def group(self, flat: np.ndarray, g: int) -> np.ndarray:
        return flat[self.start[g]:self.start[g] + self.length[g]]

    def piece(self, buf: np.ndarray, g: int, r: int) -> np.ndarray:
        """Rank r's piece of a buffer that holds group g."""
        b = self.bounds[g]
        return buf[b[r]:b[r + 1]]

    def shard_piece(self, shard: np.ndarray, g: int, r: int) -> np.ndarray:
        """Group g's piece of rank r's shard."""
        s = self.shard_starts[r]
        return shard[s[g]:s[g + 1]]

    def owned(self, flat: np.ndarray, g: int, r: int) -> np.ndarray:
        return self.piece(self.group(flat, g), g, r)

    def pad_slices(self, g: int) -> slice:
        """The padding at the end of group g, relative to the group's start."""
        used = sum(self.sizes[j] for j in self.groups[g])
        return slice(used, self.length[g])

    def to_flat(self, params: list[np.ndarray], dtype) -> np.ndarray:
        flat = np.zeros(self.total, dtype)
        for j, p in enumerate(params):
            flat[self.offset[j]:self.offset[j] + self.sizes[j]] = p.reshape(-1)
        return flat

    def shard_of(self, flat: np.ndarray, r: int) -> np.ndarray:
        return np.concatenate([self.owned(flat, g, r) for g in range(len(self.groups))])

    def unshard(self, shards: np.ndarray) -> np.ndarray:
        """Every rank's shard, concatenated in rank order -> the flat buffer."""
        flat = np.empty(self.total, shards.dtype)
        at = np.cumsum([0] + [self.shard_len(r) for r in range(self.n)]).tolist()
        for r in range(self.n):
            mine = shards[at[r]:at[r + 1]]
            for g in range(len(self.groups)):
                self.owned(flat, g, r)[:] = self.shard_piece(mine, g, r)
        return flat

    def params_of(self, flat: np.ndarray, shapes) -> list[np.ndarray]:
        return [self.param(flat, j, s).copy() for j, s in enumerate(shapes)]


def live_bytes(arrays) -> int:
    """Bytes of the distinct memory behind ``arrays`` (views counted once)."""
    seen, total = set(), 0
    for a in arrays:
        base = a
        while isinstance(base.base, np.ndarray):
            base = base.base
        key = base.__array_interface__["data"][0]
        if key not in seen:
            seen.add(key)
            total += base.nbytes
    return total
