"""The collective calls: each one's family of algorithms (collectives/algorithm.py).

The one list of the calls: the Communicator looks algorithms up here, and
debug mode numbers calls and algorithms by their place in it.  A family's
table holds its flat algorithms, then its hierarchical ones
(collectives/hierarchical.py), which a communicator offers only on the "hier"
transport.
"""
from __future__ import annotations

from . import (all_gather, all_reduce, all_to_all, barrier, broadcast, gather, hierarchical,
               prefix, reduce, reduce_scatter, variable)
from .algorithm import Algorithm, Family


def _with_hier(family: Family) -> Family:
    return family.extended(hierarchical.ALGORITHMS.get(family.call, ()))


FAMILIES: dict[str, Family] = {f.call: f for f in (
    _with_hier(all_reduce.FAMILY),
    _with_hier(broadcast.FAMILY),
    _with_hier(reduce.FAMILY),
    _with_hier(all_gather.FAMILY),
    _with_hier(reduce_scatter.FAMILY),
    _with_hier(all_to_all.FAMILY),
    gather.GATHER,
    gather.SCATTER,
    _with_hier(barrier.FAMILY),
)}

CALLS: tuple[str, ...] = tuple(FAMILIES)

# the calls whose default is the table's alone (no tuning, no adaptation):
# the variable-count ones (collectives/variable.py; at equal counts they run
# their fixed-count twin, whose choice adapts) and the prefix reductions
MORE: dict[str, Family] = {**variable.FAMILIES, **prefix.FAMILIES}


def offered(caps, hosts=None) -> dict[str, dict[str, Algorithm]]:
    """Each call's algorithms that a communicator whose transport declares
    ``caps`` (transports.base.Capabilities) offers, by name in table order
    (``hosts``: the "hier" transport's layout); ``MORE``'s after the others."""
    return {call: {a.name: a for a in f.algorithms if a.offered(caps, hosts)}
            for call, f in (*FAMILIES.items(), *MORE.items())}
