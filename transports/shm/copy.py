"""How a root copies its contribution into its exchange buffer (a
broadcast's, whose peers only read): with ordinary stores, or streamed
(non-temporal stores, which do not read the destination line first) while
ordinary ones run slowly.

The destination is memory its peers read a call or two before.  On the
2-core development VM a job's 1 MiB copy into it took either about 20 us or
100 to 170 us, whichever state the job was in, while a copy of the same
bytes between two private arrays took 18.6 us in both
(docs/performance.md, "Copies into the exchange buffers").  Taking the
lines back from the core that read them is what seems to cost; a streaming
store does not ask for the line.  Streamed, the peers read the bytes from
memory rather than from the shared cache, which costs in the fast state
(a 1 MiB broadcast went from 25 to about 50 us), so streaming is not
always better either.

So a copy of ``MIN_BYTES`` or more is timed when it is an ordinary one, per
size class (powers of two): where the median of the last ``KEEP`` such
copies runs below ``SLOW_BYTES_PER_S`` (``COLLECTIVES_SHM_STREAM_BELOW``,
16e9 bytes a second; 0 never streams), the class streams, and every
``RETRY``-th copy is an ordinary one again, timed: one that runs fast ends
the streaming, so that a job whose state changes back follows it.  The rule
times ordinary copies only: a streamed copy returns before its lines reach
memory, so its own time would flatter it.  Every root decides for itself:
the bytes in the buffer are the same either way.  Exchanges in which every
rank copies (all_reduce, reduce_scatter, all_to_all, ...) keep ordinary
stores: there the rule, tried, lost as often as it won (performance.md).

``stream`` is the streaming copy of transports/copy.py where its extension
is built; without it every copy is ``np.copyto``.
"""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from .. import copy as _copy

stream: Callable[[np.ndarray, np.ndarray], None] | None = \
    _copy.stream_copy if _copy.available else None

MIN_BYTES = 256 << 10          # below this a copy stays in the caches either way


def _slow_bytes_per_s() -> float:
    env = os.environ.get("COLLECTIVES_SHM_STREAM_BELOW", "").strip() or "16e9"
    try:
        v = float(env)
    except ValueError:
        raise ValueError("COLLECTIVES_SHM_STREAM_BELOW must be a number of bytes per "
                         f"second (0: never stream), got {env!r}") from None
    return max(0.0, v)


# ordinary copies slower than this stream (about memory's speed here)
SLOW_BYTES_PER_S = _slow_bytes_per_s()
KEEP = 5                       # ordinary copies' times kept per size class
RETRY = 64                     # while streaming, an ordinary copy once every this many
EARLY_RETRIES = (2 * KEEP, 4 * KEEP)  # and these (a job's first copies may all run slowly)


class _SizeClass:
    __slots__ = ("n", "times", "slow")

    def __init__(self) -> None:
        self.n = 0
        self.times: list[float] = []  # seconds per byte of the last ordinary copies
        self.slow = False

    def record(self, per_byte: float) -> None:
        fast = per_byte * SLOW_BYTES_PER_S <= 1.0
        if self.slow and fast:  # a retry found ordinary copies fast again
            self.times.clear()
        t = self.times
        t.append(per_byte)
        if len(t) > KEEP:
            del t[0]
        # the median of KEEP (the first copies into the buffers fault their
        # pages in); sorted(): np.median costs about 10 us a call
        self.slow = len(t) == KEEP and sorted(t)[KEEP // 2] * SLOW_BYTES_PER_S > 1.0


class Copier:
    """The copies of one exchange endpoint into its exchange buffer."""

    def __init__(self) -> None:
        self.classes: dict[int, _SizeClass] = {}
        self.clock = time.perf_counter

    def copy(self, pairs: list[tuple[np.ndarray, np.ndarray]], nbytes: int) -> None:
        """Copy each (destination, source) pair, ``nbytes`` in all, one way."""
        c = None
        if stream is not None and SLOW_BYTES_PER_S and nbytes >= MIN_BYTES:
            c = self.classes.get(nbytes.bit_length())
            if c is None:
                c = self.classes[nbytes.bit_length()] = _SizeClass()
            c.n += 1
            if c.slow and c.n % RETRY and c.n not in EARLY_RETRIES:
                for dst, src in pairs:
                    stream(dst, src)
                return
        t0 = self.clock()
        for dst, src in pairs:
            np.copyto(dst, src)
        if c is not None:
            c.record((self.clock() - t0) / nbytes)
