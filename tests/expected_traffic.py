"""Bytes on the wire per rank for each algorithm: the figures of docs/algorithms.md.

``S`` is the message size in bytes as the docs define it per call (the whole
vector for all_reduce, broadcast, reduce, reduce_scatter and all_to_all; one
rank's block for all_gather, gather and scatter).  Block splits are even here
(the tests pick counts divisible by N and its powers of two); the ring
all-reduce is also checked at uneven counts by ``ring_all_reduce_uneven``.
"""
from __future__ import annotations

from fractions import Fraction as F

from collectives import selection


def _p2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _lowbit_subtree(v: int, n: int) -> int:
    return n if v == 0 else min(v & -v, n - v)


def _binomial_children(v: int, n: int) -> int:
    limit = n if v == 0 else (v & -v)
    return sum(1 for k in range(n.bit_length()) if (1 << k) < limit and v + (1 << k) < n)


def _fold_role(r: int, n: int) -> str:
    rem = n - _p2(n)
    if r < 2 * rem:
        return "extra" if r % 2 == 0 else "helper"
    return "plain"


def _two_shot_p2p(n: int, S: int, item: int) -> int:
    """Bytes a rank sends (and receives) in two_shot where exchange() is messages:
    each of its two rounds sends the whole N-piece buffer to every peer."""
    align = max(1, 64 // item)
    c = -(-(S // item) // n)
    c = -(-c // align) * align
    return 2 * (n - 1) * n * c * item


def expected(call: str, alg: str, r: int, n: int, S: int, root: int = 0,
             shared: bool = True, item: int = 4):
    """(sent, received) bytes of rank ``r``, or None where only the total is fixed.
    ``shared``: exchange() goes through shared memory, where a peer reads only
    the part of a rank's buffer it needs (else every byte is a message)."""
    v = (r - root) % n
    if n == 1:
        return 0, 0
    if call == "reduce_scatter" and alg == "recursive_doubling":  # all_reduce's, of all of x
        call = "all_reduce"
    if alg == "one_copy_or_staged":  # on arrays not communicator-allocated: the staged
        # choice (all_to_all's one copy where no rank's output overlaps its input: the same bytes)
        alg = selection.choose(call, S, n, True)
    if alg == "one_copy":  # a reader counts what it reads, an owner what is read of it
        alg, shared = {"all_reduce": "ring", "reduce": "reduce_scatter_gather",
                       "gather": "linear", "scatter": "linear"}.get(call, "direct"), True
    p2, role = _p2(n), _fold_role(r, n)
    fold = {"extra": (S, S), "helper": (S, S), "plain": (0, 0)}[role]
    if call == "barrier":
        return 0, 0
    if alg == "two_shot":
        x = F(2 * (n - 1), n) * S if shared else _two_shot_p2p(n, S, item)
        return x, x
    if alg == "direct":
        if call == "broadcast":
            return ((n - 1) * S, 0) if v == 0 else (0, S)
        if call == "reduce":  # root the exchange's sink: only it reads
            return (0, (n - 1) * S) if v == 0 else (S, 0)
        if call in ("reduce_scatter", "all_to_all"):  # the N-1 blocks for the others
            x = F(n - 1, n) * S if shared else F((n - 1) ** 2, n) * S
            return x, x
        return (n - 1) * S, (n - 1) * S
    if call == "all_reduce":
        if alg == "ring":
            x = F(2 * (n - 1), n) * S
            return x, x
        if role == "extra":
            return S, S
        core = (p2.bit_length() - 1) * S if alg == "recursive_doubling" else F(2 * (p2 - 1), p2) * S
        return core + fold[0], core + fold[1]
    if call == "broadcast":
        if alg == "binomial":
            return _binomial_children(v, n) * S, (S if v else 0)
        if alg == "chain":
            return (S if v < n - 1 else 0), (S if v else 0)
        part = F(n - 1, n) * S  # scatter_allgather
        return (2 * part, part) if v == 0 else (part, S)
    if call == "reduce":
        if alg == "binomial":
            return (S if v else 0), _binomial_children(v, n) * S
        part = F(n - 1, n) * S  # reduce_scatter_gather
        return (part, 2 * part) if v == 0 else (S, part)
    if call == "all_gather":
        if alg == "recursive_doubling" and p2 != n:
            return None
        return (n - 1) * S, (n - 1) * S
    if call in ("reduce_scatter", "all_to_all"):
        if alg == "recursive_halving" and p2 != n:
            return None
        x = F(n - 1, n) * S
        return x, x
    if call == "gather":
        if alg == "linear":
            return (0, (n - 1) * S) if v == 0 else (S, 0)
        sub = _lowbit_subtree(v, n)
        return (0 if v == 0 else sub * S), (sub - 1) * S
    if call == "scatter":
        if alg == "linear":
            return ((n - 1) * S, 0) if v == 0 else (0, S)
        sub = _lowbit_subtree(v, n)
        return (sub - 1) * S, (0 if v == 0 else sub * S)
    raise KeyError(call)


def expected_total(call: str, alg: str, n: int, S: int, shared: bool = True) -> F:
    """Bytes sent by all ranks together (equal to the bytes received)."""
    if call == "reduce_scatter" and alg == "recursive_halving":
        p2 = _p2(n)
        rem = n - p2
        return (p2 - 1) * S + rem * S + rem * F(S, n)
    if call == "all_gather" and alg == "recursive_doubling":
        # the p2 groups' rounds, each group all blocks but its own; an extra
        # rank's block to its helper and the whole output back
        p2 = _p2(n)
        rem = n - p2
        return (p2 - 1) * n * S + rem * S + rem * n * S
    return sum(F(expected(call, alg, r, n, S, shared=shared)[0]) for r in range(n))


def ring_all_reduce_uneven(r: int, n: int, count: int, itemsize: int) -> int:
    """Exact bytes one rank sends in the ring all-reduce when N does not divide count.

    The reduce-scatter pass sends every block but (r+1) mod N, the all-gather
    pass every block but (r+2) mod N.
    """
    q, m = divmod(count, n)
    size = [(q + (i < m)) * itemsize for i in range(n)]
    return 2 * count * itemsize - size[(r + 1) % n] - size[(r + 2) % n]
