"""Communicator-allocated arrays (``comm.empty``/``comm.zeros``): allocation,
the peers' view of a rank's writes, release, mismatched arguments, every
collective with region inputs and outputs, input that takes the normal path,
and a killed rank (tests/regions_check.py says what each scenario checks).
Nothing of ours is left in /dev/shm after any of them (test_faults' fixture)."""
import re
import subprocess
import sys
import threading

import pytest

from launch import SURVIVE, ROOT, mpi_env, run_mpi
from test_faults import dev_shm  # noqa: F401  (autouse: /dev/shm stays clean)

SCRIPT = "tests/regions_check.py"


def job(scenario: str, transport: str, n: int) -> None:
    p = run_mpi(n, [SCRIPT, scenario, transport], timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert sorted(map(int, re.findall(r"ok (\d+)", p.stdout))) == list(range(n)), p.stdout


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_regions_on_shm(n):
    job("calls,alloc", "shm", n)


@pytest.mark.parametrize("n", [5, 6, 7, 8])
def test_collectives_on_regions_in_larger_worlds(n):
    """Every collective and algorithm on regions at N = 5..8 (the allocation
    checks run at N = 1..4 above)."""
    job("calls", "shm", n)


@pytest.mark.parametrize("n", [2, 4])
def test_plain_arrays_on_mpi(n):
    job("calls,alloc", "mpi", n)


def test_killed_rank_leaves_nothing_in_dev_shm():
    """Rank 1 SIGKILLs itself holding regions: the survivors raise PeerFailure
    or CollectiveTimeout, and the fixture finds nothing of ours in /dev/shm
    (the files were unlinked at allocation).  The launcher lingers for seconds
    after a death: it is stopped once both survivors have reported."""
    cmd = SURVIVE(3, [sys.executable, SCRIPT, "kill", "shm"])
    p = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(COLLECTIVES_TIMEOUT="3"),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stop = threading.Timer(60, p.kill)  # a hung job fails, never hangs the suite
    stop.start()
    said = []
    try:
        for line in p.stdout:
            said += re.findall(r"survived (\d) (\w+)", line)
            if len(said) == 2:
                break
    finally:
        stop.cancel()
        p.kill()
        p.wait()
    assert sorted(r for r, _ in said) == ["0", "2"], said
    assert all(e in ("PeerFailure", "CollectiveTimeout") for _, e in said), said
