"""Start-up exchanges among a communicator's processes, as bytes.

Host names, pids, settings, a segment's name and yes/no answers travel as
JSON text in buffer-based MPI calls (uppercase mpi4py methods), so that
nothing a process receives is unpickled; JSON is parsed, never evaluated.
"""
from __future__ import annotations

import json

import numpy as np


def _encode(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode(), np.uint8)


def _decode(buf: np.ndarray):
    return json.loads(buf.tobytes().decode())


def bcast(mpicomm, obj, root: int = 0):
    """``obj`` of rank ``root`` on every rank (JSON types: lists for tuples)."""
    data = _encode(obj) if mpicomm.Get_rank() == root else None
    n = np.array([0 if data is None else data.size], np.int64)
    mpicomm.Bcast(n, root=root)
    buf = data.copy() if data is not None else np.empty(int(n[0]), np.uint8)
    mpicomm.Bcast(buf, root=root)
    return _decode(buf)


def allgather(mpicomm, obj) -> list:
    """Every rank's ``obj``, in rank order."""
    from mpi4py import MPI
    data = _encode(obj)
    sizes = np.empty(mpicomm.Get_size(), np.int64)
    mpicomm.Allgather(np.array([data.size], np.int64), sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.empty(int(sizes.sum()), np.uint8)
    mpicomm.Allgatherv(data, [out, sizes.tolist(), offsets.tolist(), MPI.BYTE])
    return [_decode(out[o:o + s]) for o, s in zip(offsets, sizes)]


def all_true(mpicomm, flag: bool) -> bool:
    """Whether ``flag`` holds on every rank."""
    from mpi4py import MPI
    mine = np.array([1 if flag else 0], np.int32)
    every = np.empty_like(mine)
    mpicomm.Allreduce(mine, every, op=MPI.MIN)
    return bool(every[0])


def rank0_settings(mpicomm, read):
    """``read()`` on rank 0, broadcast; or rank 0's ValueError raised on every rank."""
    settings = None
    if mpicomm.Get_rank() == 0:
        try:
            settings = read()
        except ValueError as e:
            settings = str(e)
    settings = bcast(mpicomm, settings)
    if isinstance(settings, str):  # every rank raises rank 0's complaint
        raise ValueError(settings)
    return settings
