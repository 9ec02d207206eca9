"""Emulated hosts: one machine stands in for a cluster through MPMD launches,
each group of ranks with its own $COLLECTIVES_HOST.

A layout is a string with one letter per rank, the letter naming its host:
``"aabb"`` is 2 hosts of 2 ranks, ``"abab"`` the same with ranks 0 and 2 on
one host (non-contiguous), ``"aabc"`` 3 hosts of 2 + 1 + 1.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

from launch import LAUNCH, mpi_env, run_launch, run_mpi

LAYOUTS = {"2x2": "aabb", "2x3": "aaabbb", "4x2": "aabbccdd", "2+1+1": "aabc",
           "interleaved": "abab"}


def command(layout: str, argv: list[str], launcher=LAUNCH) -> list[str]:
    """mpiexec -n k (COLLECTIVES_HOST=h) python argv : ... for each run of
    consecutive ranks of one host (``launcher``: a collectives.launcher.Launcher)."""
    return launcher.command([(len(list(run)), {"COLLECTIVES_HOST": host},
                              [sys.executable, *argv])
                             for host, run in itertools.groupby(layout)])


def run_layout(layout: str, argv: list[str], timeout: float = 300,
               **env: str) -> subprocess.CompletedProcess:
    """Run ``python argv...`` on the ranks of ``layout``; returns the finished process."""
    return run_launch(command(layout, argv), mpi_env(**env), timeout)


def run_script(tmp_path, script: str, transport: str, layout: str | None = None, n: int = 4,
               **env: str):
    """Run ``python -c script OUT transport`` on the ranks of ``layout``
    (else on ``n`` ranks of one host), which must end well; what it wrote
    to OUT (JSON)."""
    out = tmp_path / "out.json"
    argv = ["-c", script, str(out), transport]
    p = (run_layout(layout, argv, timeout=600, **env) if layout
         else run_mpi(n, argv, timeout=600, **env))
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.read_text())


def host_of(layout: str) -> list[int]:
    """Each rank's host index: hosts numbered in the order of their lowest rank."""
    seen: dict[str, int] = {}
    return [seen.setdefault(h, len(seen)) for h in layout]
