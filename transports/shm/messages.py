"""The messages of the shared-memory slot protocol (``slots``): a send,
a posted receive and an unexpected message, each with how far it has come.

A request's ``external`` tells whether its bytes move outside the segment
(slots of kind EXTERNAL, through a subclass of the endpoint); the classes
here move theirs through the slots, or by rendezvous.
"""
from __future__ import annotations

import numpy as np

from ..base import Request
from . import _cma


class Send(Request):
    """A send; ``call_bytes``: the endpoint's call size when it was posted, which
    every slot of it carries."""

    __slots__ = ("ep", "peer", "data", "tag", "call_bytes", "off", "chunks", "finished", "rndv",
                 "target")
    external = False  # the bytes move outside the segment (EXTERNAL slots)

    def __init__(self, ep, peer, data, tag):
        self.ep, self.peer, self.data, self.tag = ep, peer, data, tag
        self.call_bytes = ep.call_bytes
        self.off = 0
        self.rndv = 0 < ep.cma_bytes <= data.nbytes
        self.chunks = 1 if self.rndv else max(1, -(-data.nbytes // ep.slot_bytes))
        self.target = 0  # the acked count that completes a rendezvous send
        self.finished = False

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.finished or self.ep.test(self)


class Recv(Request):
    """A posted receive; ``acc``/``op`` set for a receive-and-reduce (``src``:
    what each chunk is reduced with, where not ``acc`` itself); ``call_bytes``:
    the call size its sender's slots must carry."""

    __slots__ = ("ep", "peer", "tag", "call_bytes", "out", "acc", "op", "src", "total", "off",
                 "finished", "source", "skip")
    external = False

    def __init__(self, ep, peer, tag, out, acc=None, op=None, skip: int = 0, src=None):
        self.ep, self.peer, self.tag, self.call_bytes = ep, peer, tag, ep.call_bytes
        self.out = out  # uint8 view of the destination
        self.acc, self.op = acc, op
        self.src = acc if src is None else src
        # a rendezvous message's first bytes that its sender places itself
        # (ShmEndpoint.irecv_tail): this receive reads the rest alone
        self.skip = skip
        self.total = skip + out.nbytes
        self.off = 0
        self.finished = False
        self.source = None  # an Unexpected message this receive was matched to

    def consume(self, chunk: np.ndarray) -> None:
        n = chunk.nbytes
        if self.op is None:
            np.copyto(self.out[self.off:self.off + n], chunk)
        else:
            isz = self.acc.itemsize
            lo, hi = self.off // isz, (self.off + n) // isz
            a = self.acc[lo:hi]
            self.op(self.src[lo:hi], chunk.view(self.acc.dtype), out=a)
        self.off += n

    def read_remote(self, pid: int, addr: int, scratch: np.ndarray) -> None:
        """Copy the whole message out of the sender's memory (rendezvous)."""
        if self.op is None:
            _cma.read(pid, addr + self.skip, self.out)
            self.off = self.total
            return
        step = scratch.nbytes  # reduce chunk by chunk through a cache-sized buffer
        while self.off < self.total:
            n = min(step, self.total - self.off)
            _cma.read(pid, addr + self.off, scratch[:n])
            self.consume(scratch[:n])

    def wait(self) -> None:
        self.ep.waitall([self])

    def done(self) -> bool:
        return self.finished or self.ep.test(self)


class Unexpected:
    """A point-to-point message that arrived before its receive was posted."""

    __slots__ = ("tag", "total", "off", "buf", "finished", "waiter")
    external = False
    call_bytes = 0  # point-to-point messages carry no call size

    def __init__(self, tag, total):
        self.tag, self.total, self.off = tag, total, 0
        self.buf = np.empty(total, np.uint8)
        self.finished = False
        self.waiter = None

    def consume(self, chunk: np.ndarray) -> None:
        np.copyto(self.buf[self.off:self.off + chunk.nbytes], chunk)
        self.off += chunk.nbytes

    def read_remote(self, pid: int, addr: int, scratch: np.ndarray) -> None:
        _cma.read(pid, addr, self.buf)
        self.off = self.total
