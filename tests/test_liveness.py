"""The liveness check and the deadline that every wait in the transports
uses (transports/base.py), in process: a process that has exited counts as
dead even before it is reaped, a peer on another host is never checked,
progress restarts the deadline, and a dead peer raises PeerFailure naming it;
and how long a shared-memory wait looks before it sleeps."""
from __future__ import annotations

import os
import time

import pytest

from transports.base import Deadline, Liveness
from transports.errors import CollectiveTimeout, PeerFailure


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def zombie():
    """The pid of a child that has exited and is not reaped (until the test ends)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    end = time.monotonic() + 10
    while _state(pid) != "Z":
        assert time.monotonic() < end, "the child did not exit"
        time.sleep(0.01)
    yield pid
    os.waitpid(pid, 0)


def _reaped() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_exited_processes_are_dead_reaped_or_not(zombie):
    me, gone = os.getpid(), _reaped()
    live = Liveness([me, zombie, gone, me], [True] * 4)
    assert live.dead([0, 1, 2, 3]) == [1, 2]
    assert live.dead([0, 3]) == []


def test_peers_on_another_host_are_not_checked(zombie):
    assert Liveness([os.getpid(), zombie], [True, False]).dead([0, 1]) == []


def test_progress_restarts_the_deadline():
    dl = Deadline(0.3, rank=0)
    live = Liveness([os.getpid()], [True])
    for _ in range(4):  # 0.6 s in all, never 0.3 s without progress
        time.sleep(0.15)
        dl.check(live, lambda: [0], lambda: [0], "all_reduce")
        dl.progress()
    time.sleep(0.35)
    with pytest.raises(CollectiveTimeout, match="all_reduce") as e:
        dl.check(live, lambda: [0], lambda: [2], "all_reduce")
    assert e.value.ranks == [2]


def test_a_dead_peer_is_a_peer_failure(zombie):
    dl = Deadline(60.0, rank=0)
    live = Liveness([os.getpid(), zombie], [True, True])
    time.sleep(Deadline.CHECK_EVERY + 0.01)  # checks are rate-limited
    with pytest.raises(PeerFailure, match=r"\[1\].*broadcast") as e:
        dl.check(live, lambda: [0, 1], lambda: [1], "broadcast")
    assert e.value.ranks == [1]


def test_waits_look_long_only_where_every_rank_has_a_core(monkeypatch):
    """COLLECTIVES_SPIN's default: many looks at the doorbell where the job's
    ranks on this machine (the launcher's count, at least the segment's
    size) are no more than the cores; few where they share cores."""
    from transports.shm import settings as shm
    monkeypatch.setattr(shm.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert shm.default_spin(4) == shm.SPIN_OWN_CORES
    assert shm.default_spin(5) == shm.SPIN_SHARED_CORES
    monkeypatch.setenv("MPI_LOCALNRANKS", "8")  # an emulated 2 x 4 on one machine
    assert shm.ranks_on_this_machine(4) == 8 and shm.default_spin(4) == shm.SPIN_SHARED_CORES
    monkeypatch.delenv("MPI_LOCALNRANKS")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3")
    assert shm.ranks_on_this_machine(2) == 3 and shm.default_spin(2) == shm.SPIN_OWN_CORES
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "junk")
    assert shm.ranks_on_this_machine(2) == 2
