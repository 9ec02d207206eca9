"""Barrier algorithms; no payload bytes.

  dissemination  (Hensgen, Finkel & Manber 1988): ceil(log2 N) rounds of empty
                 messages to rank + 2^k
  direct         one round in which every rank signals every other
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from .algorithm import Algorithm, Family

_EMPTY = np.empty(0, np.uint8)


def dissemination(ep: Endpoint) -> None:
    n, r = ep.size, ep.rank
    k = 1
    while k < n:
        ep.sendrecv(_EMPTY, (r + k) % n, np.empty(0, np.uint8), (r - k) % n)
        k <<= 1


def direct(ep: Endpoint) -> None:
    """One round: every rank tells every other that it has arrived (ep.exchange)."""
    ep.exchange(_EMPTY)


def alone() -> None:
    """One rank: it has arrived."""


FAMILY = Family("barrier", (
    Algorithm("dissemination", dissemination),
    Algorithm("direct", direct),
), alone)
