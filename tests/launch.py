"""Launch a script under MPICH's mpiexec (hydra) or its mpiexec.gforker."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def find_launcher(name: str, variable: str) -> str:
    """``$variable`` if set; else ``name`` beside this Python (a virtual
    environment with the mpich wheel); else ``name`` on PATH (an MPI that came
    some other way, e.g. bench/gpu_check.sh's).  The path beside this Python
    where it is nowhere, so that the error names where it was looked for."""
    given = os.environ.get(variable)
    if given:
        return given
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    return shutil.which(name) or str(beside)


MPIEXEC = find_launcher("mpiexec", "MPIEXEC")
# MPICH's simple fork launcher: unlike hydra it lets the survivors of a killed
# rank run on (hydra may SIGKILL them even with -disable-auto-cleanup).
GFORKER = find_launcher("mpiexec.gforker", "GFORKER")


def mpi_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("COLLECTIVES_TIMEOUT", "30")
    env.update(extra)
    return env


def run_mpi(n: int, argv: list[str], timeout: float = 300, launcher: str = MPIEXEC,
            **env: str) -> subprocess.CompletedProcess:
    """Run ``python argv...`` on ``n`` ranks; returns the finished process."""
    cmd = [launcher, "-n", str(n), sys.executable, *argv]
    return subprocess.run(cmd, cwd=ROOT, env=mpi_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def start_mpi(n: int, argv: list[str], launcher: str = MPIEXEC, **env: str) -> subprocess.Popen:
    """Start ``python argv...`` on ``n`` ranks without waiting for it."""
    cmd = [launcher, "-n", str(n), sys.executable, *argv]
    return subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(**env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def shm_files(prefix: str = "collectives-") -> set[str]:
    """Our segments in /dev/shm (MPICH's own are ``mpich_shm_*``)."""
    try:
        return {f for f in os.listdir("/dev/shm") if f.startswith(prefix)}
    except FileNotFoundError:
        return set()


def finish(out_path: str, results, rank: int, *comms) -> int:
    """End of an mpiexec check script: rank 0 writes ``results`` as JSON, and
    every communicator given (None for one a rank is not in) is closed."""
    import json
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    for c in comms:
        if c is not None:
            c.close()
    return 0
