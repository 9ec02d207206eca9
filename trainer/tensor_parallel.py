"""Tensor parallelism (Shoeybi et al. 2019, "Megatron-LM"), in fp32.

The model (``lm.py``) is a small next-token predictor: a token id goes
through a vocabulary-parallel embedding, ``blocks`` residual MLP blocks (a
column-parallel then a row-parallel linear layer), and a vocabulary-parallel
output projection with a vocabulary-parallel cross-entropy.  Over T ranks
(a tensor-parallel communicator ``tp``):

- **embedding**: rank t holds rows [V_t, V_{t+1}) of the V×d table, looks up
  the ids it owns, writes zeros for the others, and an all-reduce sums the
  partial rows (forward; backward needs nothing);
- **block**: W1 (d×h) split by columns and W2 (h×d) by rows: the first
  product needs no communication, the second gives partial sums that one
  all-reduce adds (forward); backward mirrors it with one all-reduce of the
  input's gradient: one all-reduce forward, one backward;
- **head**: the d×V projection split by columns (vocabulary), so each rank
  has the logits of its slice of the vocabulary; the cross-entropy takes the
  max with a max all-reduce, the sum of exponentials with a sum all-reduce
  and the target's logit with a sum all-reduce (each B floats), never
  gathering the logits; backward all-reduces the input's gradient.

With T = 1 (or ``tp`` None) every layer is the plain single-process layer.
Every layer keeps one cache per micro-batch so that a pipeline can hold
several in flight, and records the bytes it moved on ``tp`` per call.
"""
from __future__ import annotations

import numpy as np

from .layout import split_rows
from .lm import LMConfig
from .mixed import F32


class TP:
    """The tensor-parallel group of one rank: ``comm`` of T ranks, or alone."""

    def __init__(self, comm=None, algorithm: str | None = "ring"):
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.size = comm.size if comm is not None else 1
        self.rank = comm.rank if comm is not None else 0
        self.algorithm = algorithm

    def all_reduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        if self.comm is None:
            return x
        return self.comm.all_reduce(x, out=x, op=op, algorithm=self.algorithm)

    def bytes_sent(self) -> int:
        return 0 if self.comm is None else self.comm.traffic.sent_bytes

    def part(self, n: int) -> tuple[int, int]:
        b = split_rows(n, self.size)
        return b[self.rank], b[self.rank + 1]


class Layer:
    """Parameters (this rank's shards), their gradients, per-micro-batch caches,
    and the tp bytes sent by its forward and backward calls.  Backward adds
    into the gradients, which ``bind`` places (with the parameters) in flat
    buffers that the optimizer and the data-parallel all-reduce use whole."""

    name = "?"

    def __init__(self, tp: TP):
        self.tp = tp
        self.params: dict[str, np.ndarray] = {}
        self.grads: dict[str, np.ndarray] = {}
        self.slices: dict[str, tuple] = {}  # where each shard sits in the full parameter
        self.cache: dict = {}
        self.sent = {"forward": 0, "backward": 0}

    def add(self, name: str, full: np.ndarray, index: tuple) -> None:
        self.params[name] = np.ascontiguousarray(full[index])
        self.slices[name] = index

    def bind(self, params: np.ndarray, grads: np.ndarray, offset: int) -> int:
        """Make the parameters (copied in) and their gradients views of two
        flat buffers from ``offset`` on; returns the offset after them."""
        for k, p in self.params.items():
            self.params[k] = params[offset:offset + p.size].reshape(p.shape)
            self.params[k][...] = p
            self.grads[k] = grads[offset:offset + p.size].reshape(p.shape)
            offset += p.size
        return offset

    def forward(self, mb, x):
        before = self.tp.bytes_sent()
        y = self._forward(mb, x)
        self.sent["forward"] += self.tp.bytes_sent() - before
        return y

    def backward(self, mb, dy):
        before = self.tp.bytes_sent()
        dx = self._backward(mb, dy)
        self.sent["backward"] += self.tp.bytes_sent() - before
        return dx


class VocabParallelEmbedding(Layer):
    def __init__(self, tp: TP, full: dict, cfg: LMConfig):
        super().__init__(tp)
        self.name = "embed"
        self.lo, self.hi = tp.part(cfg.vocab)
        self.add("embed.E", full["embed.E"], (slice(self.lo, self.hi),))

    def _forward(self, mb, ids):
        E = self.params["embed.E"]
        mine = (ids >= self.lo) & (ids < self.hi)
        out = np.zeros((ids.size, E.shape[1]), F32)
        out[mine] = E[ids[mine] - self.lo]
        self.cache[mb] = (ids, mine)
        return self.tp.all_reduce(out)           # each row comes from one rank

    def _backward(self, mb, dy):
        ids, mine = self.cache.pop(mb)
        np.add.at(self.grads["embed.E"], ids[mine] - self.lo, dy[mine])
        return None


class ParallelBlock(Layer):
    """h + RowParallel(relu(ColumnParallel(h)))."""

    def __init__(self, tp: TP, full: dict, cfg: LMConfig, i: int):
        super().__init__(tp)
        self.name = p = f"block{i}"
        lo, hi = tp.part(cfg.hidden)
        self.add(f"{p}.W1", full[f"{p}.W1"], (slice(None), slice(lo, hi)))
        self.add(f"{p}.b1", full[f"{p}.b1"], (slice(lo, hi),))
        self.add(f"{p}.W2", full[f"{p}.W2"], (slice(lo, hi), slice(None)))
        self.add(f"{p}.b2", full[f"{p}.b2"], (slice(None),))  # replicated, added once
        self.k = [f"{p}.W1", f"{p}.b1", f"{p}.W2", f"{p}.b2"]

    def _forward(self, mb, h):
        W1, b1, W2, b2 = (self.params[k] for k in self.k)
        z = h @ W1
        z += b1
        a = np.maximum(z, 0)
        y = self.tp.all_reduce(a @ W2)           # partial sums of the row-parallel product
        y += b2
        self.cache[mb] = (h, a)
        return h + y

    def _backward(self, mb, g):
        W1, _, W2, _ = (self.params[k] for k in self.k)
        gW1, gb1, gW2, gb2 = (self.grads[k] for k in self.k)
        h, a = self.cache.pop(mb)
        gb2 += g.sum(axis=0)
        gW2 += a.T @ g
        dz = g @ W2.T
        dz *= a > 0
        gW1 += h.T @ dz
        gb1 += dz.sum(axis=0)
        dh = self.tp.all_reduce(dz @ W1.T)       # the column-parallel input's gradient
        dh += g                                  # the residual path
        return dh


class VocabParallelHead(Layer):
    """Logits of this rank's vocabulary slice, and the cross-entropy over all
    of them without gathering them (three all-reduces of one float per row)."""

    def __init__(self, tp: TP, full: dict, cfg: LMConfig):
        super().__init__(tp)
        self.name = "head"
        self.lo, self.hi = tp.part(cfg.vocab)
        self.add("head.O", full["head.O"], (slice(None), slice(self.lo, self.hi)))
        self.denom = 1
        self.targets: dict = {}

    def _forward(self, mb, h):
        """Returns the summed loss of the micro-batch (targets set beforehand)."""
        t = self.targets.pop(mb)
        logits = h @ self.params["head.O"]
        m = self.tp.all_reduce(logits.max(axis=1), op="max")
        e = np.exp(logits - m[:, None])
        s = self.tp.all_reduce(e.sum(axis=1))
        mine = (t >= self.lo) & (t < self.hi)
        rows = np.nonzero(mine)[0]
        tl = np.zeros(h.shape[0], F32)
        tl[rows] = logits[rows, t[rows] - self.lo]
        tl = self.tp.all_reduce(tl)
        loss = float(np.sum(np.log(s) + m - tl, dtype=np.float64))
        e /= s[:, None]                          # this slice of the softmax
        e[rows, t[rows] - self.lo] -= 1.0
        self.cache[mb] = (h, e)
        return loss

    def _backward(self, mb, _):
        h, dlogits = self.cache.pop(mb)
        dlogits *= F32(1.0 / self.denom)
        O = self.params["head.O"]
        self.grads["head.O"] += h.T @ dlogits
        return self.tp.all_reduce(dlogits @ O.T)  # h is replicated: sum the slices' parts


def build_layers(cfg: LMConfig, tp: TP) -> list[Layer]:
    full = cfg.full_params()
    return ([VocabParallelEmbedding(tp, full, cfg)]
            + [ParallelBlock(tp, full, cfg, i) for i in range(cfg.blocks)]
            + [VocabParallelHead(tp, full, cfg)])


def traffic_formula(layer: str, T: int, rows: int, d: int, b: int = 4) -> dict[str, float]:
    """Bytes a rank sends on ``tp`` per call of a layer on ``rows`` rows, with
    ring all-reduces (2(T-1)/T·S for S bytes)."""
    ar = lambda nbytes: 2 * (T - 1) / T * nbytes  # noqa: E731
    act = rows * d * b
    if layer == "embed":
        return {"forward": ar(act), "backward": 0.0}
    if layer.startswith("block"):
        return {"forward": ar(act), "backward": ar(act)}
    if layer == "head":
        return {"forward": 3 * ar(rows * b), "backward": ar(act)}
    raise ValueError(layer)
