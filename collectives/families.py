"""The collective calls: for each, its algorithm table and default chooser.

The one list of the calls: the Communicator looks algorithms up here, and
debug mode numbers calls and algorithms by their place in it.
"""
from __future__ import annotations

from typing import Callable

from . import (all_gather, all_reduce, all_to_all, barrier, broadcast, gather, hier, reduce,
               reduce_scatter)

# choose(nbytes, size, shared, one_copy) -> name; shared: the transport's
# exchange() goes through shared memory (shm, host arrays); one_copy: and the
# one-copy algorithms are offered (one_copy.py)
Chooser = Callable[[int, int, bool, bool], str]


def _with_hier(call: str, table: dict[str, Callable]) -> dict[str, Callable]:
    """A call's flat algorithms, then its hierarchical ones (collectives/hier.py)."""
    return {**table, **hier.ALGORITHMS.get(call, {})}


FAMILIES: dict[str, tuple[dict[str, Callable], Chooser]] = {
    "all_reduce": (_with_hier("all_reduce", all_reduce.ALGORITHMS), all_reduce.choose),
    "broadcast": (_with_hier("broadcast", broadcast.ALGORITHMS), broadcast.choose),
    "reduce": (_with_hier("reduce", reduce.ALGORITHMS), reduce.choose),
    "all_gather": (_with_hier("all_gather", all_gather.ALGORITHMS), all_gather.choose),
    "reduce_scatter": (_with_hier("reduce_scatter", reduce_scatter.ALGORITHMS),
                       reduce_scatter.choose),
    "all_to_all": (_with_hier("all_to_all", all_to_all.ALGORITHMS), all_to_all.choose),
    "gather": (gather.GATHER, gather.choose),
    "scatter": (gather.SCATTER, gather.choose),
    "barrier": (_with_hier("barrier", barrier.ALGORITHMS), barrier.choose),
}

CALLS: tuple[str, ...] = tuple(FAMILIES)


def offered(shared: bool, one_copy: bool = False,
            hosts=None) -> dict[str, dict[str, Callable]]:
    """Each call's algorithms that a communicator offers, in table order: all
    of them where exchange() goes through shared memory (``shared``), else
    those not marked ``shared_only`` (built for exchange buffers that a peer
    reads only part of, they would ship whole buffers as messages); those
    marked ``one_copy_only`` only where the peers read each other's memory
    (``one_copy``: shared memory with process_vm_readv working); those
    marked ``hier_only`` only on the "hier" transport (``hosts``: its
    layout), and of those the ones marked ``equal_hosts`` only where every
    host holds as many ranks."""
    def ok(fn) -> bool:
        if getattr(fn, "shared_only", False) and not shared:
            return False
        if getattr(fn, "one_copy_only", False) and not one_copy:
            return False
        if getattr(fn, "hier_only", False):
            return hosts is not None and (hosts.equal or not getattr(fn, "equal_hosts", False))
        return True
    return {call: {name: fn for name, fn in table.items() if ok(fn)}
            for call, (table, _) in FAMILIES.items()}


def choose(call: str, nbytes: int, size: int, shared: bool, one_copy: bool = False,
           hosts=None) -> str:
    """The algorithm ``algorithm=None`` picks: the hierarchical one on the
    "hier" transport (``hosts``: its layout) where the call has one, else the
    flat chooser's."""
    if hosts is not None:
        name = hier.choose(call, nbytes, hosts)
        if name is not None:
            return name
    return FAMILIES[call][1](nbytes, size, shared, one_copy)
