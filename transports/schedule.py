"""Schedules of send-receives written as data: what the mpi transport's
compiled steps run in one call (``MpiEndpoint.steps``, transports/_native.c
``mpi_steps``) and collectives/plans.py runs step by step elsewhere.
Nothing here touches MPI, so that importing the collectives does not start
it."""
from __future__ import annotations

import numpy as np

# the kinds of step (transports/_native.c has the same numbers): send-receive then
# reduce; send; receive then reduce; receive (into the buffer itself);
# send-receive (into the buffer itself); copy of the source into the buffer;
# copy of a part of the buffer into the destination, at the send offset
SWAP_REDUCE, SEND, RECV_REDUCE, RECV, SWAP, COPY, OUT = 0, 1, 2, 3, 4, 5, 6
SENDS = (SWAP_REDUCE, SEND, SWAP)
RECEIVES = (SWAP_REDUCE, RECV_REDUCE, RECV, SWAP)
REDUCES = (SWAP_REDUCE, RECV_REDUCE)


class Plan:
    """A schedule for ``mpi_steps``: its steps (kind, the rank sent to, the
    rank received from, send offset, send length, receive offset, receive
    length; offsets and lengths in units of the call's choosing, whole
    blocks), the same packed as the C call reads them, and whether a step
    reduces."""

    __slots__ = ("steps", "packed", "reduces")

    def __init__(self, steps):
        self.steps = tuple(tuple(int(w) for w in s) for s in steps)
        assert all(len(s) == 7 for s in self.steps)
        self.packed = np.array(self.steps, np.int32).reshape(-1).tobytes()
        self.reduces = any(s[0] in REDUCES for s in self.steps)
