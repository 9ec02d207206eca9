"""DDP: every rank holds all model states and all-reduces the gradients.

Gradients are written into one flat half-precision buffer cut into buckets of about
``bucket_mb`` in reverse parameter order.  As backward finishes a layer, a
bucket whose gradients are all in starts its non-blocking all-reduce while
backward goes on (Li et al. 2020, "PyTorch Distributed"); the optimizer waits
for every bucket.  With ``accum`` K, the first K-1 micro-batches only
accumulate (as ``no_sync``) and the last one communicates.
"""
from __future__ import annotations

from ..layout import Layout
from ..mixed import F32, Adam, finite
from .base import Strategy, grad_buckets


class DDP(Strategy):
    name = "ddp"

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg)
        # buckets padded to a multiple of N so the ring's blocks are equal
        self.lay = lay = Layout(model.sizes, grad_buckets(model, cfg), self.n)
        master = lay.to_flat(model.init_params(), F32)
        self.params16 = master.astype(self.half)
        # communicator-allocated: where the default choice takes the one-copy
        # all-reduce (--algorithm auto on shm, buckets from 16 MiB), the peers
        # read these buckets from their mappings of them; the ring and the
        # staged algorithms copy them as they would any array
        self.grads16 = comm.zeros(lay.total, self.half)
        self.adam = Adam(master, cfg.lr, eps=cfg.adam_eps)
        self.pviews = self.views(self.params16, lay)
        self.gviews = self.views(self.grads16, lay)

    def _all_reduce(self, g: int):
        b = self.lay.group(self.grads16, g)
        return self.comm.all_reduce(b, out=b, algorithm=self.algorithm, async_op=True)

    def train_step(self, step):
        scale = self.scaler.scale
        loss, handles = self.accumulate_and_launch(step, self.pviews, self.gviews, self.lay,
                                                   self._all_reduce)
        for h in handles:
            h.wait()
        mean, overflow = self.agree(loss, not finite([self.grads16]))
        if not overflow:
            self.adam.step([(0, self.grads16, self.params16)], scale)
        self.scaler.update(overflow)
        return mean

    def state(self):
        return {"params16": [self.params16], "grads16": [self.grads16],
                "optimizer": self.adam.states()}

    def master_params(self):
        return self.lay.params_of(self.adam.master, self.model.shapes)
