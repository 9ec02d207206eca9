"""What the three ZeRO stages share (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models").

The flat buffer is cut into groups (buckets for stages 1-2, layers for stage
3), each split into N pieces that differ by at most one element, without
padding; rank r owns piece r of every group, and its fp32 master weights
and Adam moments cover only those pieces (KΨ/N).  The pieces move with the
variable-count calls (``reduce_scatter_v``, ``all_gather_v``: the
fixed-count ones where a group divides by N), so that the bytes on the wire
are Ψ's and nothing more.
"""
from __future__ import annotations

import numpy as np

from ..layout import Layout
from ..mixed import F32, Adam, finite
from .base import Strategy, grad_buckets


class ZeroBase(Strategy):
    def __init__(self, comm, ctrl, model, cfg, groups):
        super().__init__(comm, ctrl, model, cfg)
        self.lay = lay = Layout(model.sizes, groups, self.n, pad=False)
        full = lay.to_flat(model.init_params(), F32)
        self.adam = Adam(lay.shard_of(full, self.rank), cfg.lr, eps=cfg.adam_eps)
        self._full_init = full  # handed to the subclass, then dropped

    def _take_init(self) -> np.ndarray:
        full, self._full_init = self._full_init, None
        return full

    def step_shard(self, scale: float, loss: float, grad_piece, param_piece) -> tuple[float, bool]:
        """Agree on the loss and on overflow, then Adam on this rank's pieces;
        returns (mean loss, overflow)."""
        groups = range(len(self.lay.groups))
        mine = [grad_piece(g) for g in groups]
        mean, overflow = self.agree(loss, not finite(mine))
        if not overflow:
            start = self.lay.shard_starts[self.rank]
            self.adam.step([(start[g], mine[g], param_piece(g)) for g in groups], scale)
        self.scaler.update(overflow)
        return mean, overflow

    def reduce_scatter(self, buf: np.ndarray, g: int):
        """Start the reduce-scatter of group g's buffer into this rank's piece
        of it (in place)."""
        return self.comm.reduce_scatter_v(buf, self.lay.counts[g],
                                          out=self.lay.piece(buf, g, self.rank),
                                          algorithm=self.algorithm, async_op=True)

    def all_gather(self, buf: np.ndarray, g: int):
        """Start the all-gather of every rank's piece of group g's buffer into
        it (in place: this rank's piece is there)."""
        return self.comm.all_gather_v(self.lay.piece(buf, g, self.rank), self.lay.counts[g],
                                      out=buf, algorithm=self.algorithm, async_op=True)

    def master_params(self):
        shards = self.comm.all_gather_v(self.adam.master, None)
        return self.lay.params_of(self.lay.unshard(shards), self.model.shapes)


class ZeroFullParams(ZeroBase):
    """Stages 1 and 2: gradient buckets as groups, and every half parameter
    on every rank, its updated pieces all-gathered after each step."""

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg, grad_buckets(model, cfg))
        # all-gathered in place every step: communicator-allocated, so that the
        # peers of this host read its pieces where they lie
        self.params16 = self.comm.empty(self.lay.total, self.half)
        self.params16[...] = self._take_init()
        self.pviews = self.views(self.params16, self.lay)

    def update(self, scale: float, loss: float, grad_piece) -> float:
        """Adam on this rank's pieces of ``params16`` (step_shard), then one
        all-gather per group, in place (this rank's piece is already in its
        block); returns the mean loss."""
        lay, r = self.lay, self.rank
        mean, overflow = self.step_shard(scale, loss, grad_piece,
                                         lambda g: lay.owned(self.params16, g, r))
        if not overflow:
            hs = [self.all_gather(lay.group(self.params16, g), g) for g in range(len(lay.groups))]
            for h in hs:
                h.wait()
        return mean


class ShardedGrads:
    """Gradients kept only as this rank's shard (stages 2 and 3).

    A group's gradients go into a transient group-sized buffer; once the
    group is complete its reduce-scatter starts, and when that finishes this
    rank's block is stored (or, after the first micro-batch, added) into the
    shard and the buffer is dropped."""

    def __init__(self, z: ZeroBase):
        self.z = z
        self.shard = np.zeros(z.lay.shard_len(z.rank), z.half)
        self.inflight: list = []

    def new_buffer(self, g: int) -> np.ndarray:
        buf = np.empty(self.z.lay.length[g], self.z.half)
        buf[self.z.lay.pad_slices(g)] = 0
        return buf

    def launch(self, g: int, buf: np.ndarray, k: int) -> None:
        self.inflight.append((g, buf, k, self.z.reduce_scatter(buf, g)))
        self.drain(block=False)

    def drain(self, block: bool) -> None:
        lay, r = self.z.lay, self.z.rank
        while self.inflight and (block or self.inflight[0][3].done()):
            g, buf, k, h = self.inflight.pop(0)
            h.wait()
            piece, own = lay.shard_piece(self.shard, g, r), lay.piece(buf, g, r)
            with np.errstate(over="ignore", invalid="ignore"):
                if k == 0:
                    piece[:] = own
                else:
                    piece += own

    def piece(self, g: int) -> np.ndarray:
        return self.z.lay.shard_piece(self.shard, g, self.z.rank)
