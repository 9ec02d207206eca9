"""The collective calls: for each, its algorithm table and default chooser.

The one list of the calls: the Communicator looks algorithms up here, and
debug mode numbers calls and algorithms by their place in it.
"""
from __future__ import annotations

from typing import Callable

from . import (all_gather, all_reduce, all_to_all, barrier, broadcast, gather, reduce,
               reduce_scatter)

# choose(nbytes, size, shared, one_copy) -> name; shared: the transport's
# exchange() goes through shared memory (shm, host arrays); one_copy: and the
# one-copy algorithms are offered (one_copy.py)
Chooser = Callable[[int, int, bool, bool], str]

FAMILIES: dict[str, tuple[dict[str, Callable], Chooser]] = {
    "all_reduce": (all_reduce.ALGORITHMS, all_reduce.choose),
    "broadcast": (broadcast.ALGORITHMS, broadcast.choose),
    "reduce": (reduce.ALGORITHMS, reduce.choose),
    "all_gather": (all_gather.ALGORITHMS, all_gather.choose),
    "reduce_scatter": (reduce_scatter.ALGORITHMS, reduce_scatter.choose),
    "all_to_all": (all_to_all.ALGORITHMS, all_to_all.choose),
    "gather": (gather.GATHER, gather.choose),
    "scatter": (gather.SCATTER, gather.choose_scatter),
    "barrier": (barrier.ALGORITHMS, barrier.choose),
}

CALLS: tuple[str, ...] = tuple(FAMILIES)


def offered(shared: bool, one_copy: bool = False) -> dict[str, dict[str, Callable]]:
    """Each call's algorithms that a communicator offers, in table order: all
    of them where exchange() goes through shared memory (``shared``), else
    those not marked ``shared_only`` (built for exchange buffers that a peer
    reads only part of, they would ship whole buffers as messages); those
    marked ``one_copy_only`` only where the peers read each other's memory
    (``one_copy``: shared memory with process_vm_readv working)."""
    return {call: {name: fn for name, fn in table.items()
                   if (shared or not getattr(fn, "shared_only", False))
                   and (one_copy or not getattr(fn, "one_copy_only", False))}
            for call, (table, _) in FAMILIES.items()}
