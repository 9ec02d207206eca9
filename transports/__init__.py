"""Transports: move bytes between the ranks of one communicator.

``open_transport(kind, mpicomm, timeout)`` is the only entry point the layer
above uses.  ``"auto"`` picks ``cuda`` (CUDA IPC, which also carries numpy
arrays through shared memory) when every rank is on one host, has imported
CuPy before and sees a GPU; ``shm`` on one host otherwise; ``mpi`` across
hosts.  MPI provides ranks, process ids and host grouping at start-up.
``TAG_UB`` is the largest tag every transport carries.
"""
from __future__ import annotations

import os
import socket

from . import _wire
from .base import TAG_UB, Endpoint, Request, Transport
from .errors import CollectiveError, CollectiveTimeout, PeerFailure

KINDS = ("auto", "shm", "mpi", "cuda")


def host_layout(mpicomm) -> tuple[list[int], list[bool], bool]:
    """Process ids of all ranks, which of them share this host, and whether all do."""
    me = (socket.gethostname(), os.getpid())
    everyone = _wire.allgather(mpicomm, me)
    local = [h == me[0] for h, _ in everyone]
    return [p for _, p in everyone], local, all(local)


def open_transport(kind: str, mpicomm, timeout: float) -> Transport:
    """Connect the ranks of ``mpicomm`` with a transport of ``kind``."""
    pids, local, one_host = host_layout(mpicomm)
    if kind == "auto":
        from .shm import supported
        kind = "shm" if one_host and supported() else "mpi"
        if kind == "shm":  # CuPy already imported and a GPU on every rank: CUDA IPC
            from .cuda import wanted
            kind = "cuda" if wanted(mpicomm) else "shm"
    if kind in ("shm", "cuda") and not one_host:
        raise ValueError(f"transport={kind!r} needs every rank on one host; "
                         "use transport='mpi' (or 'auto') across hosts")
    if kind == "shm":
        from .shm import ShmTransport
        return ShmTransport(mpicomm, timeout, pids, local)
    if kind == "mpi":
        from .mpi import MpiTransport
        return MpiTransport(mpicomm, timeout, pids, local)
    if kind == "cuda":  # imports CuPy; says why not where it or a GPU is missing
        from .cuda import CudaTransport
        return CudaTransport(mpicomm, timeout, pids, local)
    raise ValueError(f"transport must be one of {KINDS}, got {kind!r}")


__all__ = ["open_transport", "host_layout", "Endpoint", "Request", "Transport",
           "CollectiveError", "CollectiveTimeout", "PeerFailure", "KINDS", "TAG_UB"]
