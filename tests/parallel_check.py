"""Pipeline, tensor and grid checks under mpiexec: ``python tests/parallel_check.py OUT.json``.

For each layout of the world (pipeline with each schedule, tensor, and the
grids that fit N), the gradients of the first step and the weights after
three Adam steps equal those of one rank training the unsplit model (rank 0
trains it alone on a communicator of its own); and the report of a short run
gives the traffic per layer and group and the peak activations, which
tests/test_parallel.py compares with the formulas.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from launch import finish  # noqa: E402
from trainer.grid import Grid, GridConfig, _gather_json, train  # noqa: E402
from trainer.lm import LMConfig  # noqa: E402

MODEL = LMConfig(vocab=67, d=16, hidden=37, blocks=8, seed=5)


def layouts(n: int):
    out = [dict(pp=n, schedule=s) for s in ("gpipe", "1f1b", "interleaved")]
    out += [dict(tp=n)]
    if n == 4:
        out += [dict(dp=2, pp=2), dict(dp=2, tp=2), dict(tp=2, pp=2, schedule="interleaved")]
    return out


def config(**kw) -> GridConfig:
    base = dict(micro_batches=4, chunks=2, steps=3, batch=32, lr=3e-3, model=MODEL)
    base.update(kw)
    return GridConfig(**base)


def weights(comm, cfg: GridConfig):
    """(first step's gradients, weights after cfg.steps steps), shard by shard."""
    g = Grid(comm, cfg)
    grads, params = {}, {}
    for s in range(cfg.steps):
        g.step(s)
        if s == 0:
            grads = {k: (ly.grads[k].tolist(), _sl(ly.slices[k])) for ly in g.layers for k in ly.params}
    params = {k: (p.tolist(), _sl(sl)) for k, (p, sl) in g.shards().items()}
    g.close()
    return grads, params


def _sl(index) -> list:
    return [[s.start, s.stop] for s in index]


def assemble(parts: list[dict], full: dict) -> dict:
    out = {k: np.full_like(v, np.nan) for k, v in full.items()}
    for part in parts:
        for k, (arr, sl) in part.items():
            out[k][tuple(slice(a, b) for a, b in sl)] = np.array(arr, np.float32)
    return out


def main() -> int:
    out_path = sys.argv[1]
    comm = cc.init()
    n, r = comm.size, comm.rank
    solo = comm.split(0 if r == 0 else -1)
    ref = None
    if solo is not None:
        ref = weights(solo, config())
    full = MODEL.full_params()
    results = []
    for kw in layouts(n):
        cfg = config(**kw)
        grads, params = weights(comm, cfg)
        allg, allp = _gather_json(comm, grads), _gather_json(comm, params)
        rep = train(comm, config(**kw), progress=False, table=False)
        if r == 0:
            rg, rp = assemble([ref[0]], full), assemble([ref[1]], full)
            gg, gp = assemble(allg, full), assemble(allp, full)
            # np.max, not max(): a NaN (a weight no rank gathered) anywhere
            # makes the difference NaN, which fails every comparison
            gdiff = _largest(np.max(np.abs(gg[k] - rg[k])) / (np.max(np.abs(rg[k])) + 1e-30)
                             for k in full)
            pdiff = _largest(np.max(np.abs(gp[k] - rp[k])) for k in full)
            moved = _largest(np.max(np.abs(rp[k] - full[k])) for k in full)
            results.append({"layout": kw, "n": n, "grad_rel_diff": gdiff, "param_diff": pdiff,
                            "param_moved": moved, "lr": cfg.lr,
                            "missing": int(sum(np.isnan(gg[k]).sum() for k in full)),
                            "report": rep})
    return finish(out_path, results, r, solo, comm)


def _largest(values) -> float:
    """The largest of ``values``, NaN if any is NaN (Python's max() skips a
    NaN that is not first)."""
    return float(np.max(np.array(list(values), np.float64)))


if __name__ == "__main__":
    sys.exit(main())
