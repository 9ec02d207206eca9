"""Bad input raises a clear ValueError/TypeError before any byte moves."""
import pytest

import collectives as cc
from bad_input import check_all
from launch import run_mpi


def test_bad_input_world_of_one():
    assert check_all(cc.init()) == []


@pytest.mark.parametrize("transport,n", [("shm", 3), ("mpi", 2), ("shm", 4)])
def test_bad_input_under_mpiexec(transport, n):
    p = run_mpi(n, ["tests/bad_input.py", transport], timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_errors_are_the_documented_types():
    assert issubclass(cc.CollectiveTimeout, cc.CollectiveError)
    assert issubclass(cc.CollectiveTimeout, TimeoutError)
    assert issubclass(cc.PeerFailure, cc.CollectiveError)
    assert cc.SUM == "sum" and cc.AVG == "avg"


def test_a_relayed_death_is_a_peer_failure_naming_the_dead():
    """The notice of a rank that found peers dead (the mpi transport relays
    it: test_faults.py) is raised as PeerFailure naming them; any other
    notice as CollectiveError naming the rank that told."""
    from transports.errors import peer_notice
    e = peer_notice(2, "rank 2 detected an error in all_reduce #5: rank(s) [1, 3] died "
                       "during all_reduce")
    assert type(e) is cc.PeerFailure and e.ranks == [1, 3] and e.relayed
    e = peer_notice(2, "rank 2 detected an error in gather #9: message from rank 1 failed: x")
    assert type(e) is cc.CollectiveError and e.ranks == [2] and e.relayed
    e = peer_notice(4, "rank 4 detected an error in reduce #2: ValueError: rank(s) [1] died "
                       "during lunch")  # a user's words, not the transport's
    assert type(e) is cc.CollectiveError and e.ranks == [4]
