"""The cuda transport: CuPy arrays between processes through CUDA IPC.

* On a GPU (CuPy installed and a CUDA device visible): the conformance
  families on CuPy arrays at N = 2 and 4, the traffic formulas on CuPy
  arrays, and the CuPy checks of tests/cuda_checks.py (bad input, numpy
  beside CuPy, kinds mixed between ranks, a caller's own stream).  Skipped,
  with the reason, where CuPy or a GPU is missing.
* Everywhere: the same jobs over tests/standin, a host stand-in for CuPy,
  which runs the transport's protocol (device slots, IPC handles, events,
  chunking, counters, errors) without a GPU, though not the GPU's ordering;
  and the error that transport='cuda' gives without CuPy or a GPU.
* On the stand-in only: a CUDA call of set-up that fails on one rank makes
  every rank raise (none waits in an MPI call), and ranks on two GPUs with
  and without peer access; "device memory" that a killed process left under
  a pid that is now another's is not counted as that process's.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import collectives as cc
from conformance import FAMILIES
from conftest import STANDIN, check_family, standin_env
from launch import ROOT, mpi_env, run_mpi, shm_files
from transports.cuda import probe


MISSING = probe()  # None where CuPy and a GPU are here, else why not
gpu = pytest.mark.skipif(MISSING is not None, reason=f"needs a GPU: {MISSING}")
# (transport key for conftest, extra environment): the real thing and the stand-in
SIDES = [pytest.param("cuda", {}, marks=gpu, id="gpu"),
         pytest.param(STANDIN, None, id="standin")]


def _env(extra):
    return standin_env() if extra is None else extra


def run_check(n: int, argv: list[str], timeout: float, **env: str):
    """``run_mpi``, where a job still running after ``timeout`` s fails the
    test with what its ranks printed (cuda_checks.py prints the stack of
    every thread of a rank still running after STALL_DUMP_S)."""
    try:
        return run_mpi(n, argv, timeout=timeout, **env)
    except subprocess.TimeoutExpired as e:
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                    for x in (e.stdout, e.stderr))
        pytest.fail(f"mpiexec -n {n} {' '.join(argv)} did not finish in {timeout} s\n"
                    f"{out[-3000:]}\n{err[-8000:]}")


def left_in_dev_shm(before: set[str], settle_s: float = 5.0) -> set[str]:
    """Segments that appeared in /dev/shm since ``before`` and stay there.
    Other jobs on this machine make segments too, each there only between
    its creation and its unlinking by the same job (milliseconds), so a new
    name counts only if it is still there ``settle_s`` later."""
    left = shm_files() - before
    end = time.monotonic() + settle_s
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left &= shm_files()
    return left


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("side,extra", SIDES)
def test_family_on_cupy_arrays(conformance, side, extra, n, family):
    check_family(conformance(n, side), family)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("side,extra", SIDES)
def test_bytes_per_algorithm_on_cupy_arrays(side, extra, n):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "traffic.json")
        p = run_mpi(n, ["tests/traffic.py", "cuda", out], timeout=300, **_env(extra))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        with open(out) as f:
            res = json.load(f)
    assert res["checked"] > 0
    assert not res["failures"], "\n".join(res["failures"][:30])


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("side,extra", SIDES)
def test_cupy_checks(side, extra, n):
    before = shm_files()  # each rank checks its own device memory (the stand-in's files)
    p = run_check(n, ["tests/cuda_checks.py"], timeout=120, **_env(extra))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not left_in_dev_shm(before), "segments left in /dev/shm"


# (what the stand-in makes fail on rank 1, in which set-up step)
SETUP_FAILURES = [("Stream", "creating streams"),
                  ("malloc", "allocating device slots"),
                  ("ipcGetMemHandle", "allocating device slots"),
                  ("ipcOpenMemHandle", "opening the peers'")]


@pytest.mark.parametrize("call,step", SETUP_FAILURES, ids=[c for c, _ in SETUP_FAILURES])
def test_setup_failure_on_one_rank_raises_on_every_rank(call, step):
    """Rank 1 of 3 fails a CUDA call in set-up: every rank raises ValueError
    naming rank 1, its call and the step, none waits in an MPI call, and no
    rank leaves device memory behind (checked by each rank)."""
    before = shm_files()
    p = run_check(3, ["tests/cuda_checks.py", "setup-fails", "rank 1", call, step], timeout=90,
                  STANDIN_CUPY_FAIL=f"{call}:1", **standin_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not left_in_dev_shm(before), "segments left in /dev/shm"


def test_two_gpus_with_peer_access():
    """Ranks on two GPUs that can access each other: the CuPy checks pass."""
    p = run_check(2, ["tests/cuda_checks.py"], timeout=120, STANDIN_CUPY_DEVICES="2",
                  **standin_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_gpus_without_peer_access_are_named():
    """Two ranks on two GPUs that cannot access each other as peers: every
    rank raises, naming the cause."""
    p = run_check(2, ["tests/cuda_checks.py", "setup-fails", "as a peer", "rank 0", "rank 1",
                      "cudaDeviceCanAccessPeer"], timeout=90, STANDIN_CUPY_DEVICES="2",
                  STANDIN_CUPY_PEER_ACCESS="0", **standin_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_standin_removes_what_a_dead_process_of_its_pid_left():
    """Pids are reused: the stand-in's files named after this pid are a killed
    process's, and cuda_checks.py must not count them as this one's."""
    code = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, "tests")
        stale = f"/dev/shm/standin-cuda-{os.getpid()}-9"
        open(stale, "w").close()
        try:
            import cupy
            from cuda_checks import left_behind
            print(left_behind())
        finally:
            if os.path.exists(stale):
                os.unlink(stale)
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env=mpi_env(**standin_env()))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]", p.stdout


@pytest.mark.skipif(MISSING is None, reason="CuPy and a GPU are here")
def test_cuda_without_cupy_or_gpu_says_why():
    with pytest.raises(ValueError) as e:
        cc.init(transport="cuda")
    msg = str(e.value)
    assert "transport='cuda'" in msg and ("CuPy" in msg or "CUDA" in msg), msg


def test_auto_stays_on_shared_memory_without_cupy():
    p = run_mpi(2, ["-c", "import collectives as cc; c = cc.init(); "
                          "print(f'<{c.transport}>', flush=True); c.close()"], timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("<shm>") == 2, p.stdout


def test_device_slot_bytes_follow_ranks_and_gpu_memory():
    from transports.cuda import MAX_SLOT_BYTES, MIN_SLOT_BYTES, slot_bytes
    gib, mib = 1 << 30, 1 << 20
    # one 141 GB GPU: a region of at most 1 GiB a rank, 2·(N−1)·4 slots in it
    assert slot_bytes(2, 4, 141 * gib, 1) == MAX_SLOT_BYTES          # 128 MiB fit: capped
    assert slot_bytes(4, 4, 141 * gib, 1) == 32 * mib                # 1 GiB / 24 = 42.7 MiB
    assert slot_bytes(8, 4, 141 * gib, 1) == 16 * mib                # 1 GiB / 56 = 18.3 MiB
    # a 16 GiB GPU shared by 8 ranks: 1/16 of it a rank (128 MiB): the floor
    assert slot_bytes(8, 4, 16 * gib, 1) == MIN_SLOT_BYTES
    # the same ranks on 8 such GPUs: 1 GiB a rank again
    assert slot_bytes(8, 4, 16 * gib, 8) == 16 * mib
    assert slot_bytes(2, 8, 141 * gib, 1) == 64 * mib                # 1 GiB / 16
    assert slot_bytes(1, 4, 141 * gib, 1) == MIN_SLOT_BYTES          # no peers: no region
    for n in range(2, 9):  # a power of two between the bounds, the region within its budget
        b = slot_bytes(n, 4, 24 * gib, 1)
        assert MIN_SLOT_BYTES <= b <= MAX_SLOT_BYTES and b & (b - 1) == 0
        assert b == MIN_SLOT_BYTES or 2 * (n - 1) * 4 * b <= min(gib, 24 * gib // (16 * n))
