"""``comm.traffic``: the payload bytes a rank has moved, as counted by its transport."""
from __future__ import annotations

import dataclasses

FIELDS = ("sent_bytes", "recv_bytes", "inter_sent_bytes", "inter_recv_bytes")


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Payload bytes this rank sent to and received from other ranks, and of
    those the bytes to and from ranks of other hosts (``inter_*``)."""

    sent_bytes: int = 0
    recv_bytes: int = 0
    inter_sent_bytes: int = 0
    inter_recv_bytes: int = 0

    @classmethod
    def of(cls, transport) -> "Traffic":
        """The counters of ``transport`` now."""
        return cls(*(getattr(transport, f) for f in FIELDS))

    def __sub__(self, other: "Traffic") -> "Traffic":
        return Traffic(*(getattr(self, f) - getattr(other, f) for f in FIELDS))

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(*(getattr(self, f) + getattr(other, f) for f in FIELDS))
