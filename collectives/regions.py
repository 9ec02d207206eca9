"""Communicator-allocated arrays: ``comm.empty`` and ``comm.zeros``.

A collective allocation: every rank calls it with the same shape and dtype.
The ranks first compare what each passed (through MPI, like ``split``), so
that a rank's bad argument or a mismatch raises the same error on every
rank before anything is allocated, and the communicator stays usable.

On the shared-memory transport the array lives in a region that every peer
maps (transports/shm/regions.py), so that a collective can let the peers
read it in place; elsewhere (MPI, one rank, zero bytes) it is a plain numpy
array, and every call takes it all the same.
"""
from __future__ import annotations

import numbers

import numpy as np

from transports._wire import allgather

from . import dtypes


def allocate(call: str, shape, dtype, zero: bool, mpicomm, transport) -> np.ndarray:
    """Every rank's array of one collective allocation (see the module), once
    no call of the communicator is in flight: ``mpicomm`` its ranks,
    ``transport`` its transport (where ``caps.regions``, the array's home)."""
    mine = request(shape, dtype)
    everyone = allgather(mpicomm, mine) if transport.size > 1 else [mine]
    agreed(call, everyone)
    shape, dt = tuple(mine[1]), dtypes.at(mine[2])
    if transport.caps.regions and transport.size > 1 and np.prod(shape, dtype=np.int64) > 0:
        return transport.regions.allocate(shape, dt)  # a new region reads as zeros
    return (np.zeros if zero else np.empty)(shape, dt)


def request(shape, dtype) -> list:
    """This rank's [error kind, shape or message, dtype index], as JSON carries
    it: kind "" where the arguments are good."""
    dims = [shape] if isinstance(shape, numbers.Integral) else shape
    try:
        if not all(isinstance(d, numbers.Integral) for d in dims):
            raise TypeError
        dims = [int(d) for d in dims]
    except TypeError:
        return ["TypeError", f"shape must be an int or a sequence of ints, got {shape!r}", -1]
    if any(d < 0 for d in dims):
        return ["ValueError", f"shape must not have negative sizes, got {shape!r}", -1]
    try:
        # the name alone is known to numpy only once ml_dtypes is imported
        dt = dtypes.load_bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt is None or not dtypes.supported(dt):
        return ["TypeError", f"dtype {dtype!r} is not supported; expected one of "
                             f"{dtypes.NAMES}", -1]
    return ["", dims, dtypes.index(dt)]


def agreed(call: str, everyone: list) -> None:
    """Raise, on every rank alike, the first rank's bad argument or a mismatch."""
    for r, (kind, what, _) in enumerate(everyone):
        if kind:
            raise (TypeError if kind == "TypeError" else ValueError)(f"{call}: rank {r}: {what}")
    first = everyone[0]
    for r, other in enumerate(everyone):
        if other[1:] != first[1:]:
            raise ValueError(
                f"{call}: every rank must pass the same shape and dtype; rank 0 passed "
                f"{_show(first)} and rank {r} passed {_show(other)}")


def _show(req: list) -> str:
    return f"shape {tuple(req[1])} dtype {dtypes.at(req[2])}"
