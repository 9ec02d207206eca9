"""python -m trainer [train options] | memory [...] | scaling [...]

    mpiexec -n 4 python -m trainer --strategy zero2 --steps 100 --json out.json
    python -m trainer memory --params 7.5e9 --ranks 64 --k 12
    python -m trainer scaling --strategy ddp --ranks 1,2,4
"""
from __future__ import annotations

import argparse
import os
import sys

# One BLAS thread per rank unless told otherwise: ranks share the cores, and
# the scaling figures compare one core's work with N cores'.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


# The collectives of an overlapped step run on the communicator's worker
# thread, which needs the GIL between numpy calls; a short switch interval
# lets it in while the main thread runs backward (the default is 5 ms).
SWITCH_INTERVAL = 0.0005


def train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer",
                                description="Data-parallel training on the collectives "
                                            "(under mpiexec), with traffic and memory "
                                            "measured against the formulas.")
    p.add_argument("--strategy", default="ddp", choices=["ps", "ddp", "zero1", "zero2", "zero3"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64, help="global samples per step")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket-mb", type=float, default=4.0, help="gradient bucket size (ddp, zero1, zero2)")
    p.add_argument("--no-overlap", action="store_true",
                   help="start the gradient collectives after backward instead of during it")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sync", action="store_true", help="ps: every step waits (staleness 0)")
    g.add_argument("--staleness", type=int, default=0,
                   help="ps: workers compute with weights at most S updates old")
    p.add_argument("--loss-scale", type=float, default=2.0 ** 12, help="initial loss scale")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--d-in", type=int, default=256)
    p.add_argument("--d-out", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algorithm", default="ring",
                   help="algorithm of every collective ('auto' lets the library choose)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "mpi"])
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def config_from(a):
    from .model import ModelConfig
    from .strategies.base import TrainConfig
    return TrainConfig(strategy=a.strategy, steps=a.steps, batch=a.batch, accum=a.accum, lr=a.lr,
                       bucket_mb=a.bucket_mb, overlap=not a.no_overlap,
                       staleness=0 if a.sync else a.staleness, loss_scale=a.loss_scale,
                       algorithm=a.algorithm,
                       model=ModelConfig(d_in=a.d_in, width=a.width, layers=a.layers,
                                         d_out=a.d_out, seed=a.seed))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "memory":
        from .memory import main as mem
        return mem(argv[1:])
    if argv and argv[0] == "scaling":
        from .scaling import main as sc
        return sc(argv[1:])
    a = train_parser().parse_args(argv)
    cfg = config_from(a)
    try:
        cfg.check()
    except ValueError as e:
        train_parser().error(str(e))
    from .train import run
    sys.setswitchinterval(SWITCH_INTERVAL)
    run(cfg, progress=not a.quiet, json_path=a.json, transport=a.transport)
    return 0


if __name__ == "__main__":
    sys.exit(main())
