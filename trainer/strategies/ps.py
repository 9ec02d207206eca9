"""A parameter server on rank 0; ranks 1..N-1 are the workers.

Every round a worker sends its half-precision gradient (of its rows of the global
batch) to the server; the server sums the N-1 gradients, runs Adam on the
fp32 master weights and sends the new half weights back to every worker.

Staleness S bounds how old the weights a worker computes with may be
(stale-synchronous parallel, Ho et al. 2013): in round r a worker uses the
weights of version r - S (the server's version v exists after v updates),
so it runs up to S rounds ahead of the server instead of waiting for the
update it just fed.  S = 0 is the synchronous server (``--sync``).  To let
workers run ahead, the server keeps the last S+1 versions it has sent, a
worker's version r - S being in flight until the worker takes it.

Bytes per round: each worker sends Ψ·b and receives Ψ·b; the server receives
(N-1)·Ψ·b and sends (N-1)·Ψ·b.  A world of one trains alone.
Losses and loss scales travel on the control communicator.
"""
from __future__ import annotations

import numpy as np

from ..layout import Layout, split_rows
from ..mixed import F32, Adam, finite
from .base import CastWeights, Strategy, put

GRAD, PARAM = 1, 2


class ParameterServer(Strategy):
    name = "ps"

    def __init__(self, comm, ctrl, model, cfg):
        super().__init__(comm, ctrl, model, cfg)
        self.lay = lay = Layout(model.sizes, [list(range(len(model.sizes)))], 1)
        self.S = cfg.staleness
        self.server = self.rank == 0
        self.workers = list(range(1, self.n))
        master = lay.to_flat(model.init_params(), F32)
        self.grads16 = np.zeros(lay.total, self.half)
        if self.server:
            self.adam = Adam(master, cfg.lr, eps=cfg.adam_eps)
            nver = 1 if self.n == 1 else self.S + 1
            self.versions = [master.astype(self.half) for _ in range(nver)]
            self.sends: list[list] = [[] for _ in range(nver)]
        else:
            self.params16 = master.astype(self.half)
        self._msg = np.zeros(2)

    def rows(self):
        if self.n == 1:
            return 0, self.micro_rows
        b = split_rows(self.micro_rows, self.n - 1)
        return b[self.rank - 1], b[self.rank]

    def _compute(self, step: int, params16: np.ndarray, scale: float) -> float:
        """This rank's (scaled) gradient of the step into grads16; its loss sum."""
        pv, gv = self.views(params16, self.lay), self.views(self.grads16, self.lay)
        loss = 0.0
        for k in range(self.cfg.accum):
            def on_grad(i, gW, gb, k=k):
                put(gv[i][0], gW, k > 0)
                put(gv[i][1], gb, k > 0)
            x, y = self.data(step, k)
            loss += self.model.forward_backward(x, y, CastWeights(pv), on_grad, scale, self.cfg.batch)
        return loss

    def train_step(self, step):
        if self.n == 1:
            return self._alone(step)
        if self.server:
            return self._serve(step)
        self._work(step)
        return None

    def _alone(self, step):
        scale = self.scaler.scale
        loss = self._compute(step, self.versions[0], scale)
        overflow = not finite([self.grads16])
        if not overflow:
            self.adam.step([(0, self.grads16, self.versions[0])], scale)
        self.scaler.update(overflow)
        return loss / self.cfg.batch

    # -- worker ---------------------------------------------------------------------
    def _work(self, r: int) -> None:
        if r - self.S >= 1:  # the weights of version r - S, and the scale to use
            self._take_version()
        loss = self._compute(r, self.params16, self.scaler.scale)
        self.comm.send(self.grads16, 0, tag=GRAD)
        self._msg[:] = (loss, self.scaler.scale)
        self.ctrl.send(self._msg, 0, tag=GRAD)

    def _take_version(self) -> None:
        self.comm.recv(self.params16, 0, tag=PARAM)
        self.ctrl.recv(self._msg, 0, tag=PARAM)
        self.scaler.scale = float(self._msg[1])

    # -- server ---------------------------------------------------------------------
    def _serve(self, r: int) -> float:
        acc, loss = None, 0.0
        for w in self.workers:
            self.comm.recv(self.grads16, w, tag=GRAD)
            self.ctrl.recv(self._msg, w, tag=GRAD)
            loss += self._msg[0]
            g = self.grads16.astype(F32)
            g *= F32(1.0 / self._msg[1])  # each worker's own scale
            if acc is None:
                acc = g
            else:
                acc += g
        overflow = not finite([acc])
        cur, new = self._slot(r), self._slot(r + 1)
        for h in self.sends[new]:  # the version that lived here has been taken
            h.wait()
        self.sends[new] = []
        if overflow:
            np.copyto(self.versions[new], self.versions[cur])
        else:
            self.adam.step([(0, acc, self.versions[new])], 1.0)
        self.scaler.update(overflow)
        if r + 1 <= self.cfg.steps - 1 - self.S:  # a version some worker will use
            self._send_version(new)
        return loss / self.cfg.batch

    def _slot(self, v: int) -> int:
        return v % len(self.versions)

    def _send_version(self, slot: int) -> None:
        self._msg[:] = (0.0, self.scaler.scale)
        for w in self.workers:
            self.sends[slot].append(self.comm.isend(self.versions[slot], w, tag=PARAM))
            self.ctrl.send(self._msg, w, tag=PARAM)

    def finish(self) -> None:
        """The final weights (version = steps) to every worker."""
        if self.n == 1:
            return
        if self.server:
            final = self._slot(self.cfg.steps)
            self._send_version(final)
            for hs in self.sends:
                for h in hs:
                    h.wait()
        else:
            self._take_version()

    def state(self):
        if self.server:
            return {"params16": self.versions, "grads16": [self.grads16],
                    "optimizer": self.adam.states()}
        return {"params16": [self.params16], "grads16": [self.grads16], "optimizer": []}

    def master_params(self):
        flat = self.adam.master if self.server else np.empty(self.lay.total, F32)
        self.comm.broadcast(flat, root=0)
        return self.lay.params_of(flat, self.model.shapes)
