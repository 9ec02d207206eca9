"""A mixture-of-experts layer, expert parallel: one expert per rank, tokens
routed to their expert's rank with ``all_to_all_v`` and back.

    mpiexec -n N python -m trainer --strategy moe [--batch B] [--steps T]

Each rank holds B/N tokens of a step (the first B mod N ranks one more) (x: d features) and the replicated
router W_r (d×E, E = N experts); rank e holds expert e alone (a two-layer
MLP d→h→d, ReLU).  A token goes to the expert of its largest router score
(top-1, as Switch Transformers route, Fedus et al. 2021) and comes back
scaled by that expert's softmax probability g: ŷ = g·expert(x).  The task
is a teacher of the same shape, so the loss (mean squared error) can fall
to zero.

A step, per rank:

1. route: scores, top-1, the tokens sorted by expert; ``all_to_all_v`` of
   the tokens (send counts: this rank's tokens per expert; receive counts
   agreed by the call);
2. each expert runs on the tokens it received; ``all_to_all_v`` of the
   outputs back to the tokens' ranks (the counts of step 1, reversed);
3. loss, and its gradient dŷ; the gradient of the expert outputs g·dŷ goes
   to the experts (``all_to_all_v`` again, step 1's counts), which
   accumulate their weights' gradients; the router's gradient (through g)
   is all-reduced (``all_reduce``, sum: the router is replicated);
4. Adam on each rank's expert and on the router.

Bytes per rank and step (``traffic``; fp32, 4 bytes an element): with S_r
the tokens rank r sends to other ranks and R_r those it receives from them,
(2·S_r + R_r)·d·4 through ``all_to_all_v`` (the tokens and their output
gradients out, the expert outputs back), plus the router's all-reduce
(ring: 2(N−1)/N·d·E·4); the counts and the loss go through a communicator
of their own, not counted; under uniform routing S_r = R_r = (N−1)/N·B/N tokens, so
3(N−1)/N·(B/N)·d·4 on the all-to-alls.
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

F32 = np.float32


@dataclasses.dataclass
class MoEConfig:
    steps: int = 30
    batch: int = 1024       # tokens per step, over all ranks
    d: int = 32             # features of a token
    hidden: int = 64        # an expert's hidden units
    lr: float = 1e-2
    seed: int = 0
    algorithm: str | None = None  # of the all_to_all_v calls (None: the library's)

    def check(self, n: int) -> None:
        if self.batch < n:
            raise ValueError(f"batch {self.batch} must give each of the {n} ranks a token")


def _mlp(rng, d: int, h: int, scale: float = 1.0) -> list[np.ndarray]:
    return [(rng.standard_normal((d, h)) * scale / np.sqrt(d)).astype(F32),
            (rng.standard_normal((h, d)) * scale / np.sqrt(h)).astype(F32)]


class Adam:
    """Adam (Kingma & Ba) on a list of fp32 arrays, in place."""

    def __init__(self, params: list[np.ndarray], lr: float, b1=0.9, b2=0.999, eps=1e-8):
        self.p, self.lr, self.b1, self.b2, self.eps = params, lr, b1, b2, eps
        self.m = [np.zeros_like(x) for x in params]
        self.v = [np.zeros_like(x) for x in params]
        self.t = 0

    def step(self, grads: list[np.ndarray]) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, g, m, v in zip(self.p, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


class MoE:
    """One rank's part: the router (replicated), its own expert, a teacher."""

    def __init__(self, comm, ctrl, cfg: MoEConfig):
        """``ctrl``: a communicator of the same ranks for the counts and the
        loss (not model traffic)."""
        self.comm, self.ctrl, self.cfg = comm, ctrl, cfg
        n, d, h = comm.size, cfg.d, cfg.hidden
        rng = np.random.default_rng(cfg.seed)          # the same on every rank
        self.router = (rng.standard_normal((d, n)) * 0.1).astype(F32)
        experts = [_mlp(rng, d, h) for _ in range(n)]
        self.expert = experts[comm.rank]
        teacher = np.random.default_rng(cfg.seed + 7919)
        self.t_router = teacher.standard_normal((d, n)).astype(F32)
        self.t_experts = [_mlp(teacher, d, h) for _ in range(n)]
        self.opt = Adam([self.router, *self.expert], cfg.lr)
        self.moved = np.zeros(3, np.int64)  # tokens sent off-rank, received, steps

    def data(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's tokens of ``step`` and the teacher's answers."""
        cfg, n = self.cfg, self.comm.size
        rng = np.random.default_rng([cfg.seed, step, self.comm.rank])
        mine = cfg.batch // n + (self.comm.rank < cfg.batch % n)
        x = rng.standard_normal((mine, cfg.d)).astype(F32)
        z = x @ self.t_router
        k = z.argmax(1)
        p = _softmax(z)[np.arange(len(x)), k]
        y = np.empty_like(x)
        for e in range(n):
            sel = k == e
            w1, w2 = self.t_experts[e]
            y[sel] = p[sel, None] * (np.maximum(x[sel] @ w1, 0) @ w2)
        return x, y

    def step(self, step: int) -> float:
        comm, cfg, n, r = self.comm, self.cfg, self.comm.size, self.comm.rank
        alg = cfg.algorithm
        x, y = self.data(step)
        # 1. route (top-1), tokens sorted by expert, to the experts' ranks
        z = x @ self.router
        prob = _softmax(z)
        k = z.argmax(1)
        order = np.argsort(k, kind="stable")
        send = np.bincount(k, minlength=n)
        xs = x[order]
        # the tokens each rank will send this one (the reverse trip needs them too)
        recv_counts = self.ctrl.all_to_all(send.astype(np.int64).reshape(n, 1)).reshape(-1)
        got = comm.all_to_all_v(xs, send, recv_counts, algorithm=alg)
        # 2. the expert on its tokens, and the outputs back
        w1, w2 = self.expert
        pre = got @ w1
        hid = np.maximum(pre, 0)
        out = hid @ w2
        back = comm.all_to_all_v(out, recv_counts, send, algorithm=alg)
        e_out = np.empty_like(back)
        e_out[order] = back
        g = prob[np.arange(len(x)), k]
        yhat = g[:, None] * e_out
        # 3. loss over every rank's tokens, and the gradients
        total = cfg.batch * cfg.d
        diff = yhat - y
        loss = self.ctrl.all_reduce(np.array([float((diff * diff).sum())]))[0] / total
        dyhat = (2.0 / total) * diff
        de = g[:, None] * dyhat                                      # to the experts
        dg = (dyhat * e_out).sum(1)
        dz = -prob * (g * dg)[:, None]
        dz[np.arange(len(x)), k] += g * dg
        d_router = comm.all_reduce((x.T @ dz).astype(F32), algorithm="ring" if n > 1 else None)
        d_out = comm.all_to_all_v(de[order], send, recv_counts, algorithm=alg)
        d_w2 = hid.T @ d_out
        d_hid = (d_out @ w2.T) * (pre > 0)
        d_w1 = got.T @ d_hid
        # 4. Adam on the router (the same gradient everywhere) and this expert
        self.opt.step([d_router, d_w1.astype(F32), d_w2.astype(F32)])
        self.moved += (len(x) - send[r], len(got) - recv_counts[r], 1)
        return float(loss)

    def traffic(self) -> dict:
        """Per step and rank, from the routing this rank saw: the bytes of the
        formula (module docstring) against comm.traffic's."""
        cfg, n = self.cfg, self.comm.size
        s, rcv, steps = (int(v) for v in self.moved)
        a2a = (2 * s + rcv) * cfg.d * 4 / steps
        router = 2 * (n - 1) / n * cfg.d * n * 4 if n > 1 else 0.0
        uniform = 3 * (n - 1) / n * (cfg.batch / n) * cfg.d * 4
        return {"all_to_all_v": a2a, "router_all_reduce": router, "uniform_all_to_all_v": uniform}


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def train(comm, cfg: MoEConfig, progress: bool = True, json_path: str | None = None) -> dict:
    """Train for ``cfg.steps`` steps; rank 0 prints (and writes) the report:
    losses, samples/s, and traffic per step against the formula."""
    cfg.check(comm.size)
    ctrl = comm.split(0)
    m = MoE(comm, ctrl, cfg)
    m.step(0)  # warm-up (the report starts after it)
    m.moved[:] = 0
    before, losses, t0 = comm.traffic, [], time.perf_counter()
    for s in range(1, cfg.steps + 1):
        losses.append(m.step(s))
        if progress and comm.rank == 0:
            print(f"\rstep {s}/{cfg.steps} loss {losses[-1]:.5f}", end="", flush=True)
    wall = time.perf_counter() - t0
    moved = comm.traffic - before
    mine = np.array([moved.sent_bytes / cfg.steps, *m.traffic().values()])
    every = comm.all_gather(mine)
    rep = {"strategy": "moe", "ranks": comm.size, "tokens_per_step": cfg.batch, "d": cfg.d,
           "hidden": cfg.hidden, "losses": losses,
           "samples_per_s": cfg.batch * cfg.steps / wall,
           "traffic": {"convention": "sent",
                       "measured_bytes_per_rank": every[:, 0].tolist(),
                       "all_to_all_v_bytes_per_rank": every[:, 1].tolist(),
                       "router_all_reduce_bytes_per_rank": every[:, 2].tolist(),
                       "uniform_all_to_all_v_bytes_per_rank": every[:, 3].tolist()}}
    if comm.rank == 0:
        if progress:
            print()
        print(f"# moe: N={comm.size} experts, {cfg.batch} tokens a step, d={cfg.d}, "
              f"hidden={cfg.hidden}: loss {losses[0]:.5f} -> {losses[-1]:.5f}, "
              f"{rep['samples_per_s']:.0f} tokens/s")
        print("# bytes sent per step and rank: measured; the formula (2·S_r + R_r)·d·4 + "
              "2(N-1)/N·d·E·4 from this run's routing; and under uniform routing")
        for r in range(comm.size):
            meas, a2a, router = every[r, 0], every[r, 1], every[r, 2]
            print(f"{r:>4} {meas:12.0f} {a2a + router:12.0f} {every[r, 3] + router:12.0f}")
        if json_path:
            with open(json_path, "w") as f:
                json.dump(rep, f, indent=1)
    ctrl.close()
    return rep
