"""Which host each rank of a communicator runs on.

A host is what ``socket.gethostname()`` names, unless ``COLLECTIVES_HOST`` is
set: then its value names the host, so that one machine can stand in for a
cluster (an MPMD launch gives each group of ranks its own value).  Hosts are
numbered 0..H-1 in the order of their lowest rank.

Two notions are kept apart: the *host* (possibly emulated), which decides
who may share memory and which bytes count as inter-host traffic, and the
*machine* (the real host name), on which a process id means something, so
that the liveness of a peer can be checked wherever it is on this machine.
"""
from __future__ import annotations

import dataclasses
import os
import socket

from . import _wire

HOST_ENV = "COLLECTIVES_HOST"


def host_name() -> str:
    """This process's host: $COLLECTIVES_HOST where set (and not empty), else the machine's."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


@dataclasses.dataclass(frozen=True)
class Hosts:
    """The hosts of one communicator's ranks, seen from rank ``rank``."""

    rank: int
    host_of: tuple[int, ...]   # each rank's host index
    pids: tuple[int, ...]      # each rank's process id
    local: tuple[bool, ...]    # whether each rank runs on this machine (pids checkable)
    names: tuple[str, ...] = ()  # each host's name, by host index (where known)
    clocks: tuple[str, ...] = ()  # each rank's monotonic clock (``clock_id``), where known

    @property
    def size(self) -> int:
        return len(self.host_of)

    @property
    def hosts(self) -> int:
        return max(self.host_of) + 1 if self.host_of else 1

    @property
    def host(self) -> int:
        return self.host_of[self.rank]

    def members(self, h: int) -> list[int]:
        """The ranks of host ``h``, ascending."""
        return [r for r, x in enumerate(self.host_of) if x == h]

    @property
    def local_rank(self) -> int:
        return self.members(self.host).index(self.rank)

    @property
    def local_size(self) -> int:
        return self.host_of.count(self.host)

    @property
    def remote(self) -> list[bool]:
        """Whether each rank is on another host than this one."""
        return [h != self.host for h in self.host_of]

    @property
    def one_host(self) -> bool:
        return self.hosts == 1

    @property
    def one_clock(self) -> bool:
        """Whether every rank reads the same monotonic clock: one kernel
        (hosts emulated in namespaces of one machine share it), else one
        machine."""
        return len(set(self.clocks)) == 1 if self.clocks else all(self.local)

    @property
    def equal(self) -> bool:
        """Whether every host holds the same number of ranks."""
        return len({self.host_of.count(h) for h in range(self.hosts)}) <= 1


def number(names: list[str]) -> tuple[int, ...]:
    """Host indices for ranks on hosts ``names``: numbered by lowest rank."""
    seen: dict[str, int] = {}
    return tuple(seen.setdefault(n, len(seen)) for n in names)


def single(size: int, rank: int = 0) -> Hosts:
    """The layout of ``size`` ranks all on this host (a transport's default
    before ``open_transport`` places it)."""
    return Hosts(rank, (0,) * size, (0,) * size, (True,) * size)


def clock_id() -> str:
    """This process's monotonic clock: the kernel's boot id and the time
    namespace, which processes of one kernel share unless a time namespace
    sets them apart ("" where unknown)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return boot + " " + os.readlink("/proc/self/ns/time")
    except OSError:
        return ""


def discover(mpicomm) -> Hosts:
    """Collective over ``mpicomm``: every rank's host, machine, pid and clock."""
    me = (host_name(), socket.gethostname(), os.getpid(), clock_id())
    everyone = _wire.allgather(mpicomm, me)
    names = [h for h, _, _, _ in everyone]
    clocks = tuple(c for _, _, _, c in everyone)
    return Hosts(mpicomm.Get_rank(), number(names),
                 tuple(p for _, _, p, _ in everyone),
                 tuple(m == me[1] for _, m, _, _ in everyone),
                 tuple(dict.fromkeys(names)), clocks if all(clocks) else ())
