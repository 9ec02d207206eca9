"""Mixed precision: the two dtypes, dynamic loss scaling and Adam on fp32
master weights.

Adam keeps, per parameter it owns, an fp32 master weight and fp32 first and
second moments: K = 12 bytes (the ZeRO paper's K).  It reads fp16 (scaled)
gradients and writes the updated weights back as fp16, in chunks so that its
temporaries stay small.
"""
from __future__ import annotations

import numpy as np

# What a strategy stores and communicates (F16), and what products,
# master weights and optimizer states use (F32).
F16, F32 = np.float16, np.float32
CHUNK = 1 << 18


class LossScaler:
    """Multiply the loss by ``scale``; halve it and skip the step on an
    overflow, double it after ``interval`` clean steps (Micikevicius et al.
    2018, "Mixed Precision Training")."""

    def __init__(self, scale: float = 2.0 ** 12, interval: int = 200):
        self.scale, self.interval, self.clean = float(scale), interval, 0
        self.skipped = 0

    def update(self, overflow: bool) -> None:
        if overflow:
            self.scale = max(self.scale / 2, 1.0)
            self.clean = 0
            self.skipped += 1
        else:
            self.clean += 1
            if self.clean >= self.interval:
                self.scale *= 2
                self.clean = 0


def finite(arrays) -> bool:
    with np.errstate(invalid="ignore", over="ignore"):
        return all(bool(np.isfinite(a).all()) for a in arrays)


class Adam:
    """Adam (Kingma & Ba 2015) on one contiguous fp32 shard of master weights."""

    def __init__(self, master: np.ndarray, lr: float = 1e-3, betas=(0.9, 0.999),
                 eps: float = 1e-8):
        self.master = np.ascontiguousarray(master, F32)
        self.m = np.zeros_like(self.master)
        self.v = np.zeros_like(self.master)
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.t = 0
        self._g = np.empty(CHUNK, F32)
        self._u = np.empty(CHUNK, F32)

    def states(self) -> list[np.ndarray]:
        return [self.master, self.m, self.v]

    def step(self, pieces, scale: float) -> None:
        """``pieces``: (shard offset, grad, param16) triples that tile the
        shard; grad (fp16 scaled, or fp32 scaled) is read, param16 written
        (None where the master weights are the parameters themselves)."""
        self.t += 1
        b1, b2 = self.b1, self.b2
        c1 = self.lr / (1 - b1 ** self.t)
        c2 = 1.0 / np.sqrt(1 - b2 ** self.t)
        inv = F32(1.0 / scale)
        for off, grad, out16 in pieces:
            for s in range(0, grad.size, CHUNK):
                e = min(s + CHUNK, grad.size)
                k = e - s
                g, u = self._g[:k], self._u[:k]
                m, v, w = (a[off + s:off + e] for a in (self.m, self.v, self.master))
                np.multiply(grad[s:e], inv, out=g)
                m *= b1
                np.multiply(g, 1 - b1, out=u)
                m += u
                v *= b2
                np.multiply(g, g, out=g)
                g *= 1 - b2
                v += g
                np.sqrt(v, out=u)
                u *= F32(c2)
                u += F32(self.eps)
                np.divide(m, u, out=u)
                u *= F32(c1)
                w -= u
                if out16 is not None:
                    out16[s:e] = w
