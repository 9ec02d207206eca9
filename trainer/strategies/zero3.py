"""ZeRO stage 3: optimizer states, gradients and parameters partitioned.

One group per layer.  Before a layer's forward its parameters are
all-gathered from the shards, used and dropped, and the next layer's
all-gather is already started (prefetch); backward gathers each layer again
(last layer first), and reduce-scatters its gradients into the shard as soon
as they exist.  Adam updates the half-precision parameter shard directly, so nothing is
gathered after the step.  Bytes per rank: two all-gathers and one
reduce-scatter, 3(N-1)/N·Ψ·b.
"""
from __future__ import annotations

from ..layout import per_layer
from ..mixed import F32
from .base import put
from .zero import ShardedGrads, ZeroBase


class Zero3(ZeroBase):
    name = "zero3"

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg, per_layer(model.n_layers))
        self.param_shard = self.lay.shard_of(self._take_init(), self.rank).astype(self.half)
        self.grads = ShardedGrads(self)
        # where layers are gathered: two communicator-allocated buffers of the
        # largest layer, taken in turn (Gathered); a layer's is free again once
        # get() has copied it out, before the layer after next starts
        # (prefetch is one layer ahead)
        most = max(self.lay.length)
        self.pool = [comm.empty(most, self.half) for _ in range(2)]

    def train_step(self, step):
        cfg, lay, G = self.cfg, self.lay, self.grads
        sh = self.model.shapes
        scale, loss = self.scaler.scale, 0.0
        for k in range(cfg.accum):
            def on_grad(i, gW, gb, k=k):
                g = lay.group_of[2 * i]
                buf = G.new_buffer(g)
                put(lay.param_in_group(buf, 2 * i, sh[2 * i]), gW, False)
                put(lay.param_in_group(buf, 2 * i + 1, sh[2 * i + 1]), gb, False)
                G.launch(g, buf, k)
            x, y = self.data(step, k)
            loss += self.model.forward_backward(x, y, Gathered(self), on_grad, scale, cfg.batch)
            G.drain(block=True)
        mean, _ = self.step_shard(scale, loss, G.piece,
                                  lambda g: lay.shard_piece(self.param_shard, g, self.rank))
        return mean

    def state(self):
        return {"params16": [self.param_shard], "grads16": [self.grads.shard],
                "optimizer": self.adam.states()}


class Gathered:
    """Layer weights all-gathered on demand, one layer ahead: forward 0..L-1,
    then backward L-1..0, in the order every rank issues them."""

    def __init__(self, z: Zero3):
        self.z = z
        L = z.model.n_layers
        self.seq = [("fwd", i) for i in range(L)] + [("bwd", i) for i in reversed(range(L))]
        self.next, self.inflight = 0, {}
        self._start()

    def _start(self) -> None:
        if self.next >= len(self.seq):
            return
        key = self.seq[self.next]
        self.next += 1
        z, lay = self.z, self.z.lay
        g = lay.group_of[2 * key[1]]
        buf = z.pool[self.next % 2][:lay.length[g]]
        lay.piece(buf, g, z.rank)[:] = lay.shard_piece(z.param_shard, g, z.rank)
        h = z.all_gather(buf, g)
        self.inflight[key] = (buf, h)

    def get(self, i, phase):
        buf, h = self.inflight.pop((phase, i))
        h.wait()
        self._start()  # prefetch the next layer while this one computes
        lay, sh = self.z.lay, self.z.model.shapes
        return (lay.param_in_group(buf, 2 * i, sh[2 * i]).astype(F32),
                lay.param_in_group(buf, 2 * i + 1, sh[2 * i + 1]).astype(F32))

    def release(self, i, phase):
        pass  # the gathered half buffer was dropped in get(); the fp32 copy goes with the caller
