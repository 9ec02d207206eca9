"""Launch a script under the MPI at hand (collectives/launcher.py: MPICH's
Hydra or gforker, Open MPI's prterun)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from collectives.launcher import Launcher, default, find
from collectives.runtime import MPI_FILES

ROOT = Path(__file__).resolve().parent.parent


MPIEXEC = find("mpiexec", "MPIEXEC")
LAUNCH = default()
# survivors of a killed rank run on: MPICH's simple fork launcher (hydra may
# SIGKILL them even with -disable-auto-cleanup), or Open MPI's with
# --enable-recovery
SURVIVE = default(keep_going=True)


def mpi_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("COLLECTIVES_TIMEOUT", "30")
    env.update(extra)
    return env


# what a launcher says when it ends before any rank has started: Open MPI's
# prterun now and then on a loaded machine (exit status 213), and across
# hosts when its daemon on another host does not come up in time
LAUNCH_FAILURES = ("PMIx server's listener thread failed to start", "failed to report back",
                   "HYDU_sock_connect")  # Hydra's proxy on another host could not call back


def launch_failed(said: str) -> bool:
    """Whether a launcher's output says that it started no rank."""
    return any(m in said for m in LAUNCH_FAILURES)


def run_launch(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run launcher command ``cmd`` to its end; a launch that started no rank
    (``launch_failed``) is tried once more."""
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode and launch_failed(p.stdout + p.stderr):
        print(f"the launcher started no rank; run again: {p.stderr[-500:]}", file=sys.stderr)
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    return p


def run_mpi(n: int, argv: list[str], timeout: float = 300, launcher: Launcher = LAUNCH,
            **env: str) -> subprocess.CompletedProcess:
    """Run ``python argv...`` on ``n`` ranks; returns the finished process
    (``run_launch``)."""
    return run_launch(launcher(n, [sys.executable, *argv]), mpi_env(**env), timeout)


def start_mpi(n: int, argv: list[str], launcher: Launcher = LAUNCH, log: str | None = None,
              **env: str) -> subprocess.Popen:
    """Start ``python argv...`` on ``n`` ranks without waiting for it
    (``log``: a file for what the launcher and ranks print)."""
    cmd = launcher(n, [sys.executable, *argv])
    out = subprocess.DEVNULL if log is None else open(log, "w")
    try:
        return subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(**env), stdout=out,
                                stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    finally:
        if log is not None:
            out.close()


def mpi_files() -> set[str]:
    """The MPI libraries' own files in /dev/shm (MPI_FILES)."""
    return set().union(*(shm_files(p) for p in MPI_FILES))


def mapped(but: int | None = None) -> set[str]:
    """Names of /dev/shm files that some live process (other than ``but``)
    maps or holds open."""
    names = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if pid == str(but):
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                names.update(line.rsplit("/", 1)[1].split()[0] for line in f
                             if "/dev/shm/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    names.add(target[len("/dev/shm/"):].split()[0])
        except OSError:
            continue
    return names


def drop_mpi_files(before: set[str], own: bool = False) -> None:
    """Remove the MPI libraries' files that appeared since ``before`` and
    that no live process maps (never a running job's); ``own``: also those
    this process alone maps (Open MPI's singleton MPI_Init, in the test
    process itself, never removes its sm_segment file)."""
    for f in mpi_files() - before - mapped(os.getpid() if own else None):
        try:
            os.unlink(os.path.join("/dev/shm", f))
        except FileNotFoundError:
            pass


# Open MPI's session directories: prterun's and each prted's, named by its pid
_SESSION_DIR = re.compile(r"(ompi|prted)\.(\d+)")


def session_dirs() -> set[str]:
    """Open MPI's session directories in the temporary directory."""
    return {d for d in os.listdir(tempfile.gettempdir()) if _SESSION_DIR.fullmatch(d)}


def drop_session_dirs(before: set[str]) -> None:
    """Remove the session directories that appeared since ``before`` and
    whose launcher or daemon has ended: a job whose launcher the tests kill
    (faults, a cut link, a cluster taken down) leaves its directory."""
    for d in session_dirs() - before:
        if _running(int(_SESSION_DIR.fullmatch(d).group(2))):
            continue  # a running job's
        shutil.rmtree(os.path.join(tempfile.gettempdir(), d), ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended
    and not yet waited for by its parent, has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return True


def shm_files(prefix: str = "collectives-") -> set[str]:
    """Our segments in /dev/shm (the MPI libraries' own: mpi_files)."""
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
