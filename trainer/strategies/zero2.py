"""ZeRO stage 2: optimizer states and gradients partitioned.

As backward completes a bucket, its gradients (in a transient bucket-sized
buffer) are reduce-scattered; this rank keeps its block in its gradient
shard and drops the rest.  Adam runs on the shard, and an all-gather per
bucket brings back the half parameters.  Bytes per rank as DDP,
2(N-1)/N·Ψ·b; gradient memory 2Ψ/N.  With ``accum`` K every micro-batch is
reduce-scattered and summed into the shard (the gradients that are not this
rank's are not kept between micro-batches), so the reduce-scatter bytes
repeat K times.
"""
from __future__ import annotations

from .base import CastWeights, put
from .zero import ShardedGrads, ZeroFullParams


class Zero2(ZeroFullParams):
    name = "zero2"

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg)
        self.grads = ShardedGrads(self)

    def train_step(self, step):
        cfg, lay, G = self.cfg, self.lay, self.grads
        sh = self.model.shapes
        scale, loss = self.scaler.scale, 0.0
        for k in range(cfg.accum):
            pending = [len(m) for m in lay.groups]
            bufs: dict = {}

            def on_grad(i, gW, gb, k=k, pending=pending, bufs=bufs):
                for j, gj in ((2 * i, gW), (2 * i + 1, gb)):
                    g = lay.group_of[j]
                    if g not in bufs:
                        bufs[g] = G.new_buffer(g)
                    put(lay.param_in_group(bufs[g], j, sh[j]), gj, False)
                    pending[g] -= 1
                    if pending[g] == 0 and cfg.overlap:
                        G.launch(g, bufs.pop(g), k)
            x, y = self.data(step, k)
            loss += self.model.forward_backward(x, y, CastWeights(self.pviews), on_grad,
                                                scale, cfg.batch)
            for g in sorted(bufs):
                G.launch(g, bufs.pop(g), k)
            G.drain(block=True)
        return self.update(scale, loss, G.piece)

    def state(self):
        return {"params16": [self.params16], "grads16": [self.grads.shard],
                "optimizer": self.adam.states()}

