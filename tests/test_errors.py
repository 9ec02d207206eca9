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
