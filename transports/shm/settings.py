"""The shared-memory transport's settings: what the environment asks for
(rank 0's values hold for every rank: the layout must be the same
everywhere), and what one transport then runs with (``Settings``)."""
from __future__ import annotations

import dataclasses
import os

from ..base import env_int

# A rank with nothing to do looks at its doorbell this many times, yielding
# the core in between (about 0.6 us a look here), before it sleeps in the
# kernel: many where every rank of the job on this machine has a core of its
# own (a futex wake-up costs tens of microseconds, and a pipelined transfer
# waits on its peer at every chunk: at N = 2, 1 MiB broadcasts ran 5x and 4
# MiB gathers 1.5x faster with 2000 looks than with 20), few where ranks
# share cores (a looking rank holds the core its peer needs).
SPIN_OWN_CORES = 2000
SPIN_SHARED_CORES = 20


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the parts of one shm transport run with.

    ``slot_bytes``, ``nslots``: a channel's slots; ``xchg_bytes``: an
    exchange buffer; ``cma_bytes``: messages of this many bytes and more go
    by rendezvous (0: none); ``one_copy``: the one-copy collectives are
    offered (process_vm_readv works between the ranks); ``spin``: looks at
    the doorbell before a wait sleeps."""

    slot_bytes: int
    nslots: int
    xchg_bytes: int
    cma_bytes: int = 0
    one_copy: bool = False
    spin: int = SPIN_SHARED_CORES


def ranks_on_this_machine(size: int) -> int:
    """The ranks of the job on this machine as the launcher tells them (MPICH's
    Hydra: MPI_LOCALNRANKS; Open MPI: OMPI_COMM_WORLD_LOCAL_SIZE), and at
    least the ``size`` ranks of this segment."""
    told = [os.environ.get(k, "") for k in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")]
    return max([size] + [int(v) for v in told if v.strip().isdigit()])


def default_spin(size: int) -> int:
    """COLLECTIVES_SPIN's default for a segment of ``size`` ranks."""
    cores = len(os.sched_getaffinity(0))
    return SPIN_OWN_CORES if ranks_on_this_machine(size) <= cores else SPIN_SHARED_CORES


def from_env() -> tuple[int, int, int, int, bool]:
    """(slot_bytes, nslots, xchg_bytes, cma_bytes, one_copy) as the
    environment asks; ValueError for a value out of range."""
    slot_bytes = env_int("COLLECTIVES_SHM_SLOT_BYTES", 256 * 1024)
    nslots = env_int("COLLECTIVES_SHM_SLOTS", 4)
    # the largest contribution that exchange() moves in one copy
    xchg_bytes = env_int("COLLECTIVES_SHM_XCHG_BYTES", 1024 * 1024)
    # off by default: on the 2-core VM this was measured on, process_vm_readv
    # was no faster than two slot copies (docs/performance.md)
    cma_bytes = env_int("COLLECTIVES_SHM_CMA_BYTES", 0)
    # the one-copy collectives (one_copy.py), where the ranks may read each
    # other's memory; 0 turns them off (the staged algorithms, as without CMA)
    one_copy = env_int("COLLECTIVES_ONE_COPY", 1)
    if os.environ.get("COLLECTIVES_SHM_CMA"):  # set, it would be silently ignored
        raise ValueError("COLLECTIVES_SHM_CMA is not read: COLLECTIVES_ONE_COPY (0 or 1) "
                         "switches the one-copy collectives")
    if slot_bytes % 64 or slot_bytes <= 0:
        raise ValueError("COLLECTIVES_SHM_SLOT_BYTES must be a positive multiple of 64")
    if nslots < 1 or nslots & (nslots - 1):
        raise ValueError("COLLECTIVES_SHM_SLOTS must be a power of two")
    if xchg_bytes % 64 or xchg_bytes < 4096:
        raise ValueError("COLLECTIVES_SHM_XCHG_BYTES must be a multiple of 64, at least 4096")
    if one_copy not in (0, 1):
        raise ValueError("COLLECTIVES_ONE_COPY must be 0 or 1")
    return slot_bytes, nslots, xchg_bytes, max(0, cma_bytes), bool(one_copy)
