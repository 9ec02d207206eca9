"""A rank killed on one emulated host (tests/emulate.py): the survivors on
every host end with PeerFailure or CollectiveTimeout within the timeout, no
process is left, and /dev/shm stays clean.

The scenario is tests/faults.py's "kill" on the "hier" transport (rank 1
SIGKILLs itself at a random moment of a stream of collectives), launched
under the launcher test_faults.py uses (SURVIVE), with one $COLLECTIVES_HOST per
block of ranks.  The victim is on this machine, so at least one survivor
sees its death and names it (test_faults._survivors_fail); the others may
time out instead, since they wait on survivors that gave up.
"""
import os
import subprocess
import tempfile

import pytest

from emulate import command
from launch import SURVIVE, ROOT, mpi_env
from test_faults import TIMEOUT, _survivors_fail, dev_shm, gone, results  # noqa: F401

# layout -> the calls of the stream; rank 1 (the victim) shares host a with
# rank 0 in "aabb", and is alone on host b in "abac" (2 + 1 + 1, non-contiguous)
CASES = [("aabb", "all_reduce"),
         ("aabb", "broadcast,reduce,all_gather,reduce_scatter,all_to_all,barrier"),
         ("abac", "all_reduce,all_gather,barrier")]
# make test runs the first; make test-hosts (HOSTS_ALL=1) all of them
if os.environ.get("HOSTS_ALL", "") in ("", "0"):
    CASES = CASES[:1]


def fault_job_on(layout: str, calls: str) -> dict:
    """fault_job of test_faults.py, on the ranks of ``layout``."""
    n = len(layout)
    with tempfile.TemporaryDirectory() as d:
        cmd = command(layout, ["tests/faults.py", "kill", "hier", d, calls], launcher=SURVIVE)
        p = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            # a generous wait: it ends as soon as every survivor has reported,
            # and a loaded machine may take many seconds to start n ranks
            res = results(d, n, wait=TIMEOUT + 60, victim=1)
            for info in res.values():
                gone(info["pid"])
        finally:
            p.kill()
            p.wait()
    return res


@pytest.mark.parametrize("layout,calls", CASES)
def test_killed_rank_on_one_host(layout, calls):
    _survivors_fail(fault_job_on(layout, calls), len(layout), "hier", calls)
