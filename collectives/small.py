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


# (reducer, dtype) -> the kernel for the compiled round (kernels.exchange_reducer) or None
_FUSED: dict = {}


def fused_round(uf, dtype: np.dtype):
    """The compiled round for reducer ``uf`` and ``dtype``: the exchange and
    the reduction in one C call; None on the numpy path (the kernels off or
    not built) or where it has no kernel (complex prod)."""
    if not kernels.compiled():
        return None
    try:
        return _FUSED[uf, dtype]
    except KeyError:
        f = _FUSED[uf, dtype] = kernels.exchange_reducer(dtype, uf.name)
        return f


def plain_out(x: np.ndarray, out) -> bool:
    """``out`` is a numpy array that all_reduce takes for ``x`` as it is: the
    same shape and dtype, contiguous, writable, and ``x`` itself or apart
    from it (anything else goes through the full checks)."""
    if type(out) is not np.ndarray or out.shape != x.shape or out.dtype != x.dtype:
        return False
    f = out.flags
    return f.c_contiguous and f.writeable and (out is x or not np.may_share_memory(x, out))


class SmallByMessages:
    """The body of a small all-reduce where the transport moves messages
    (mpi, hier): the default's algorithm, chosen and adapted as on the
    general path (adapt.py's ``Chooser.run``: ``choose``; ``agree``, its
    all-reduce), without that path's checks and scheduling."""

    __slots__ = ("x", "out", "uf", "avg", "choose", "agree")

    def __init__(self, x: np.ndarray, out: np.ndarray, uf, avg: bool, choose, agree):
        self.x, self.out, self.uf, self.avg = x, out, uf, avg
        self.choose, self.agree = choose, agree

    def __call__(self, ep) -> np.ndarray:
        x, out = self.x, self.out
        of = out if out.ndim == 1 else out.reshape(-1)
        xf = of if x is out else (x if x.ndim == 1 else x.reshape(-1))
        self.choose.run("all_reduce", of.nbytes, "plain", x is out, ep, (xf, of, self.uf),
                        self.agree)
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
        fused = fused_round(self.uf, of.dtype)
        if fused is None:
            one_round(ep, self.x, of, self.uf)
        else:  # the same round in C; Python's wait and reduction where a peer is late
            views = ep.exchange_reduce(self.x, of, fused)
            if views is not None:
                in_rank_order(views, self.uf, of)
        if self.avg:
            divide(of, ep.size)
        return out
