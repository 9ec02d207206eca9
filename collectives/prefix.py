"""Prefix reductions: ``scan`` (inclusive) and ``exscan`` (exclusive).

Rank r's ``scan`` result is x_0 op x_1 op ... op x_r, its ``exscan`` result
x_0 op ... op x_{r-1}, and rank 0's ``exscan`` result the op's identity
(``identity``).  Operands stay in rank order (lower ranks on the left).

  linear              a chain: rank r receives the prefix of ranks < r
                      from r - 1, adds its own and passes it on; N - 1
                      steps one after the other, S sent and received per
                      rank; the bits of numpy's cumulative reduction
  recursive_doubling  Hillis and Steele (1986): in round k every rank sends
                      its partial prefix to rank + 2^k and adds the one
                      from rank - 2^k; ceil(log2 N) rounds, up to that many
                      S per rank; the sums bracketed otherwise (other float
                      bits)
"""
from __future__ import annotations

import numpy as np

from transports import Endpoint

from .algorithm import Algorithm, Family
from .arrays import empty
from .dtypes import is_bfloat16


def identity(op: str, dtype: np.dtype):
    """The value rank 0's exscan holds: 0 for sum, 1 for prod, the dtype's
    lowest value for max (-inf for floats) and its highest for min."""
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    floating = dtype.kind == "f" or is_bfloat16(dtype)
    if floating:
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


def _fill(out, value) -> None:
    out[...] = value


def linear(ep: Endpoint, x, out, op, exclusive: bool, ident) -> None:
    """Rank r waits for rank r - 1's prefix, then passes its own on."""
    n, r = ep.size, ep.rank
    if r == 0:
        if exclusive:
            _fill(out, ident)
            if n > 1:
                ep.send(x, 1)
        else:
            if out is not x:
                np.copyto(out, x)
            if n > 1:
                ep.send(out, 1)
        return
    if exclusive:
        ep.recv(out, r - 1)  # the prefix of ranks < r: the result
        if r + 1 < n:
            ep.send(op(out, x), r + 1)
        return
    before = empty(x.size, x)
    ep.recv(before, r - 1)
    op(before, x, out)
    if r + 1 < n:
        ep.send(out, r + 1)


def recursive_doubling(ep: Endpoint, x, out, op, exclusive: bool, ident) -> None:
    """Round k: send the partial prefix to rank + 2^k, add the one from
    rank - 2^k on the left."""
    n, r = ep.size, ep.rank
    partial = empty(x.size, x)
    np.copyto(partial, x)
    got = empty(x.size, x)
    have = False  # whether out holds the exclusive prefix so far
    k = 1
    while k < n:
        reqs = []
        if r + k < n:
            reqs.append(ep.isend(partial, r + k))  # sent before partial changes
        if r - k >= 0:
            reqs.append(ep.irecv(got, r - k))
        ep.waitall(reqs)
        if r - k >= 0:
            if exclusive:
                if have:
                    op(got, out, out)
                else:
                    np.copyto(out, got)
                    have = True
            op(got, partial, partial)
        k <<= 1
    if exclusive:
        if not have:
            _fill(out, ident)
    else:
        np.copyto(out, partial)


def alone(x, out, op, exclusive: bool, ident) -> None:
    if exclusive:
        _fill(out, ident)
    elif out is not x:
        np.copyto(out, x)


_ALGORITHMS = (Algorithm("linear", linear), Algorithm("recursive_doubling", recursive_doubling))
FAMILIES: dict[str, Family] = {
    "scan": Family("scan", _ALGORITHMS, alone),
    "exscan": Family("exscan", _ALGORITHMS, alone),
}
