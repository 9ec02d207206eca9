"""The small all-reduce: what a blocking all_reduce of a few bytes runs when
the Communicator takes its fast path (all_reduce there): on shared memory
``SmallAllReduce``, below; where the transport moves messages,
``SmallByMessages``, the default's choice without the general path's checks.

The general path would pick ``direct`` at these sizes, and ``direct`` is one
round here (the message fits an exchange buffer): this body runs that round,
``all_reduce.one_round``, without the general path's checks and scheduling.
Where the compiled kernels are on, the round is one C call instead (the
transport's compiled exchange, ``ep.exchange_reduce``, reducing in rank
order with the kernel that ``kernels.exchange_reducer`` hands it), which
hands back to Python's wait when a peer is late.  All
count the same bytes and give the same bits.
"""
from __future__ import annotations

import numpy as np

from . import kernels
from .all_reduce import one_round
from .ops import divide, in_rank_order


def plain_out(x: np.ndarray, out, shape=None) -> bool:
    """``out`` is a numpy array that all_reduce takes for ``x`` as it is: the
    same shape and dtype, contiguous, writable, and ``x`` itself or apart
    from it (anything else goes through the full checks).  With ``shape``
    (all_gather's, reduce_scatter's result): of that shape, apart from ``x``."""
    if type(out) is not np.ndarray or out.shape != (x.shape if shape is None else shape) \
            or out.dtype != x.dtype:
        return False
    f = out.flags
    # two arrays that own their memory are apart (np.may_share_memory costs more)
    return f.c_contiguous and f.writeable and (
        (out is x and shape is None) or (out is not x and out.base is None and x.base is None)
        or not np.may_share_memory(x, out))


class Quick:
    """The body of a small call that takes the current choice (``run``,
    adapt.py's ``Chooser.quick``) on ``args`` (its arrays contiguous: the
    algorithm sees them flat), then returns ``result``; ``avg``: the
    average's division of the last array but the op."""

    __slots__ = ("run", "args", "result", "avg")

    def __init__(self, run, args: tuple, result, avg: bool = False):
        self.run, self.args, self.result, self.avg = run, args, result, avg

    def __call__(self, ep):
        self.run(ep, *[a.reshape(-1) if type(a) is np.ndarray else a for a in self.args])
        if self.avg:
            divide(self.args[-2], ep.size)
        return self.result


class Lane:
    """A small all_gather or reduce_scatter of one (op, dtype, shape) that
    the general path has accepted, where messages move: what the
    Communicator's shortest way for it needs (``Communicator._small_call``).
    ``key``: its call key; ``ieee``: a float dtype; ``avg``: the average's
    division after; ``uf``, ``red``: the op and its kernel (None for
    all_gather); ``oshape``: the result's shape; ``unit``: elements a block;
    ``dtype``: x's; ``ways``: an algorithm -> its plan and scratch buffer
    (None: the plan fills the result itself), or False where it is not a
    plan; ``caps``: an algorithm -> its compiled steps, or None
    (``Communicator._capsule``); ``c``: those of ``run``, the algorithm
    most calls run (``Communicator._compile``); ``ids``: ``id(run)`` ->
    (compiled steps, run) of each algorithm that has them; ``cells``: the
    size class's words that they read (adapt.py, ``_Class``)."""

    __slots__ = ("call", "nbytes", "key", "ieee", "avg", "uf", "red", "oshape", "unit", "dtype",
                 "ways", "caps", "c", "run", "ids", "cells")

    def __init__(self, call, nbytes, key, ieee, avg, uf, red, oshape, unit, dtype):
        self.call, self.nbytes, self.key, self.ieee, self.avg = call, nbytes, key, ieee, avg
        self.uf, self.red, self.oshape, self.unit, self.dtype = uf, red, oshape, unit, dtype
        self.ways: dict = {}
        self.caps: dict = {}
        self.ids: dict = {}
        self.c = self.run = self.cells = None


class SmallByMessages:
    """The body of a small all-reduce where the transport moves messages
    (mpi, hier): the default's algorithm, chosen and adapted as on the
    general path (adapt.py's ``Chooser.run``: ``choose``; ``agree``, its
    all-reduce), without that path's checks and scheduling; ``run``: the
    algorithm that ``Chooser.quick`` chose and counted for this call;
    ``compiled``: Chooser.run's, how the calls around run an algorithm."""

    __slots__ = ("x", "out", "uf", "avg", "choose", "agree", "run", "compiled")

    def __init__(self, x: np.ndarray, out: np.ndarray, uf, avg: bool, choose, agree, run=None,
                 compiled=None):
        self.x, self.out, self.uf, self.avg = x, out, uf, avg
        self.choose, self.agree, self.run, self.compiled = choose, agree, run, compiled

    def __call__(self, ep) -> np.ndarray:
        x, out = self.x, self.out
        of = out if out.ndim == 1 else out.reshape(-1)
        xf = of if x is out else (x if x.ndim == 1 else x.reshape(-1))
        if self.run is not None:
            self.run(ep, xf, of, self.uf)
        else:
            self.choose.run("all_reduce", of.nbytes, "plain", x is out, ep, (xf, of, self.uf),
                            self.agree, self.compiled)
        if self.avg:
            divide(of, ep.size)
        return out


class SmallAllReduce:
    """The body of a small all-reduce of ``x`` into ``out`` with ufunc ``uf``;
    ``avg``: divide by the number of ranks at the end."""

    __slots__ = ("x", "out", "uf", "avg")

    def __init__(self, x: np.ndarray, out: np.ndarray, uf, avg: bool):
        self.x, self.out, self.uf, self.avg = x, out, uf, avg

    def __call__(self, ep) -> np.ndarray:
        out = self.out
        of = out if out.ndim == 1 else out.reshape(-1)
        fused = kernels.fused(self.uf.name, of.dtype)
        if fused is None:
            one_round(ep, self.x, of, self.uf)
        else:  # the same round in C; Python's wait and reduction where a peer is late
            views = ep.exchange_reduce(self.x, of, fused)
            if views is not None:
                in_rank_order(views, self.uf, of)
        if self.avg:
            divide(of, ep.size)
        return out
