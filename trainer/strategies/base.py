"""What every strategy shares: the run's settings, its rows of the batch, the
per-step agreement on loss and overflow, and casting half weights for compute."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..layout import buckets, split_rows
from ..mixed import F32, LossScaler, half_dtype
from ..model import MLP, ModelConfig, Teacher


@dataclass
class TrainConfig:
    strategy: str = "ddp"
    steps: int = 20
    batch: int = 64           # global samples per step
    accum: int = 1            # micro-batches per step
    lr: float = 1e-3
    adam_eps: float = 1e-8    # Adam's epsilon (torch.optim.Adam's eps)
    bucket_mb: float = 4.0
    overlap: bool = True
    staleness: int = 0        # ps only; 0 is synchronous
    loss_scale: float = 2.0 ** 12   # fp16's initial scale; bf16 runs unscaled
    dtype: str = "fp16"       # the half type of parameters and gradients: fp16 or bf16
    algorithm: str = "ring"   # what the formulas of docs/trainer.md describe
    model: ModelConfig = field(default_factory=ModelConfig)

    def check(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.accum < 1:
            raise ValueError("steps, batch and accum must be positive")
        if self.batch % self.accum:
            raise ValueError(f"batch {self.batch} is not a multiple of accum {self.accum}")
        if self.staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {self.staleness}")
        if self.bucket_mb <= 0:
            raise ValueError(f"bucket-mb must be positive, got {self.bucket_mb}")
        half_dtype(self.dtype)


def grad_buckets(model: MLP, cfg: TrainConfig) -> list[list[int]]:
    """The groups of DDP, ZeRO-1 and ZeRO-2: half-precision gradient buckets
    of at least ``bucket_mb``, in the order backward produces them."""
    return buckets(model.sizes, int(cfg.bucket_mb * 2**20), half_dtype(cfg.dtype).itemsize)


def put(dst: np.ndarray, g: np.ndarray, accumulate: bool) -> None:
    """Store an fp32 gradient into half ``dst`` (or add to it); an overflow
    becomes inf, which the loss scaler sees."""
    with np.errstate(over="ignore", invalid="ignore"):
        if accumulate:
            np.add(dst, g, out=dst, casting="unsafe")
        else:
            np.copyto(dst, g, casting="unsafe")


class CastWeights:
    """fp32 copies of half weights, made in forward and kept for backward."""

    def __init__(self, views: list[tuple[np.ndarray, np.ndarray]]):
        self.views, self.cache = views, {}

    def get(self, i, phase):
        if phase == "fwd":
            W, b = self.views[i]
            self.cache[i] = (W.astype(F32), b.astype(F32))
        return self.cache[i]

    def release(self, i, phase):
        if phase == "bwd":
            del self.cache[i]


class Strategy:
    name = "?"

    def __init__(self, comm, ctrl, model: MLP, cfg: TrainConfig):
        cfg.check()
        self.comm, self.ctrl, self.model, self.cfg = comm, ctrl, model, cfg
        self.n, self.rank = comm.size, comm.rank
        m = cfg.model
        self.task = Teacher(m.d_in, m.d_out, m.seed)
        self.half = half_dtype(cfg.dtype)  # what parameters and gradients are stored in
        self.scaler = LossScaler.for_dtype(cfg.dtype, cfg.loss_scale)
        self.micro_rows = cfg.batch // cfg.accum

    # -- data ---------------------------------------------------------------------
    def rows(self) -> tuple[int, int]:
        """This rank's rows of every micro-batch."""
        b = split_rows(self.micro_rows, self.n)
        return b[self.rank], b[self.rank + 1]

    def data(self, step: int, k: int):
        lo, hi = self.rows()
        return self.task.batch(step, k, self.micro_rows, lo, hi)

    def views(self, flat: np.ndarray, layout) -> list[tuple[np.ndarray, np.ndarray]]:
        sh = self.model.shapes
        return [(layout.param(flat, 2 * i, sh[2 * i]), layout.param(flat, 2 * i + 1, sh[2 * i + 1]))
                for i in range(self.model.n_layers)]

    def accumulate_and_launch(self, step: int, pviews, gviews, layout, launch) -> tuple[float, list]:
        """Forward and backward over the step's micro-batches, gradients summed
        into the flat buffer behind ``gviews``.  On the last micro-batch,
        ``launch(g)`` starts group g's collective as soon as backward has
        written all of it (after backward without overlap).  Returns the loss
        sum and the handles to wait for."""
        cfg, scale, loss, handles = self.cfg, self.scaler.scale, 0.0, []
        for k in range(cfg.accum):
            last = k == cfg.accum - 1
            pending = [len(m) for m in layout.groups]

            def on_grad(i, gW, gb, k=k, last=last, pending=pending):
                put(gviews[i][0], gW, k > 0)
                put(gviews[i][1], gb, k > 0)
                if last and cfg.overlap:
                    for j in (2 * i, 2 * i + 1):
                        g = layout.group_of[j]
                        pending[g] -= 1
                        if pending[g] == 0:
                            handles.append(launch(g))
            x, y = self.data(step, k)
            loss += self.model.forward_backward(x, y, CastWeights(pviews), on_grad, scale, cfg.batch)
        if not cfg.overlap:
            handles = [launch(g) for g in range(len(layout.groups))]
        return loss, handles

    def agree(self, loss_sum: float, overflow: bool) -> tuple[float, bool]:
        """The global mean loss, and whether any rank saw an overflow (one
        2-element all-reduce on the control communicator)."""
        buf = np.array([loss_sum, float(overflow)])
        self.ctrl.all_reduce(buf, out=buf)
        return float(buf[0]) / self.cfg.batch, bool(buf[1] > 0)

    # -- what a strategy implements -----------------------------------------------
    def train_step(self, step: int) -> float | None:
        """One optimizer step; the global mean loss where this rank knows it."""
        raise NotImplementedError

    def finish(self) -> None:
        """After the last step (the parameter server sends its final weights)."""

    def state(self) -> dict[str, list[np.ndarray]]:
        """The model states this rank holds between steps, by kind."""
        raise NotImplementedError

    def master_params(self) -> list[np.ndarray]:
        """Every parameter's fp32 master weight, on every rank (collective)."""
        raise NotImplementedError

    @property
    def algorithm(self) -> str | None:
        """The ``algorithm=`` of every collective of the step (``--algorithm``:
        one name for all of them; None, the library's choice, for "auto")."""
        a = self.cfg.algorithm
        return None if a in (None, "auto") else a
