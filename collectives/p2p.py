"""Point-to-point calls: the user's messages on the transport's ``p2p``
endpoint, and their handles.

They bypass the executor: each call posts in the caller's thread, and its
handle makes progress in ``wait`` and ``done``.  A CollectiveError leaves
this endpoint unusable; collectives go on, on their own endpoint.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from transports import Endpoint
from transports.base import broken_error
from transports.errors import CollectiveError

from . import validate as v
from .arrays import adopt
from .work import Work, not_complete


class PointToPoint:
    """One communicator's send and receive side: checks, posts, handles."""

    def __init__(self, ep: Endpoint, rank: int, size: int, device: int | None):
        self._ep, self._rank, self._size, self._device = ep, rank, size, device
        self._broken: BaseException | None = None

    def guard(self, call: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, a step of ``call``; its CollectiveError breaks the endpoint."""
        if self._broken is not None:
            raise broken_error(self._broken, call)
        try:
            return fn()
        except CollectiveError as e:
            e.call = e.call or call
            self._broken = e
            raise

    def send(self, call: str, x: np.ndarray, dst, tag) -> "P2PWork":
        x = adopt(x)
        v.array(call, "x", x, device=self._device)
        dst = v.peer(call, "dst", dst, self._size, self._rank)
        tag = v.tag(call, tag)
        return P2PWork(self, self.guard(call, lambda: self._ep.isend(x, dst, tag)), None, call)

    def recv(self, call: str, out: np.ndarray, src, tag) -> "P2PWork":
        out = adopt(out)
        v.array(call, "out", out, writable=True, device=self._device)
        src = v.peer(call, "src", src, self._size, self._rank)
        tag = v.tag(call, tag)
        return P2PWork(self, self.guard(call, lambda: self._ep.irecv(out, src, tag)), out, call)


class P2PWork(Work):
    """Handle of isend/irecv: ``wait()`` returns None (isend) or ``out`` (irecv)."""

    def __init__(self, p2p: PointToPoint, req, result, name: str):
        super().__init__(None, name)
        self._p2p, self._req, self._result = p2p, req, result

    def done(self) -> bool:
        return self._p2p.guard(self.name, self._req.done)

    def wait(self, timeout: float | None = None):
        """As ``Work.wait``: with ``timeout``, TimeoutError if the message has not
        completed within that many seconds; the handle can be waited on again."""
        if timeout is None:
            self._p2p.guard(self.name, self._req.wait)
        elif not _poll(self.done, timeout):
            raise not_complete(self.name, timeout)
        return self._result


def _poll(done: Callable[[], bool], timeout: float) -> bool:
    """Whether ``done()`` (which makes progress) turns true within ``timeout``
    seconds, sleeping between polls: the transports' own waits take no
    time limit but the communicator's timeout."""
    end = time.monotonic() + timeout
    nap = 2e-5
    while not done():
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(nap, left))
        nap = min(2 * nap, 1e-3)
    return True
