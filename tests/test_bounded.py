"""Sends that MPI refuses (transports/_bounded.py): each waits in its peer's
queue and a later poll posts it; results and message order stay right
(tests/bounded_check.py).  A dead rank on another host, the case the bound
is for, is tests/test_cluster.py's."""
import re

import pytest

from launch import run_mpi


@pytest.mark.parametrize("n", [2, 3])
def test_refused_sends_are_posted_later_in_order(n):
    p = run_mpi(n, ["tests/bounded_check.py"], timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count(" refused") == n, p.stdout


THREAD_LEVEL = r"""
import sys
from mpi4py import MPI
before = MPI.Query_thread()
from transports import _bounded
_bounded._find()
sys.stdout.write(f"levels {before} {MPI.Query_thread()};\n")  # one write: no interleaving
sys.stdout.flush()
"""


def test_the_bounds_lookup_keeps_mpis_thread_level():
    """Looking the bound up initializes MPI's tool interface; under Open MPI
    the level that MPI_T_init_thread is asked for becomes the one
    MPI_Query_thread reports, which decides whether the compiled small calls
    run (transports/mpi.py, ``lane``): the lookup asks for MPI's own."""
    p = run_mpi(2, ["-c", THREAD_LEVEL], timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    levels = re.findall(r"levels (\d+) (\d+);", p.stdout)
    assert len(levels) == 2 and all(a == b for a, b in levels), p.stdout
