"""The README's example runs as written, on both transports."""
import pytest

from launch import run_mpi


@pytest.mark.parametrize("transport,n", [("shm", 1), ("shm", 4), ("mpi", 3)])
def test_quickstart(transport, n):
    p = run_mpi(n, ["examples/quickstart.py", transport], timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert f"{n} ranks over {transport}: all checks passed" in p.stdout
