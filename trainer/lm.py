"""The next-token model that pipeline and tensor parallelism split: its
configuration, its unsplit parameters and its task.

A token id goes through an embedding (V×d), ``blocks`` residual MLP blocks
``h + W2·relu(W1·h + b1) + b2`` (d×h and h×d) and an output projection d×V
with a softmax cross-entropy against the next id.  The layers that split it
over ranks are in ``tensor_parallel.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mixed import F32


@dataclass(frozen=True)
class LMConfig:
    """V = ``vocab``, d, h = ``hidden`` and the number of blocks; ``seed``
    fixes the parameters and the task."""

    vocab: int = 256
    d: int = 256
    hidden: int = 1024
    blocks: int = 8
    seed: int = 0

    def full_params(self) -> dict[str, np.ndarray]:
        """The single-process model's parameters, the same for every layout."""
        out = {}

        def normal(name, shape, std):
            rng = np.random.default_rng([self.seed, 11, _key(name)])
            out[name] = (rng.standard_normal(shape) * std).astype(F32)
        normal("embed.E", (self.vocab, self.d), 1.0 / np.sqrt(self.d))
        for i in range(self.blocks):
            normal(f"block{i}.W1", (self.d, self.hidden), np.sqrt(2.0 / self.d))
            out[f"block{i}.b1"] = np.zeros(self.hidden, F32)
            normal(f"block{i}.W2", (self.hidden, self.d), 0.5 / np.sqrt(self.hidden))
            out[f"block{i}.b2"] = np.zeros(self.d, F32)
        normal("head.O", (self.d, self.vocab), 1.0 / np.sqrt(self.d))
        return out

    def batch(self, step: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` (id, next id) pairs of step ``step``: the next id is a fixed
        random function of the id, which the model can learn."""
        table = np.random.default_rng([self.seed, 12]).integers(0, self.vocab, self.vocab)
        ids = np.random.default_rng([self.seed, 13, step]).integers(0, self.vocab, rows)
        return ids, table[ids]


def _key(name: str) -> int:
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little") ^ len(name)
