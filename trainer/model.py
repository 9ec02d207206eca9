"""The model (a ReLU MLP with hand-written backward) and its synthetic task.

Matrix products run in fp32 on fp32 copies of the half-precision (fp16 or
bf16) parameters, as half-precision tensor cores accumulate in fp32; what a
strategy stores and communicates is the half type.  The task is a fixed
random teacher network; sample ``i`` of step ``s`` depends only on (seed, s,
micro-batch), so every world size sees the same global batch and a rank
takes its rows of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from .mixed import F32


@dataclass(frozen=True)
class ModelConfig:
    d_in: int = 256
    width: int = 1024
    layers: int = 6          # linear layers; layers-1 hidden ReLU layers
    d_out: int = 256
    seed: int = 0

    def dims(self) -> list[int]:
        if self.layers < 1:
            raise ValueError(f"layers must be at least 1, got {self.layers}")
        return [self.d_in] + [self.width] * (self.layers - 1) + [self.d_out]


class Weights(Protocol):
    """What forward/backward asks a strategy for: layer i's fp32 (W, b)."""

    def get(self, i: int, phase: str) -> tuple[np.ndarray, np.ndarray]: ...

    def release(self, i: int, phase: str) -> None: ...


class MLP:
    """Parameters in order W0, b0, W1, b1, ...; W_i has shape (d_i, d_{i+1})."""

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        d = cfg.dims()
        self.n_layers = len(d) - 1
        self.shapes: list[tuple[int, ...]] = []
        for i in range(self.n_layers):
            self.shapes += [(d[i], d[i + 1]), (d[i + 1],)]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.n_params = sum(self.sizes)

    def init_params(self) -> list[np.ndarray]:
        """He-initialised fp32 weights and zero biases, the same for every N."""
        out = []
        for j, shape in enumerate(self.shapes):
            if len(shape) == 1:
                out.append(np.zeros(shape, F32))
            else:
                rng = np.random.default_rng([self.cfg.seed, 1, j])
                out.append((rng.standard_normal(shape, F32) * np.sqrt(2.0 / shape[0])).astype(F32))
        return out

    def forward_backward(self, x: np.ndarray, y: np.ndarray, weights: Weights,
                         on_grad: Callable[[int, np.ndarray, np.ndarray], None],
                         scale: float, denom: int) -> float:
        """Loss sum(0.5*|f(x)-y|^2) over these rows; calls ``on_grad(i, gW, gb)``
        for i = L-1 .. 0 with the gradients of sum-loss * scale / denom (fp32)."""
        acts = [x]
        h = x
        L = self.n_layers
        for i in range(L):
            W, b = weights.get(i, "fwd")
            z = h @ W
            z += b
            weights.release(i, "fwd")
            if i < L - 1:
                np.maximum(z, 0, out=z)
                acts.append(z)
            h = z
        diff = h - y
        loss = 0.5 * float(np.dot(diff.reshape(-1).astype(np.float64),
                                  diff.reshape(-1).astype(np.float64)))
        dz = diff
        dz *= F32(scale / denom)
        for i in reversed(range(L)):
            W, _ = weights.get(i, "bwd")
            a = acts[i]
            gW = a.T @ dz
            gb = dz.sum(axis=0)
            if i > 0:
                da = dz @ W.T
                da *= acts[i] > 0
                dz = da
            weights.release(i, "bwd")
            acts[i] = None
            on_grad(i, gW, gb)
        return loss


class Teacher:
    """y = tanh(x A) B for a fixed random (A, B): a smooth target to regress.

    The inputs are Gaussian on a random ``latent``-dimensional subspace of
    R^d_in, scaled to unit variance per coordinate, as real data lies near a
    low-dimensional set.  On isotropic inputs in 256 dimensions the default
    network learns nothing beyond the target's mean for about 100 steps: its
    loss sits at the target's variance (about 50), since deep random ReLU
    features carry little of a linear function of so many inputs.  On 12
    (the default) it falls from 277 to 26 in 20 steps and to 5 in 100."""

    def __init__(self, d_in: int, d_out: int, seed: int, hidden: int = 64, latent: int = 12):
        rng = np.random.default_rng([seed, 2])
        self.d_in = d_in
        self.A = (rng.standard_normal((d_in, hidden)) / np.sqrt(d_in)).astype(F32)
        self.B = (rng.standard_normal((hidden, d_out)) / np.sqrt(hidden)).astype(F32)
        self.seed = seed
        k = min(latent, d_in)
        q, _ = np.linalg.qr(np.random.default_rng([seed, 4]).standard_normal((d_in, k)))
        self.basis = (q.T * np.sqrt(d_in / k)).astype(F32)  # k orthogonal rows of norm sqrt(d_in/k)

    def batch(self, step: int, micro: int, rows: int, lo: int, hi: int):
        """Rows [lo, hi) of the ``rows``-sample micro-batch ``micro`` of ``step``
        (the whole micro-batch is made, so a sample does not depend on N)."""
        rng = np.random.default_rng([self.seed, 3, step, micro])
        x = rng.standard_normal((rows, len(self.basis)), F32) @ self.basis
        return x[lo:hi], (np.tanh(x @ self.A) @ self.B)[lo:hi]
