"""ZeRO stage 1: optimizer states partitioned.

Every rank keeps the full half-precision parameters and gradients.  Each bucket's
gradients are reduce-scattered (in place, so that this rank's block of the
bucket holds the reduced sum) as backward finishes it; each rank runs Adam on
its pieces only, and an all-gather per bucket brings every rank the updated
half parameters.  Bytes per rank: reduce-scatter + all-gather = 2(N-1)/N·Ψ·b,
as for DDP's all-reduce.
"""
from __future__ import annotations

from .zero import ZeroFullParams


class Zero1(ZeroFullParams):
    name = "zero1"

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg)
        self.grads16 = self.comm.zeros(self.lay.total, self.half)  # read in place by peers
        self.gviews = self.views(self.grads16, self.lay)

    def _reduce(self, g: int):
        return self.reduce_scatter(self.lay.group(self.grads16, g), g)

    def train_step(self, step):
        lay, r, scale = self.lay, self.rank, self.scaler.scale
        loss, handles = self.accumulate_and_launch(step, self.pviews, self.gviews, lay, self._reduce)
        for h in handles:
            h.wait()
        return self.update(scale, loss, lambda g: lay.owned(self.grads16, g, r))

    def state(self):
        return {"params16": [self.params16], "grads16": [self.grads16],
                "optimizer": self.adam.states()}
