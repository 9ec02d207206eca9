"""Transports: move bytes between the ranks of one communicator.

The layer below the collectives, which never imports them.  What the
collectives use of it: ``open_transport(kind, mpicomm, timeout)``, which
connects the ranks; the interface of what it returns (``base.py``:
``Transport`` with its ``caps``, a ``Capabilities``, and its two
``Endpoint``s and their ``Request``s, ``UNCHECKED``, ``broken_error``), the
errors (``errors.py``), the host layout (``Hosts``, ``host_layout``),
``TAG_UB``, ``KINDS``, the start-up messages of ``_wire.py`` and the one
streaming copy (``copy.py``).  ``"auto"`` picks ``cuda`` (CUDA IPC, which also carries numpy
arrays through shared memory) when every rank is on one host, has imported
CuPy before and sees a GPU; ``shm`` on one host otherwise; ``hier`` (shared
memory within each host, MPI between hosts: transports/hier.py) across
hosts.  MPI provides ranks, process ids and host grouping at start-up
(transports/hosts.py).  ``TAG_UB`` is the largest tag every transport carries.
"""
from __future__ import annotations

from .base import TAG_UB, Endpoint, Request, Transport
from .errors import CollectiveError, CollectiveTimeout, PeerFailure
from .hosts import Hosts, discover

KINDS = ("auto", "shm", "mpi", "cuda", "hier")


def host_layout(mpicomm) -> tuple[list[int], list[bool], bool]:
    """Process ids of all ranks, which of them run on this machine, and whether
    every rank is on one host (as $COLLECTIVES_HOST or the machine names it)."""
    h = discover(mpicomm)
    return list(h.pids), list(h.local), h.one_host


def open_transport(kind: str, mpicomm, timeout: float) -> Transport:
    """Connect the ranks of ``mpicomm`` with a transport of ``kind``."""
    hosts = discover(mpicomm)
    t = _open(kind, mpicomm, timeout, hosts)
    t.place(hosts)
    return t


def _open(kind: str, mpicomm, timeout: float, hosts: Hosts) -> Transport:
    pids, local = list(hosts.pids), list(hosts.local)
    if kind == "auto":
        from .shm import supported
        kind = "shm" if hosts.one_host and supported() else "hier" if supported() else "mpi"
        if kind == "shm":  # CuPy already imported and a GPU on every rank: CUDA IPC
            from .cuda import wanted
            kind = "cuda" if wanted(mpicomm) else "shm"
    if kind in ("shm", "cuda") and not hosts.one_host:
        raise ValueError(f"transport={kind!r} needs every rank on one host, but these ranks "
                         f"run on {hosts.hosts} hosts (ranks of different hosts never share "
                         "memory); use transport='hier' (or 'auto') or 'mpi' across hosts")
    if kind == "shm":
        from .shm import ShmTransport
        return ShmTransport(mpicomm, timeout, pids, local)
    if kind == "mpi":
        from .mpi import MpiTransport
        return MpiTransport(mpicomm, timeout, pids, local)
    if kind == "hier":
        from .hier import HierTransport
        return HierTransport(mpicomm, timeout, hosts)
    if kind == "cuda":  # imports CuPy; says why not where it or a GPU is missing
        from .cuda import CudaTransport
        return CudaTransport(mpicomm, timeout, pids, local)
    raise ValueError(f"transport must be one of {KINDS}, got {kind!r}")


__all__ = ["open_transport", "host_layout", "Endpoint", "Request", "Transport", "Hosts",
           "CollectiveError", "CollectiveTimeout", "PeerFailure", "KINDS", "TAG_UB"]
