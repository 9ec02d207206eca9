"""Real hosts on this machine (cluster/cluster): network namespaces with
their own hostnames, joined through a switch, MPICH's Hydra (or Open MPI's
prterun) launching across them through an ssh stand-in, and MPI moving bytes
between them over TCP.

``make test-cluster`` runs tests/test_cluster.py with CLUSTER_TESTS=1; it
needs root and ``ip`` (``cluster/cluster check`` says why not where it cannot).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile

from launch import LAUNCH, MPIEXEC, ROOT, mpi_env, run_launch

SCRIPT = ROOT / "cluster" / "cluster"
ENABLED = os.environ.get("CLUSTER_TESTS", "") not in ("", "0")
# layout name -> Hydra's -hosts spec (host:ranks, in rank order)
LAYOUTS = {"2x2": "h0:2,h1:2", "2+1+1": "h0:2,h1:1,h2:1"}
HOSTS = 3  # the cluster the tests bring up: every layout above fits on it


def ranks_of(spec: str) -> list[str]:
    """Each rank's host under ``spec`` (``h0:2,h1:1`` -> [h0, h0, h1])."""
    return [h for part in spec.split(",") for h, k in [part.split(":")] for _ in range(int(k))]


def unavailable() -> str | None:
    """Why hosts cannot be made here (None where they can)."""
    p = subprocess.run([str(SCRIPT), "check"], capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stdout + p.stderr).strip() or "cluster check failed"


def cluster(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """``cluster/cluster args...``."""
    p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"cluster {' '.join(args)}: {p.stdout}{p.stderr}")
    return p


def up(hosts: int = HOSTS, rate: str = "none") -> None:
    cluster("up", str(hosts), rate)


def down() -> None:
    cluster("down", check=False)


# Open MPI's launch where the survivors of a dead rank on another host run
# on: its fault-tolerant mode, and its tcp BTL without RDMA put.  With put,
# a large message arrives through receiver-driven puts, and a receive in
# progress from a rank that died spins for good inside the next MPI call,
# in ob1's mca_pml_ob1_recv_request_schedule_once (seen here, about one
# killed-rank job in fifteen on a loaded machine; docs/mpi.md).
OPENMPI_SURVIVE = ("--with-ft=ulfm", "--mca", "btl_tcp_flags",
                   "send,inplace,need-ack,need-csum,hetero-rdma")


def command(spec: str, argv: list[str], cleanup: bool = True) -> list[str]:
    """The command that runs ``python argv...`` on the ranks of ``spec``.
    ``cleanup`` False: the survivors of a dead rank run on.  Hydra's
    ``-disable-auto-cleanup`` alone does not do that across hosts: the proxy
    of a rank killed by a signal SIGKILLs the other ranks of its host
    (measured: exit codes 9 on the victim's host).  So each rank runs under
    a shell that stays its parent (a killed rank is then a shell that
    exits with status 137) and ignores the SIGUSR1 that Hydra sends the
    survivors.  Open MPI's launcher lets them run on with --enable-recovery."""
    n = len(ranks_of(spec))
    run = [sys.executable, *argv]
    if not cleanup:
        run = ["sh", "-c", "trap '' USR1; " + shlex.join(run)]
    keep = list(OPENMPI_SURVIVE) if LAUNCH.kind == "openmpi" else ["-disable-auto-cleanup"]
    return [str(SCRIPT), "mpiexec", spec, *([] if cleanup else keep), "-n", str(n), *run]


def env(**extra: str) -> dict:
    """The launch's environment (Hydra passes it to every host's ranks)."""
    return mpi_env(MPIEXEC=MPIEXEC, **extra)


def run(spec: str, argv: list[str], timeout: float = 300, **extra: str
        ) -> subprocess.CompletedProcess:
    """Run ``python argv...`` on the ranks of ``spec``; the finished process."""
    try:
        return run_launch(command(spec, argv), env(**extra), timeout)
    except subprocess.TimeoutExpired as e:
        stop_jobs()
        raise AssertionError(f"{spec} {argv}: no end within {timeout} s\n{e.stdout}\n{e.stderr}")


def start(spec: str, argv: list[str], cleanup: bool = True, **extra: str) -> subprocess.Popen:
    """Start ``python argv...`` on the ranks of ``spec`` without waiting; the
    launcher's output goes to a file (``said(p)``)."""
    out = tempfile.TemporaryFile()
    p = subprocess.Popen(command(spec, argv, cleanup), cwd=ROOT, env=env(**extra),
                         stdout=out, stderr=subprocess.STDOUT)
    p.output = out
    return p


def said(p: subprocess.Popen, tail: int = 3000) -> str:
    """The end of what job ``p`` (``start``) printed so far."""
    p.output.seek(0)
    return p.output.read().decode("utf-8", "replace")[-tail:]


def stop_jobs() -> None:
    """Kill every process left in the hosts (a job that could not end)."""
    cluster("kill", check=False)


def in_host(host: str, *cmd: str) -> str:
    return cluster("exec", host, *cmd).stdout


def counters(host: str) -> tuple[int, int]:
    """The host's link device's bytes sent and received, as its kernel counts them."""
    dev = cluster("dev", host).stdout.strip()
    out = in_host(host, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes",
                  f"/sys/class/net/{dev}/statistics/rx_bytes").split()
    return int(out[0]), int(out[1])


def link(host: str, state: str) -> None:
    cluster("link", host, state)


def processes() -> list[str]:
    """The processes still running in the hosts' namespaces."""
    return cluster("ps", check=False).stdout.split()


def leftovers() -> list[str]:
    """What of a cluster is still here: namespaces, /etc/netns entries, links
    in this namespace, state (all named with the cc- prefix)."""
    out = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [f"namespace {line.split()[0]}" for line in ns.splitlines()
            if line.startswith("cc-")]
    if os.path.isdir("/etc/netns"):
        out += [f"/etc/netns/{d}" for d in os.listdir("/etc/netns") if d.startswith("cc-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += [f"link {line.split(': ')[1]}" for line in links.splitlines()
            if line.split(": ")[1].startswith("cc-")]
    if os.path.exists("/run/cc-cluster"):
        out.append("/run/cc-cluster")
    return out


def describe() -> list[str]:
    """The processes in the hosts: pid, namespace, state, command line."""
    out = []
    for pid in processes():
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ")[:160]
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        ns = subprocess.run(["ip", "netns", "identify", pid], capture_output=True,
                            text=True).stdout.strip()
        out.append(f"{pid} {ns} {state} {cmd}")
    return out
