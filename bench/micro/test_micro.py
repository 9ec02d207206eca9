"""Micro-benchmarks of the single-process hot paths under the transports and algorithms.

Run with ``python -m pytest bench/micro --benchmark-only`` (the default
``pytest`` run collects only ``tests/``).  Each benchmark mimics one step of
the shared-memory transport or of an algorithm's schedule, without MPI:

* copying one 256 KiB chunk into a slot view of an mmap'ed segment (sender);
* reducing one slot-sized chunk into a view of the accumulator (receiver);
* ``collectives.ranks.block_bounds`` and a ring pass's schedule (step
  indices and block slicing) over an endpoint that moves nothing.
"""
from __future__ import annotations

import mmap

import numpy as np
import pytest

from collectives import all_reduce, ring
from collectives.ranks import block_bounds
from transports import Endpoint

pytest.importorskip("pytest_benchmark")

SLOT = 256 * 1024          # the shm transport's default slot size
HDR = 64                   # header bytes before each slot's data
NSLOTS = 4


@pytest.fixture(scope="module")
def slots():
    """Slot data views into an anonymous shared mapping laid out like a channel."""
    mm = mmap.mmap(-1, NSLOTS * (HDR + SLOT))
    mem = np.frombuffer(mm, np.uint8)
    views = [mem[k * (HDR + SLOT) + HDR:(k + 1) * (HDR + SLOT)] for k in range(NSLOTS)]
    for v in views:
        v.fill(1)  # fault the pages in before timing
    yield views
    del views, mem


def test_copy_chunk_into_slot(benchmark, slots):
    """Sender side: np.copyto of a 256 KiB piece of a user buffer into a slot."""
    src = np.arange(4 * SLOT // 4, dtype=np.float32).view(np.uint8)  # 1 MiB message
    off = SLOT  # the second chunk, as _push slices it
    benchmark(np.copyto, slots[1][:SLOT], src[off:off + SLOT])
    assert np.array_equal(slots[1][:SLOT], src[off:off + SLOT])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_reduce_slot_into_accumulator(benchmark, slots, dtype):
    """Receiver side: np.add of one slot (viewed as dtype) into the accumulator's view."""
    dt = np.dtype(dtype)
    acc = np.ones(4 * SLOT // dt.itemsize, dt)
    chunk = slots[2][:SLOT].view(dt)
    lo = SLOT // dt.itemsize  # the second chunk of the accumulator, as _Recv.consume slices it
    a = acc[lo:lo + chunk.size]
    benchmark(np.add, a, chunk, out=a)


@pytest.mark.parametrize("parts", [2, 8, 64])
def test_block_bounds(benchmark, parts):
    b = benchmark(block_bounds, 10_000_019, parts)
    assert b[0] == 0 and b[-1] == 10_000_019 and len(b) == parts + 1


class _NullEndpoint(Endpoint):
    """An endpoint whose transfers do nothing: what remains is the schedule's cost."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.steps = 0

    def sendrecv(self, sbuf, dst, rbuf, src) -> None:
        self.steps += 1

    def sendrecv_reduce(self, sbuf, dst, acc, src, op) -> None:
        self.steps += 1


@pytest.mark.parametrize("size", [4, 8, 32])
def test_ring_reduce_scatter_schedule(benchmark, size):
    """One ring reduce-scatter pass: step indices, neighbours and block slices."""
    ep = _NullEndpoint(rank=1, size=size)
    buf = np.zeros(1 << 20, np.float32)
    bounds = block_bounds(buf.size, size)
    owned = benchmark(ring.reduce_scatter, ep, buf, bounds, np.add)
    assert owned == 2 % size


@pytest.mark.parametrize("size", [4, 8, 32])
def test_ring_all_reduce_schedule(benchmark, size):
    """The whole ring all-reduce schedule (bounds, both passes) with no data moved."""
    ep = _NullEndpoint(rank=size - 1, size=size)
    buf = np.zeros(1 << 20, np.float32)
    benchmark(all_reduce.ring, ep, buf, np.add)
    assert ep.steps % (2 * (size - 1)) == 0
