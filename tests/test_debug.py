"""COLLECTIVES_DEBUG: mismatched calls raise on every rank, naming who and what,
and leave the communicator usable for the next matching call."""
import pytest

from launch import run_mpi


@pytest.mark.parametrize("transport,n", [("shm", 3), ("mpi", 4), ("shm", 2)])
def test_mismatch_is_named_on_every_rank_and_the_communicator_goes_on(transport, n):
    p = run_mpi(n, ["tests/debug_check.py", transport], timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert len(lines) == 7 * n and all(ln.startswith("ok") for ln in lines), lines


def test_env_turns_it_on():
    p = run_mpi(2, ["-c", "import numpy as np, collectives as cc\n"
                          "c = cc.init()\n"
                          "try:\n"
                          "    c.all_reduce(np.ones(3 + c.rank))\n"
                          "except cc.CollectiveMismatch as e:\n"
                          "    print('caught', e.fields, flush=True)\n"],
                timeout=60, COLLECTIVES_DEBUG="1")
    assert p.stdout.count("caught") == 2 and p.stdout.count("['count']") == 2, p.stdout + p.stderr
