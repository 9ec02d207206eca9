"""Sends that MPI refuses (transports/_bounded.py): each waits in its peer's
queue and a later poll posts it; results and message order stay right
(tests/bounded_check.py).  A dead rank on another host, the case the bound
is for, is tests/test_cluster.py's."""
import pytest

from launch import run_mpi


@pytest.mark.parametrize("n", [2, 3])
def test_refused_sends_are_posted_later_in_order(n):
    p = run_mpi(n, ["tests/bounded_check.py"], timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count(" refused") == n, p.stdout
