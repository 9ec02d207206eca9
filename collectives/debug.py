"""Mismatch detection (``COLLECTIVES_DEBUG=1`` or ``cc.init(debug=True)``).

Before every collective, the ranks exchange a signature of what they are
about to do (call, sequence number, count, dtype, op, root, algorithm: eight
int64, one ``exchange`` of 64 bytes) and compare.  A difference raises
``CollectiveMismatch`` on every rank, naming the ranks that differ from the
majority and the fields that differ, before any payload moves, as
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does for torch.distributed.  Since nothing
has moved, the communicator stays usable: the next matching call works.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from transports.errors import CollectiveError

from .callkey import CALLS
from .families import FAMILIES, MORE
from . import dtypes
from .ops import Op

FIELDS = ("call", "sequence", "count", "dtype", "op", "root", "algorithm")
_OPS = list(Op)


class CollectiveMismatch(CollectiveError):
    """Ranks called different collectives, or the same one with different
    count, dtype, op, root or algorithm (debug mode only)."""

    def __init__(self, message: str, *, call=None, ranks=(), fields=()):
        super().__init__(message, call=call, ranks=ranks)
        self.fields = list(fields)


def signature(call: str, seq: int, count: int, dtype, op, root, algorithm: str | None
              ) -> np.ndarray:
    """What this rank is about to run; calls and algorithms are numbered by
    their place in collectives/families.py, the same on every rank."""
    return np.array([CALLS.index(call), seq, count,
                     -1 if dtype is None else dtypes.index(np.dtype(dtype)),
                     -1 if op is None else _OPS.index(op),
                     -1 if root is None else root,
                     -1 if algorithm is None else _names(call).index(algorithm), 0],
                    np.int64)


def _names(call: str) -> list[str]:
    f = FAMILIES.get(call) or MORE.get(call)
    return f.names() if f is not None else []


def describe(sig) -> str:
    call = CALLS[int(sig[0])]
    parts = [f"{call} #{int(sig[1])}", f"count={int(sig[2])}"]
    if sig[3] >= 0:
        parts.append(f"dtype={dtypes.at(int(sig[3]))}")
    if sig[4] >= 0:
        parts.append(f"op={_OPS[int(sig[4])].value}")
    if sig[5] >= 0:
        parts.append(f"root={int(sig[5])}")
    names = _names(call)
    if 0 <= sig[6] < len(names):
        parts.append(f"algorithm={names[int(sig[6])]}")
    elif sig[6] == -1:
        parts.append("algorithm=default")
    return " ".join(parts)


def check(sigs: list[np.ndarray]) -> None:
    """Raise CollectiveMismatch unless every rank's signature is the same.
    Every rank sees the same signatures, so every rank raises; and since no
    payload has moved, the communicator stays usable."""
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
                     f"{describe(np.array(k))}" for k, rs in groups.items())
    raise CollectiveMismatch(
        f"mismatched collectives: {', '.join(fields)} differ{'s' if len(fields) == 1 else ''} "
        f"between ranks ({said}); rank(s) {odd} differ from the others",
        call=CALLS[common[0]], ranks=odd, fields=fields)


def _ranks(rs: list[int]) -> str:
    return ",".join(map(str, rs))
