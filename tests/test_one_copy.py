"""The one-copy path (transports/shm_direct.py) where process_vm_readv works,
and its fallback to the staged algorithms where it is turned off or refused
(tests/one_copy_check.py).  Its results are checked by the conformance
families (every shm job runs ``one_copy`` with the other algorithms), its
bytes by test_traffic.py, a rank killed inside a read by test_faults.py."""
import json
import os
import tempfile

import pytest

from launch import run_mpi


@pytest.mark.parametrize("mode,n", [("on", 3), ("off", 2), ("refused", 3)])
def test_offered_and_chosen_only_where_it_runs(mode, n):
    env = {"COLLECTIVES_SHM_CMA": "0"} if mode == "off" else {}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_mpi(n, ["tests/one_copy_check.py", mode, out], timeout=300, **env)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    assert not res["failures"], "\n".join(res["failures"])
