"""A rank that never arrives, and a rank killed mid-stream: every survivor ends
with an error within the timeout, no process is left, /dev/shm stays clean."""
import json
import os
import tempfile
import time

import pytest

from launch import GFORKER, run_mpi, shm_files

TIMEOUT = 3.0  # faults.TIMEOUT


@pytest.fixture(autouse=True)
def dev_shm():
    """Asserts that our segments do not outlive a job, and removes the files
    that MPICH itself leaves behind when its processes end without
    MPI_Finalize (they are MPICH's, see README)."""
    ours, mpich = shm_files(), shm_files("mpich_shm_")
    yield
    left = shm_files() - ours
    for f in shm_files("mpich_shm_") - mpich:
        try:
            os.unlink(os.path.join("/dev/shm", f))
        except FileNotFoundError:
            pass
    assert not left, f"left in /dev/shm: {left}"


def results(d: str, n: int, wait: float, victim: int) -> dict:
    """Each rank's report, waiting up to ``wait`` s for survivors to write theirs."""
    end = time.monotonic() + wait
    out = {}
    while time.monotonic() < end:
        for r in range(n):
            p = os.path.join(d, f"rank{r}.json")
            if os.path.exists(p):
                with open(p) as f:
                    out[r] = json.load(f)
        if len(out) == n and all(v["state"] != "started" or not alive(v["pid"])
                                 for r, v in out.items() if r != victim):
            break
        time.sleep(0.1)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int, wait: float = 10.0) -> bool:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("n", [3, 5])
def test_late_rank_times_out(transport, n):
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        p = run_mpi(n, ["tests/faults.py", "late", transport, d], timeout=60)
        res = results(d, n, wait=5, victim=n - 1)
        assert time.monotonic() - t0 < TIMEOUT + 30
    assert set(res) == set(range(n)), (p.returncode, p.stderr[-3000:])
    for r in range(n - 1):
        info = res[r]
        assert info["state"] == "error", info
        assert info["error"] == "CollectiveTimeout" and info["timeout_error"], info
        assert info["call"] == "all_reduce" and "all_reduce" in info["message"], info
        assert info["seconds"] < TIMEOUT + 5, info
        assert info["ranks"], info
    if transport == "shm":  # the arrival board names exactly the late rank
        assert all(res[r]["ranks"] == [n - 1] for r in range(n - 1)), res


@pytest.mark.parametrize("calls", ["all_reduce", "p2p",
                                   "broadcast,reduce,all_gather,reduce_scatter,all_to_all,barrier"])
@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("n", [2, 4, 7])
def test_killed_rank(transport, n, calls):
    with tempfile.TemporaryDirectory() as d:
        run_mpi(n, ["tests/faults.py", "kill", transport, d, calls], timeout=60,
                launcher=GFORKER)
        res = results(d, n, wait=TIMEOUT + 20, victim=1)
    assert set(res) == set(range(n)), f"ranks without a report: {set(range(n)) - set(res)}"
    for r, info in res.items():
        if r == 1:
            continue
        assert info["state"] == "error", (r, info)
        assert info["error"] in ("PeerFailure", "CollectiveTimeout"), (r, info)
        assert info["seconds"] < TIMEOUT + 15, (r, info)
    for info in res.values():
        assert gone(info["pid"]), f"process {info['pid']} is still running"
