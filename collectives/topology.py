"""What a communicator says about the hosts its ranks run on (docs/api.md, "Hosts")."""
from __future__ import annotations


class HostsInfo:
    """``hosts``, ``host``, ``local_rank`` and ``local_size`` of a communicator,
    from its transport's layout (transports/hosts.py); mixed into Communicator."""

    _t: object

    @property
    def hosts(self) -> int:
        """The number of hosts this communicator's ranks run on."""
        return self._t.hosts.hosts

    @property
    def host(self) -> int:
        """This rank's host index, 0..hosts-1 (hosts numbered by their lowest rank)."""
        return self._t.hosts.host

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks of its host (in rank order)."""
        return self._t.hosts.local_rank

    @property
    def local_size(self) -> int:
        """The number of ranks on this rank's host."""
        return self._t.hosts.local_size
