"""transports/shm/copy.py, in process: a root's copies into its exchange
buffer stream while ordinary copies run below COLLECTIVES_SHM_STREAM_BELOW
(the median of the last KEEP), go back to ordinary stores when a retry runs
fast, and never stream with the variable at 0; the bytes are right either way."""
from __future__ import annotations

import numpy as np
import pytest

from transports.shm import copy as shm_copy

NB = 1 << 20


class Clock:
    """perf_counter for a Copier: each ordinary copy takes ``per_copy`` s."""

    def __init__(self) -> None:
        self.t, self.per_copy, self.calls = 0.0, 0.0, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # the reading after the copy
            self.t += self.per_copy
        return self.t


@pytest.fixture
def copier(monkeypatch):
    streamed = []

    def stream(dst, src):
        streamed.append(dst.nbytes)
        np.copyto(dst, src)
    monkeypatch.setattr(shm_copy, "stream", stream)
    monkeypatch.setattr(shm_copy, "SLOW_BYTES_PER_S", 16e9)
    c = shm_copy.Copier()
    c.clock = Clock()
    return c, streamed


def copies(c, k, fast: bool):
    c.clock.per_copy = NB / (50e9 if fast else 5e9)
    src = np.random.default_rng(k).integers(0, 255, NB, np.uint8)
    for _ in range(k):
        dst = np.zeros(NB, np.uint8)
        c.copy([(dst, src)], NB)
        assert np.array_equal(dst, src)


def test_slow_ordinary_copies_switch_to_streaming_and_back(copier):
    c, streamed = copier
    copies(c, shm_copy.KEEP, fast=False)  # the first KEEP decide: slow
    assert not streamed
    copies(c, shm_copy.RETRY - shm_copy.KEEP, fast=False)
    retries = 1 + len(shm_copy.EARLY_RETRIES)  # the RETRY-th and the early ones were ordinary
    assert len(streamed) == shm_copy.RETRY - shm_copy.KEEP - retries
    copies(c, shm_copy.RETRY, fast=True)  # its retry runs fast: ordinary from then on
    n = len(streamed)
    copies(c, 10, fast=True)
    assert len(streamed) == n


def test_fast_copies_and_small_ones_never_stream(copier):
    c, streamed = copier
    copies(c, 3 * shm_copy.RETRY, fast=True)
    small = np.ones(shm_copy.MIN_BYTES // 2, np.uint8)
    c.clock.per_copy = 1.0  # slow, but below MIN_BYTES nothing is timed
    for _ in range(10):
        c.copy([(np.zeros_like(small), small)], small.nbytes)
    assert not streamed


def test_zero_turns_it_off(copier, monkeypatch):
    c, streamed = copier
    monkeypatch.setattr(shm_copy, "SLOW_BYTES_PER_S", 0.0)
    copies(c, 2 * shm_copy.RETRY, fast=False)
    assert not streamed


def test_the_variable(monkeypatch):
    monkeypatch.setenv("COLLECTIVES_SHM_STREAM_BELOW", "8e9")
    assert shm_copy._slow_bytes_per_s() == 8e9
    monkeypatch.setenv("COLLECTIVES_SHM_STREAM_BELOW", "0")
    assert shm_copy._slow_bytes_per_s() == 0.0
    monkeypatch.setenv("COLLECTIVES_SHM_STREAM_BELOW", "fast")
    with pytest.raises(ValueError, match="COLLECTIVES_SHM_STREAM_BELOW"):
        shm_copy._slow_bytes_per_s()


def test_both_layers_stream_with_the_one_compiled_copy():
    """The transport's roots and the collectives' large outputs stream with
    transports.copy's routine, which the collectives import from below."""
    from collectives import streaming
    from transports import copy
    assert streaming.stream_copy is copy.stream_copy
    assert streaming.available == copy.available
    assert (shm_copy.stream is copy.stream_copy) == copy.available
    assert copy.available == (copy._native is not None)
