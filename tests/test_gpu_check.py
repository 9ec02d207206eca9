"""bench/gpu_check.sh without a GPU: its dry run over tests/standin passes every
step, and its preflight names the first thing missing and stops at once."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from launch import ROOT

SCRIPT = ROOT / "bench" / "gpu_check.sh"
STEPS = ("preflight", "warmup", "tests", "bench")


def gpu_check(out, *args: str, timeout: float = 120,
              **env: str) -> subprocess.CompletedProcess:
    """The script with this Python, its files in ``out``, the stand-in off
    (the dry run puts it on the path itself)."""
    full = dict(os.environ, PYTHON=sys.executable, OUT=str(out), PYTHONPATH=str(ROOT))
    full.pop("MPIEXEC", None)
    full.update(env)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout)


def summary_lines(out) -> dict[str, str]:
    lines = (out / "summary.txt").read_text().splitlines()
    return {s: next((x for x in lines if x.startswith(s + ":")), "") for s in STEPS}


def test_dry_run_passes_every_step(tmp_path):
    p = gpu_check(tmp_path, "--dry-run", timeout=240)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    for step, line in summary_lines(tmp_path).items():
        assert line.split()[1:2] == ["passed"], f"{step}: {line!r}\n{p.stdout[-3000:]}"
        assert (tmp_path / f"{step}.log").stat().st_size > 0
    summary = (tmp_path / "summary.txt").read_text()
    assert "CuPy standin" in summary  # the preflight saw the stand-in, not a CuPy
    for collective in ("all_reduce", "all_gather"):  # the table, with the copy column
        rows = [x.split() for x in summary.splitlines() if x.startswith(collective)]
        # collective, ranks, size, busbw, the baseline's busbw and name, GPU copy, ratio
        assert len(rows) == 4 and all(len(r) == 8 and r[1] == "2" for r in rows), summary
    assert len(list(tmp_path.iterdir())) <= 8  # few files: a log per step, the summary


def test_preflight_names_missing_cupy_and_stops(tmp_path):
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("this Python has CuPy")
    t0 = time.monotonic()
    p = gpu_check(tmp_path, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode != 0
    assert "gpu_check: missing: CuPy" in p.stdout and "No module named 'cupy'" in p.stdout, \
        p.stdout
    assert took < 15, f"the preflight took {took:.0f} s to fail"
    lines = summary_lines(tmp_path)
    assert lines["preflight"].split()[1] == "FAILED", lines
    assert all("not run" in lines[s] for s in STEPS[1:]), lines


def test_preflight_names_missing_mpi_library(tmp_path):
    # mpi4py loads only the library MPI4PY_LIBMPI names; no wheel to install MPICH from
    p = gpu_check(tmp_path, "--dry-run", timeout=60, MPI4PY_LIBMPI="/nonexistent/libmpi.so.12",
                  GPU_CHECK_WHEELS=str(tmp_path / "no-wheels"))
    assert p.returncode != 0
    line = next((x for x in p.stdout.splitlines() if "gpu_check: missing:" in x), "")
    assert "MPICH" in line and "cannot load MPI library" in line and "--fetch-wheels" in line, \
        p.stdout
    assert not (tmp_path / "tests.log").exists()


def test_preflight_installs_mpich_from_its_wheel(tmp_path):
    wheels = sorted((ROOT / ".whl").glob("mpich-*.whl"))
    if not wheels:
        pytest.skip("no mpich wheel in .whl/ (bash bench/gpu_check.sh --fetch-wheels)")
    # mpi4py finds no library of its own, so the preflight installs MPICH's wheel and
    # points mpi4py (MPI4PY_LIBMPI) and the launcher (MPIEXEC) at it
    p = gpu_check(tmp_path, "--dry-run", timeout=90, MPI4PY_LIBMPI="/nonexistent/libmpi.so.12",
                  GPU_CHECK_STEPS="")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    log = (tmp_path / "preflight.log").read_text()
    assert f"installing {wheels[-1].name}" in log, log
    lines = summary_lines(tmp_path)
    assert "mpich/bin/mpiexec -n 2: a world of 2" in lines["preflight"], log
    assert all("skipped" in lines[s] for s in STEPS[1:]), lines  # GPU_CHECK_STEPS=""


def _refusing_launcher(tmp_path):
    """An mpiexec that says it is Open MPI 4's and starts nothing (as Debian's
    Open MPI refuses a Python whose mpi4py its ranks cannot import)."""
    fake = tmp_path / "bin" / "mpiexec"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "mpiexec (OpenRTE) 4.1.6"; exit 0; }\n'
                    'echo "ModuleNotFoundError: No module named \'mpi4py\'" >&2; exit 1\n')
    fake.chmod(0o755)
    return str(fake)


def test_preflight_names_a_launcher_that_starts_no_world(tmp_path):
    p = gpu_check(tmp_path, "--dry-run", timeout=60, MPIEXEC=_refusing_launcher(tmp_path),
                  GPU_CHECK_WHEELS=str(tmp_path / "no-wheels"), GPU_CHECK_STEPS="")
    assert p.returncode != 0
    line = next((x for x in p.stdout.splitlines() if "gpu_check: missing:" in x), "")
    assert "starts no world of 2" in line and "No module named 'mpi4py'" in line \
        and "--fetch-wheels" in line, p.stdout


def test_preflight_falls_back_to_mpich_where_the_launcher_starts_no_world(tmp_path):
    wheels = sorted((ROOT / ".whl").glob("mpich-*.whl"))
    if not wheels:
        pytest.skip("no mpich wheel in .whl/ (bash bench/gpu_check.sh --fetch-wheels)")
    p = gpu_check(tmp_path, "--dry-run", timeout=90, MPIEXEC=_refusing_launcher(tmp_path),
                  GPU_CHECK_STEPS="")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    log = (tmp_path / "preflight.log").read_text()
    assert "starts no world of 2" in log and f"installing {wheels[-1].name}" in log, log
    assert "mpich/bin/mpiexec -n 2: a world of 2" in summary_lines(tmp_path)["preflight"], log
