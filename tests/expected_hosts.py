"""Inter-host bytes per rank of the hierarchical algorithms: the figures of
docs/algorithms.md ("Many hosts"), for a layout given as each rank's host.

``S`` is the message size as tests/expected_traffic.py defines it per call
(the whole vector; one rank's block for all_gather).  Counts are divisible by
every L*H of the layouts tested, so every split is even.
"""
from __future__ import annotations

from fractions import Fraction as F

from expected_traffic import expected

from collectives import selection


def _shape(host_of: list[int], r: int):
    h = host_of[r]
    members = [p for p in range(len(host_of)) if host_of[p] == h]
    H = max(host_of) + 1
    sizes = [host_of.count(x) for x in range(H)]
    return H, h, members.index(r), len(members), len(set(sizes)) == 1


def expected_inter(call: str, alg: str, host_of: list[int], r: int, S: int,
                   root: int = 0) -> tuple:
    """(inter-host bytes sent, received) of rank ``r`` in ``call`` by ``alg``."""
    n = len(host_of)
    H, h, l, L, equal = _shape(host_of, r)
    lead = l == 0
    if H == 1 or call == "barrier":
        return 0, 0
    if call == "all_reduce" and alg in ("hier_slices", "hier_pipelined"):
        x = F(2 * (H - 1), H) * F(S, L)
        return x, x
    if call == "all_reduce" and alg == "hier_mirror":  # every rank as a leader
        inner = selection.choose(call, S, H, False)
        return expected(call, inner, h, H, S, shared=False)
    leaders = ("all_reduce", "broadcast", "reduce")
    if call in leaders:  # the flat chooser's algorithm among the H leaders
        if not lead:
            return 0, 0
        inner = selection.choose(call, S, H, False)
        return expected(call, inner, h, H, S, root=host_of[root], shared=False)
    B = S if call == "all_gather" else F(S, n)
    if call == "all_to_all":
        return (n - L) * B, (n - L) * B
    if equal:  # all_gather, reduce_scatter: the ring among each local rank's H ranks
        return (H - 1) * B, (H - 1) * B
    if not lead:
        return 0, 0
    if call == "all_gather":
        return (H - 1) * L * B, (n - L) * B
    return (n - L) * B, (H - 1) * L * B  # reduce_scatter
