"""Barrier: dissemination (Hensgen, Finkel & Manber 1988), ceil(log2 N) rounds
of empty messages to rank + 2^k; no payload bytes."""
from __future__ import annotations

import numpy as np

from transports import Endpoint

_EMPTY = np.empty(0, np.uint8)


def dissemination(ep: Endpoint) -> None:
    n, r = ep.size, ep.rank
    k = 1
    while k < n:
        ep.sendrecv(_EMPTY, (r + k) % n, np.empty(0, np.uint8), (r - k) % n)
        k <<= 1


ALGORITHMS = {"dissemination": dissemination}
