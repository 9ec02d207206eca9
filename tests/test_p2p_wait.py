"""isend/irecv handles honour ``wait(timeout)`` as collective handles do."""
import pytest

from launch import run_mpi


@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_wait_with_a_timeout_raises_and_the_handle_stays_valid(transport):
    p = run_mpi(2, ["tests/p2p_wait_check.py", transport], timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "wait(0.2): TimeoutError" in p.stdout, p.stdout
