"""Barrier algorithms; no payload bytes.

  dissemination  (Hensgen, Finkel & Manber 1988): ceil(log2 N) rounds of empty
                 messages to rank + 2^k
  direct         one round in which every rank signals every other
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint, schedule

from . import plans
from .algorithm import Algorithm, Family

_EMPTY = np.empty(0, np.uint8)


_PLANS: dict = {}  # (rank, size) -> dissemination's rounds as steps (plans.py)


def dissemination(ep: Endpoint) -> None:
    """ceil(log2 N) rounds of empty messages to rank + 2^k, from rank - 2^k:
    in one compiled call where the transport has one (plans.py)."""
    n, r = ep.size, ep.rank
    plan = _PLANS.get((r, n))
    if plan is None:
        steps, k = [], 1
        while k < n:
            steps.append((schedule.SWAP, (r + k) % n, (r - k) % n, 0, 0, 0, 0))
            k <<= 1
        plan = _PLANS[r, n] = schedule.Plan(steps)
    plans.run(ep, plan, _EMPTY, np.empty(0, np.uint8), None, 0)


def direct(ep: Endpoint) -> None:
    """One round: every rank tells every other that it has arrived (ep.exchange)."""
    ep.exchange(_EMPTY)


def alone() -> None:
    """One rank: it has arrived."""


FAMILY = Family("barrier", (
    Algorithm("dissemination", dissemination),
    Algorithm("direct", direct),
), alone)
