"""Mixed precision: the half types, loss scaling and Adam on fp32 master
weights.

A strategy stores and communicates its parameters and gradients in a half
type, fp16 (``np.float16``) or bf16 (``ml_dtypes.bfloat16``, ``--dtype``);
products, master weights and optimizer states are fp32.  Adam keeps, per
parameter it owns, an fp32 master weight and fp32 first and second moments:
K = 12 bytes (the ZeRO paper's K).  It reads half (scaled) gradients and
writes the updated weights back in the half type, in chunks so that its
temporaries stay small.

fp16 has 5 exponent bits: gradients below 6e-8 flush to zero, so the loss is
scaled up (dynamic loss scaling).  bf16 has fp32's 8 exponent bits, so its
range is fp32's and a gradient that fp32 holds bf16 holds too, with 8 bits
of precision instead of 11: it trains without loss scaling (Kalamkar et al.
2019, "A Study of BFLOAT16 for Deep Learning Training"), and its scaler
stays at 1 (a step with an inf or NaN gradient is still skipped).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

# What products, master weights and optimizer states use (F32), and the
# half types a strategy may store and communicate (--dtype).
F32 = np.float32
HALF = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
CHUNK = 1 << 18


def half_dtype(name: str) -> np.dtype:
    """The half type of ``--dtype name`` ("fp16" or "bf16")."""
    try:
        return HALF[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {list(HALF)}, got {name!r}") from None


class LossScaler:
    """Multiply the loss by ``scale``; halve it and skip the step on an
    overflow, double it after ``interval`` clean steps (Micikevicius et al.
    2018, "Mixed Precision Training").  ``dynamic=False`` keeps ``scale``
    fixed and only skips steps that overflow."""

    def __init__(self, scale: float = 2.0 ** 12, interval: int = 200, dynamic: bool = True):
        self.scale, self.interval, self.clean = float(scale), interval, 0
        self.dynamic = dynamic
        self.skipped = 0

    @classmethod
    def for_dtype(cls, name: str, scale: float) -> "LossScaler":
        """fp16: dynamic, from ``scale``; bf16: none (a fixed scale of 1)."""
        half_dtype(name)
        return cls(scale) if name == "fp16" else cls(1.0, dynamic=False)

    def update(self, overflow: bool) -> None:
        if not self.dynamic:
            self.skipped += overflow
        elif overflow:
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
        shard; grad (half or fp32, scaled) is read, param16 (half) written
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
