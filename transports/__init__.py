"""Transports: move bytes between the ranks of one communicator.

``open_transport(kind, mpicomm, timeout)`` is the only entry point the layer
above uses.  MPI provides ranks, process ids and host grouping at start-up.
"""
from __future__ import annotations

import os
import socket

from .base import Endpoint, Request, Transport
from .errors import CollectiveError, CollectiveTimeout, PeerFailure

KINDS = ("auto", "shm", "mpi", "cuda")


def host_layout(mpicomm) -> tuple[list[int], list[bool], bool]:
    """Process ids of all ranks, which of them share this host, and whether all do."""
    me = (socket.gethostname(), os.getpid())
    everyone = mpicomm.allgather(me)
    local = [h == me[0] for h, _ in everyone]
    return [p for _, p in everyone], local, all(local)


def open_transport(kind: str, mpicomm, timeout: float) -> Transport:
    """Connect the ranks of ``mpicomm`` with a transport of ``kind``."""
    pids, local, one_host = host_layout(mpicomm)
    if kind == "auto":
        from .shm import supported
        kind = "shm" if one_host and supported() else "mpi"
    if kind == "shm":
        if not one_host:
            raise ValueError("transport='shm' needs every rank on one host; "
                             "use transport='mpi' (or 'auto') across hosts")
        from .shm import ShmTransport
        return ShmTransport(mpicomm, timeout, pids, local)
    if kind == "mpi":
        from .mpi import MpiTransport
        return MpiTransport(mpicomm, timeout, pids, local)
    if kind == "cuda":
        raise ValueError("transport='cuda' needs CuPy and a GPU; it is not available in "
                         "this build")
    raise ValueError(f"transport must be one of {KINDS}, got {kind!r}")


__all__ = ["open_transport", "host_layout", "Endpoint", "Request", "Transport",
           "CollectiveError", "CollectiveTimeout", "PeerFailure", "KINDS"]
