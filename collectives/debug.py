"""Mismatch detection (``COLLECTIVES_DEBUG=1`` or ``cc.init(debug=True)``).

Before every collective, the ranks exchange a signature of what they are
about to do (call, sequence number, count, dtype, op, root, algorithm: eight
int64, one ``exchange`` of 64 bytes) and compare.  A difference raises
``CollectiveMismatch`` on every rank, naming the ranks that differ from the
majority and the fields that differ, before any payload moves, as
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does for torch.distributed.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from transports.errors import CollectiveError

from .ops import DTYPES, Op

CALLS = ("broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter",
         "all_to_all", "all_reduce", "barrier")
FIELDS = ("call", "sequence", "count", "dtype", "op", "root", "algorithm")
_OPS = list(Op)


class CollectiveMismatch(CollectiveError):
    """Ranks called different collectives, or the same one with different
    count, dtype, op, root or algorithm (debug mode only)."""

    def __init__(self, message: str, *, call=None, ranks=(), fields=()):
        super().__init__(message, call=call, ranks=ranks)
        self.fields = list(fields)


def signature(call: str, seq: int, count: int, dtype, op, root, algorithm: str,
              names: list[str]) -> np.ndarray:
    return np.array([CALLS.index(call), seq, count,
                     -1 if dtype is None else DTYPES.index(np.dtype(dtype)),
                     -1 if op is None else _OPS.index(op),
                     -1 if root is None else root,
                     names.index(algorithm) if algorithm in names else -1, 0], np.int64)


def describe(sig, algorithms_of) -> str:
    call = CALLS[int(sig[0])]
    parts = [f"{call} #{int(sig[1])}", f"count={int(sig[2])}"]
    if sig[3] >= 0:
        parts.append(f"dtype={DTYPES[int(sig[3])]}")
    if sig[4] >= 0:
        parts.append(f"op={_OPS[int(sig[4])].value}")
    if sig[5] >= 0:
        parts.append(f"root={int(sig[5])}")
    names = algorithms_of(call)
    if 0 <= sig[6] < len(names):
        parts.append(f"algorithm={names[int(sig[6])]}")
    return " ".join(parts)


def check(sigs: list[np.ndarray], algorithms_of) -> None:
    """Raise CollectiveMismatch unless every rank's signature is the same."""
    keys = [tuple(int(v) for v in s[:7]) for s in sigs]
    if len(set(keys)) == 1:
        return
    common = Counter(keys).most_common(1)[0][0]
    odd = [r for r, k in enumerate(keys) if k != common]
    fields = [f for i, f in enumerate(FIELDS) if len({k[i] for k in keys}) > 1]
    if "call" in fields:  # algorithm numbers of different calls are not comparable
        fields = [f for f in fields if f != "algorithm"]
    groups = {}
    for r, k in enumerate(keys):
        groups.setdefault(k, []).append(r)
    said = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {_ranks(rs)}: "
                     f"{describe(np.array(k), algorithms_of)}" for k, rs in groups.items())
    raise CollectiveMismatch(
        f"mismatched collectives: {', '.join(fields)} differ{'s' if len(fields) == 1 else ''} "
        f"between ranks ({said}); rank(s) {odd} differ from the others",
        call=CALLS[common[0]], ranks=odd, fields=fields)


def _ranks(rs: list[int]) -> str:
    return ",".join(map(str, rs))
