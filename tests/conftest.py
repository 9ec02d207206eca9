"""Shared fixtures: one conformance job per (world size, transport), run once per session."""
from __future__ import annotations

import json
import os
import tempfile

import pytest

from conformance import COMMS
from launch import ROOT, drop_mpi_files, drop_session_dirs, mpi_files, run_mpi, session_dirs

WORLD_SIZES = list(range(1, 9))
TRANSPORTS = ["shm", "mpi"]
# shm with its rendezvous (process_vm_readv) path on for messages of 4 KiB and up,
# and 4 KiB exchange buffers (the staged algorithms run many rounds); the
# dtype x op sweep's cases (a few hundred bytes) would run as in the shm job
CMA = "shm+cma"
CMA_ENV = {"COLLECTIVES_SHM_CMA_BYTES": "4096", "COLLECTIVES_SHM_XCHG_BYTES": "4096",
           # gather's one_copy at N = 2 shares every block (conformance.py)
           "CONFORMANCE_GATHER_SPLIT": "1", "CONFORMANCE_NO_SWEEP": "1"}
# the cuda transport over tests/standin, a host stand-in for CuPy (no GPU needed)
STANDIN = "cuda+standin"
# shm with the compiled reduction kernels off: every reduction through numpy
NUMPY = "shm+numpy"
# shm with the one-copy collectives off (COLLECTIVES_ONE_COPY=0): the staged
# algorithms alone, as where process_vm_readv is refused
NO_ONE_COPY = "shm+staged"
VARIANT_ENV = {NUMPY: {"COLLECTIVES_KERNELS": "0"}, NO_ONE_COPY: {"COLLECTIVES_ONE_COPY": "0"}}
# the cuda transport's conformance jobs (GPU and stand-in) cut messages into
# 64 KiB device chunks, so that the larger cases cross several chunks and
# slots; the default slot size (4-64 MiB) is checked by cuda_checks.py and
# by the benchmark's --check in bench/gpu_check.sh
CUDA_CHUNKS_ENV = {"COLLECTIVES_CUDA_SLOT_BYTES": str(64 << 10)}
# the families a variant's jobs run (unless CONFORMANCE_FAMILIES says); all if absent
VARIANT_FAMILIES = {NO_ONE_COPY: ["default", "all_gather"]}


# comma-separated families: each job runs only these (make mutants uses it to
# check one family quickly; unset, every family)
FAMILIES_ENV = "CONFORMANCE_FAMILIES"


# taken before any test module is collected: one that imports mpi4py's MPI
# initializes MPI in this process
_MPI_FILES_BEFORE = mpi_files()
_SESSION_DIRS_BEFORE = session_dirs()


@pytest.fixture(scope="session", autouse=True)
def mpi_library_files():
    """The files the MPI library leaves in /dev/shm for ranks killed by the
    tests (MPICH's mpich_shm_*, Open MPI's sm_segment.*) go at the end, as
    does the one of this process's own MPI_Init under Open MPI, and so do
    the session directories (/tmp/ompi.PID, /tmp/prted.PID) of the Open MPI
    launchers that the tests killed."""
    yield
    drop_mpi_files(_MPI_FILES_BEFORE, own=True)
    drop_session_dirs(_SESSION_DIRS_BEFORE)


def standin_env() -> dict:
    path = [str(ROOT / "tests" / "standin"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, path))}

_cache: dict = {}


def conformance_results(n: int, transport: str, layout: str | None = None,
                        cluster: str | None = None, **extra: str) -> dict:
    """{family: {"cases": total over ranks, "failures": [...], "comms": {communicator:
    cases}}} for a job of n ranks (tests/conformance.py); ``layout``: the
    ranks on emulated hosts (tests/emulate.py); ``cluster``: on the real
    hosts of tests/cluster.py, Hydra's -hosts spec; ``extra``: more environment."""
    key = (n, transport, layout, cluster, tuple(sorted(extra.items())))
    if key not in _cache:
        with tempfile.TemporaryDirectory() as d:
            env = CMA_ENV if transport == CMA else standin_env() if transport == STANDIN \
                else VARIANT_ENV.get(transport, {})
            if transport.split("+")[0] == "cuda":
                env = {**env, **CUDA_CHUNKS_ENV}
            only = [f for f in os.environ.get(FAMILIES_ENV, "").split(",") if f] or \
                VARIANT_FAMILIES.get(transport, [])
            argv = ["tests/conformance.py", transport.split("+")[0], d, *only]
            env = {**env, **extra}
            if cluster:
                import cluster as hosts
                p = hosts.run(cluster, argv, timeout=900, COLLECTIVES_TIMEOUT="20", **env)
            elif layout:
                from emulate import run_layout
                p = run_layout(layout, argv, timeout=600, COLLECTIVES_TIMEOUT="20", **env)
            else:
                p = run_mpi(n, argv, timeout=600, COLLECTIVES_TIMEOUT="20", **env)
            merged: dict = {}
            for r in range(n):
                path = os.path.join(d, f"rank{r}.json")
                if not os.path.exists(path):
                    merged.setdefault("_job", {"cases": 0, "failures": []})["failures"].append(
                        f"rank {r} wrote no results (exit {p.returncode}):\n{p.stdout[-2000:]}\n"
                        f"{p.stderr[-4000:]}")
                    continue
                with open(path) as f:
                    for fam, res in json.load(f).items():
                        m = merged.setdefault(fam, {"cases": 0, "failures": [], "comms": {}})
                        m["cases"] += res["cases"]
                        m["failures"] += [f"rank {r}: {x}" for x in res["failures"]]
                        for c, k in res["comms"].items():
                            m["comms"][c] = m["comms"].get(c, 0) + k
            _cache[key] = merged
    return _cache[key]


@pytest.fixture
def conformance():
    return conformance_results


def check_family(results: dict, family: str) -> None:
    job = results.get("_job")
    assert not job, "\n".join(job["failures"])
    res = results[family]
    assert not res["failures"], f"{len(res['failures'])} failing cases:\n" + "\n".join(
        res["failures"][:20])
    assert res["cases"] > 0, f"no {family} case ran"
    idle = [c for c in COMMS if not res["comms"].get(c)]
    assert not idle, f"no {family} case ran on the {' or '.join(idle)} communicator"


def pytest_terminal_summary(terminalreporter):
    total = sum(f["cases"] for r in _cache.values() for f in r.values())
    if total:
        terminalreporter.write_line(
            f"conformance: {total} multi-rank cases checked against numpy "
            f"(sum over ranks) in {len(_cache)} mpiexec jobs")
