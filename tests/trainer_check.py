"""Trainer checks under mpiexec: ``python tests/trainer_check.py OUT.json [transport]``.

For each strategy, in fp16 and in bf16, 20 steps on a small model with
uneven padding give the same fp32 master weights as one rank alone (rank 0
trains the reference, in the same half type, on a communicator of its own); the measured traffic and model-state memory per
rank equal the formulas of trainer.claims up to padding; the asynchronous
parameter server still brings the loss down.  Rank 0 writes what it measured
to OUT.json; tests/test_trainer.py asserts on it.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from launch import finish  # noqa: E402
from trainer.model import MLP, ModelConfig  # noqa: E402
from trainer.strategies import STRATEGIES  # noqa: E402
from trainer.strategies.base import TrainConfig  # noqa: E402
from trainer.train import run  # noqa: E402

# 5 layers of odd widths (Ψ = 5,376): the buckets and layers are not multiples of 3 or 4.
MODEL = ModelConfig(d_in=19, width=37, layers=5, d_out=11, seed=3)
STEPS = 20


def config(strategy: str, **kw) -> TrainConfig:
    base = dict(strategy=strategy, steps=STEPS, batch=96, lr=1e-3, bucket_mb=0.004, model=MODEL)
    base.update(kw)
    return TrainConfig(**base)


def masters(comm, cfg: TrainConfig) -> tuple[dict, list[np.ndarray]]:
    """Train through train.run; returns (report on rank 0, every rank's copy
    of the fp32 master weights)."""
    holder = {}
    real = STRATEGIES[cfg.strategy]

    class Keep(real):  # the strategy as run() builds it, kept to read its weights
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            holder["s"] = self
    STRATEGIES[cfg.strategy] = Keep
    try:
        rep = run(cfg, comm, progress=False, table=False)
        return rep, holder["s"].master_params()
    finally:
        STRATEGIES[cfg.strategy] = real


def rep_losses(rep: dict) -> list:
    return [s["loss"] for s in rep["steps"]]


def main() -> int:
    out_path = sys.argv[1]
    transport = sys.argv[2] if len(sys.argv) > 2 else "auto"
    comm = cc.init(transport=transport)
    n, r = comm.size, comm.rank
    cases = [("ddp", {}), ("ddp", {"accum": 2}), ("ddp", {"overlap": False}),
             ("zero1", {}), ("zero2", {}), ("zero2", {"accum": 2}), ("zero3", {}),
             ("zero3", {"accum": 3}), ("ps", {}),
             ("ddp", {"dtype": "bf16"}), ("zero1", {"dtype": "bf16"}),
             ("zero2", {"dtype": "bf16", "accum": 2}), ("zero3", {"dtype": "bf16"}),
             ("ps", {"dtype": "bf16"}),
             # Adam with a large epsilon is momentum SGD: the update scales with
             # the gradient, so a gradient N times too small (averaged twice) shows
             ("ddp", {"adam_eps": 1.0, "lr": 0.05}), ("zero2", {"adam_eps": 1.0, "lr": 0.05})]
    results = []
    refs = {}
    solo = comm.split(0 if r == 0 else -1)  # rank 0 alone: the one-rank reference
    for name, kw in cases:
        cfg = config(name, **kw)
        key = cfg.accum, cfg.dtype, cfg.adam_eps, cfg.lr
        if key not in refs and solo is not None:
            ref_cfg = config("ddp", accum=cfg.accum, dtype=cfg.dtype, adam_eps=cfg.adam_eps,
                             lr=cfg.lr)
            (ref_rep, ref) = masters(solo, ref_cfg)
            refs[key] = (ref, ref_rep)
        rep, got = masters(comm, cfg)
        # every rank's copy of the weights, not rank 0's alone: the replicas
        # of data parallelism must agree bit for bit
        mine = np.concatenate([a.ravel() for a in got]).astype(np.float32)
        every = comm.gather(mine)
        if r == 0:
            ref, ref_rep = refs[key]
            g, f, i = (np.concatenate([a.ravel() for a in p])
                       for p in (got, ref, MLP(MODEL).init_params()))
            results.append({"strategy": name, "options": kw, "n": n, "lr": cfg.lr,
                            "max_abs_diff": float(np.max(np.abs(every - f))),
                            "replica_diff": float(np.max(np.abs(every - every[0]))),
                            "loss_diff": float(np.max(np.abs(
                                np.array(rep_losses(rep)) - np.array(rep_losses(ref_rep))))),
                            "max_change": float(np.max(np.abs(f - i))),
                            # |θ_N - θ_1| / |θ_1 - θ_0|: the difference against how far training went
                            "rel_diff": float(np.linalg.norm(g - f) / np.linalg.norm(f - i)),
                            "losses": [s["loss"] for s in rep["steps"]],
                            "ref_losses": [s["loss"] for s in ref_rep["steps"]],
                            "report": {k: rep[k] for k in ("traffic", "memory", "padding_elements", "groups",
                                                           "params", "accum", "staleness")}})
    # the asynchronous server: staleness 2, more steps; the loss must still fall
    cfg = config("ps", staleness=2, steps=60)
    rep, _ = masters(comm, cfg)
    if r == 0:
        results.append({"strategy": "ps", "options": {"staleness": 2}, "n": n,
                        "losses": [s["loss"] for s in rep["steps"]],
                        "report": {k: rep[k] for k in ("traffic", "memory", "padding_elements", "groups",
                                                       "params", "accum", "staleness")}})
    return finish(out_path, results, r, solo, comm)


if __name__ == "__main__":
    sys.exit(main())
