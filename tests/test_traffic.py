"""comm.traffic: every algorithm's bytes per rank equal docs/algorithms.md's figure,
and the ring all-reduce moves 2(N-1)/N*S per rank."""
import json
import os
import tempfile

import pytest

from launch import run_mpi


@pytest.mark.parametrize("transport,n", [("shm", n) for n in range(1, 9)] +
                         [("mpi", 3), ("mpi", 4), ("shm+cma", 3)])
def test_bytes_per_algorithm(transport, n):
    env = {"COLLECTIVES_SHM_CMA_BYTES": "4096"} if transport == "shm+cma" else {}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "traffic.json")
        p = run_mpi(n, ["tests/traffic.py", transport.split("+")[0], out], timeout=300, **env)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        with open(out) as f:
            res = json.load(f)
    assert res["checked"] > 0
    assert not res["failures"], "\n".join(res["failures"][:30])
