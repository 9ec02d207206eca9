"""Algorithms as records, and a collective's family of them.

Every algorithm of one collective is called the same way (``Family.run``);
what sets them apart is data, never an attribute stuck onto a function:

=============== =======================================================
family          ``run(ep, ...)``
=============== =======================================================
all_reduce      ``(ep, src, out, op)``: ``src`` may be ``out`` (in place)
broadcast       ``(ep, buf, root)``
reduce          ``(ep, x, out, op, root)``: ``out`` None off root; in place
                on root, ``x`` is ``out``
all_gather      ``(ep, x, out)``: ``x`` may be a view of ``out[rank]``
reduce_scatter  ``(ep, x, out, op)``: ``out`` may be a view of ``x[rank]``
all_to_all      ``(ep, x, out)``: ``x`` is ``out`` in place
gather          ``(ep, x, out, root)``: ``out`` None off root
scatter         ``(ep, x, out, root)``: ``x`` None off root
barrier         ``(ep)``
=============== =======================================================

Arrays are flat (1-D) views.  A family runs its ``alone`` on a communicator
of one rank: the algorithms themselves never test for it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from . import selection


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm of a collective: its name (what ``algorithm=`` takes),
    the function that runs it, and what it needs of the transport
    (``transports.base.Capabilities``) and of the hosts' layout."""

    name: str
    run: Callable
    # exchange() through shared memory: written for stages that a peer reads
    # only part of (as messages every round would ship whole stages)
    needs_shared_exchange: bool = False
    # peers read and write each other's arrays where they lie (expose())
    needs_one_copy: bool = False
    # the "hier" transport's parts (local, cross, flat)
    needs_hier: bool = False
    # and every host holding as many ranks
    needs_equal_hosts: bool = False

    @property
    def summary(self) -> str:
        """The first line of the function's docstring."""
        return (self.run.__doc__ or "").strip().split("\n")[0]

    def offered(self, caps, hosts=None) -> bool:
        """Whether a communicator whose transport declares ``caps`` offers it
        (``hosts``: the layout, where ``caps.hier``)."""
        if self.needs_shared_exchange and not caps.shared_exchange:
            return False
        if self.needs_one_copy and not caps.one_copy:
            return False
        if self.needs_hier:
            return caps.hier and hosts is not None and (hosts.equal or not self.needs_equal_hosts)
        return True

    def needs(self) -> str:
        """What it needs, in words (for the error that refuses it)."""
        if self.needs_hier:
            return "the 'hier' transport" + (
                ", where every host holds as many ranks" if self.needs_equal_hosts else "")
        if self.needs_one_copy:
            return ("shared memory where the ranks may read each other's memory "
                    "(process_vm_readv; COLLECTIVES_ONE_COPY not 0)")
        if self.needs_shared_exchange:
            return "an exchange through shared memory (transport 'shm')"
        return "nothing more"


@dataclasses.dataclass(frozen=True)
class Family:
    """A collective's algorithms in table order, and the one it runs alone (on
    a communicator of one rank).  Which one a call runs by default is
    collectives/selection.py's."""

    call: str
    algorithms: tuple[Algorithm, ...]
    alone: Callable
    _by_name: dict = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {a.name: a for a in self.algorithms})

    def __getitem__(self, name: str) -> Algorithm:
        return self._by_name[name]

    def names(self) -> list[str]:
        return [a.name for a in self.algorithms]

    def run(self, name: str, ep, *args) -> None:
        """Algorithm ``name`` on endpoint ``ep`` (``alone`` where ``ep`` has one rank)."""
        if ep.size == 1:
            self.alone(*args)
        else:
            self[name].run(ep, *args)

    def run_chosen(self, nbytes: int, ep, *args, shared: bool = False) -> None:
        """The algorithm the selection table picks for ``nbytes`` on ``ep``
        (staged where ``shared``, else for messages; never a one-copy one):
        what a hierarchical or one_copy_or_staged algorithm runs on a part."""
        self.run(selection.choose(self.call, nbytes, ep.size, shared), ep, *args)

    def extended(self, more: tuple[Algorithm, ...]) -> "Family":
        """This family with ``more`` algorithms after its own."""
        return dataclasses.replace(self, algorithms=self.algorithms + tuple(more))
