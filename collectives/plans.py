"""Schedules of send-receives written as data (``transports.schedule.Plan``):
what the transports' compiled steps run in one call (``Endpoint.steps``:
mpi and hier), and ``run``, the same schedule step by step on any
endpoint's messages where no compiled call takes it."""
from __future__ import annotations

import numpy as np

from transports import Endpoint, schedule

from . import kernels


def compiled(ep: Endpoint, plan: schedule.Plan, src: np.ndarray, buf: np.ndarray, op,
             unit: int = 0, dst: np.ndarray | None = None) -> bool:
    """``plan`` in one compiled call where ``ep`` has one (``Endpoint.steps``),
    its reductions by the kernel of ``op`` (a ``Reducer``; None for a plan
    without reductions), its out steps into ``dst``; False where it has
    not: nothing has moved."""
    name = getattr(op, "name", None)
    red = None if name is None else kernels.fused(name, buf.dtype)
    return ep.steps(plan, src, buf, red, op, unit, dst)


def run(ep: Endpoint, plan: schedule.Plan, src: np.ndarray, buf: np.ndarray, op, unit: int,
        dst: np.ndarray | None = None) -> None:
    """``plan`` on ``buf`` (flat), its copy steps from ``src``, its out
    steps into ``dst`` (flat), offsets and lengths in units of ``unit``
    elements (0: the whole buffer); in one compiled call where the endpoint
    has one, else here.  A reducing step reduces after both its messages are
    done, as the compiled one does, so that a send from the part it reduces
    into has left first."""
    if compiled(ep, plan, src, buf, op, unit, dst):
        return
    e = unit or buf.size
    tmp = None
    for kind, to, fro, so, sl, ro, rl in plan.steps:
        at = buf[ro * e:(ro + rl) * e]
        sent = buf[so * e:(so + sl) * e]
        if kind == schedule.OUT:
            np.copyto(dst[so * e:(so + rl) * e], at)
        elif kind == schedule.COPY:
            if not (at.size and np.shares_memory(at, src[:rl * e])):
                np.copyto(at, src[:rl * e])
        elif kind == schedule.SWAP:
            ep.sendrecv(sent, to, at, fro)
        elif kind == schedule.SEND:
            ep.send(sent, to)
        elif kind == schedule.RECV:
            ep.recv(at, fro)
        else:  # a receive, then its reduction into ``at``
            if tmp is None:
                tmp = np.empty_like(buf)
            got = tmp[:rl * e]
            if kind == schedule.SWAP_REDUCE:
                ep.sendrecv(sent, to, got, fro)
            else:
                ep.recv(got, fro)
            op(at, got, out=at)

