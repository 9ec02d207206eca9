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


SUBCOMMANDS = """\
subcommands (no mpiexec; each has its own --help):
  memory    model-state memory per device of DDP and each ZeRO stage, for any
            Ψ, N and K: python -m trainer memory --params 7.5e9 --ranks 64
  scaling   samples/s and speed-up at N = 1, 2, 4 (it runs mpiexec itself),
            and DDP's step with the all-reduce overlapped or not:
            python -m trainer scaling --strategy ddp --ranks 1,2,4
"""


def train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer",
                                usage="mpiexec -n N python -m trainer [options]\n"
                                      "       python -m trainer {memory,scaling} [options]",
                                description="Data-parallel training on the collectives "
                                            "(under mpiexec), with traffic and memory\n"
                                            "measured against the formulas.",
                                epilog=SUBCOMMANDS,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", default="ddp",
                   choices=["ps", "ddp", "zero1", "zero2", "zero3", "pipeline", "tensor", "moe"],
                   help="parameter server, DDP, ZeRO stage 1-3, the pipeline or "
                        "tensor-parallel model below, or a mixture of experts, one expert "
                        "a rank, its tokens routed with all_to_all_v (default %(default)s)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default %(default)s)")
    p.add_argument("--batch", type=int, default=None,
                   help="global samples per step (default 64; 512 for pipeline, tensor; "
                        "1024 tokens for moe)")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per step (default %(default)s)")
    p.add_argument("--lr", type=float, default=None,
                   help="Adam's learning rate (default 1e-3; 1e-2 for moe)")
    p.add_argument("--bucket-mb", type=float, default=4.0,
                   help="gradient bucket size in MB (ddp, zero1, zero2; default %(default)g)")
    p.add_argument("--no-overlap", action="store_true",
                   help="start the gradient collectives after backward instead of during it "
                        "(default: during)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sync", action="store_true",
                   help="ps: staleness 0, every step waits for its update (default: off, "
                        "--staleness decides)")
    g.add_argument("--staleness", type=int, default=0,
                   help="ps: workers compute with weights at most S updates old "
                        "(default %(default)s)")
    p.add_argument("--dtype", choices=["fp16", "bf16"],  # trainer.mixed.HALF
                   help="half type of parameters and gradients (ps, ddp, zero1-3): fp16 "
                        "with dynamic loss scaling, or bf16 without (default fp16)")
    p.add_argument("--loss-scale", type=float, default=2.0 ** 12,
                   help="initial loss scale of fp16 (default %(default)g)")
    p.add_argument("--layers", type=int, default=6,
                   help="linear layers of the MLP (default %(default)s)")
    p.add_argument("--width", type=int, default=1024,
                   help="units of its hidden layers (default %(default)s)")
    p.add_argument("--d-in", type=int, default=256, help="input features (default %(default)s)")
    p.add_argument("--d-out", type=int, default=256, help="outputs (default %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the data and the initial weights (default %(default)s)")
    p.add_argument("--algorithm", default="ring",
                   help="algorithm of every collective ('auto' lets the library choose; "
                        "default %(default)s)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "mpi", "hier"],
                   help="transport of the library (default %(default)s)")
    g = p.add_argument_group("pipeline, tensor and the process grid (a small next-token model)")
    g.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved"],
                   help="pipeline schedule (default %(default)s)")
    g.add_argument("--micro-batches", type=int, default=4,
                   help="m, per step (default %(default)s)")
    g.add_argument("--chunks", type=int, default=2,
                   help="v, model chunks per rank (interleaved; default %(default)s)")
    g.add_argument("--dp", type=int, help="data-parallel replicas (default: 1)")
    g.add_argument("--tp", type=int, help="tensor-parallel ranks (default: N for tensor, else 1)")
    g.add_argument("--pp", type=int, help="pipeline stages (default: N for pipeline, else 1)")
    g.add_argument("--vocab", type=int, default=256, help="vocabulary size (default %(default)s)")
    g.add_argument("--d-model", type=int, default=256,
                   help="width of the residual stream (default %(default)s)")
    g.add_argument("--ffn", type=int, default=1024,
                   help="hidden units of each block (default %(default)s)")
    g.add_argument("--blocks", type=int, default=8,
                   help="residual MLP blocks (default %(default)s)")
    g.add_argument("--timeline", metavar="FILE.png",
                   help="draw each rank's forward, backward and idle time (needs matplotlib; "
                        "default: none)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (default: none)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line (default: rank 0 shows one)")
    return p


def grid_config_from(a, n: int):
    from .grid import GridConfig
    from .lm import LMConfig
    dp, tp, pp = a.dp, a.tp, a.pp
    if dp is None and tp is None and pp is None:
        dp, tp, pp = 1, (n if a.strategy == "tensor" else 1), (n if a.strategy == "pipeline" else 1)
    else:
        dp, tp, pp = dp or 1, tp or 1, pp or 1
    return GridConfig(dp=dp, tp=tp, pp=pp, schedule=a.schedule, micro_batches=a.micro_batches,
                      chunks=a.chunks, steps=a.steps, batch=a.batch or 512, lr=a.lr,
                      algorithm=None if a.algorithm == "auto" else a.algorithm,
                      model=LMConfig(vocab=a.vocab, d=a.d_model, hidden=a.ffn, blocks=a.blocks,
                                     seed=a.seed))


def config_from(a):
    from .model import ModelConfig
    from .strategies.base import TrainConfig
    return TrainConfig(strategy=a.strategy, steps=a.steps, batch=a.batch or 64, accum=a.accum, lr=a.lr,
                       bucket_mb=a.bucket_mb, overlap=not a.no_overlap,
                       staleness=0 if a.sync else a.staleness, loss_scale=a.loss_scale,
                       dtype=a.dtype or "fp16", algorithm=a.algorithm,
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
    if a.strategy == "moe":
        return _moe(a)
    if a.lr is None:
        a.lr = 1e-3
    if a.strategy in ("pipeline", "tensor"):
        if a.dtype is not None:  # their parameters, activations and gradients are fp32
            train_parser().error("--dtype applies to ps, ddp and zero1-3; pipeline and "
                                 "tensor train in fp32")
        return _grid(a)
    cfg = config_from(a)
    try:
        cfg.check()
    except ValueError as e:
        train_parser().error(str(e))
    from .train import run
    sys.setswitchinterval(SWITCH_INTERVAL)
    run(cfg, progress=not a.quiet, json_path=a.json, transport=a.transport)
    return 0


def _moe(a) -> int:
    import collectives as cc
    from .moe import MoEConfig, train
    cfg = MoEConfig(steps=a.steps, batch=a.batch or 1024, lr=a.lr or 1e-2, seed=a.seed,
                    algorithm=None if a.algorithm in ("auto", "ring") else a.algorithm)
    with cc.init(transport=a.transport) as comm:
        if not _fits(cfg, comm):
            return 2
        train(comm, cfg, progress=not a.quiet, json_path=a.json)
    return 0


def _fits(cfg, comm) -> bool:
    """``cfg.check(comm.size)``; where it refuses, rank 0 says why."""
    try:
        cfg.check(comm.size)
    except ValueError as e:
        if comm.rank == 0:
            print(f"python -m trainer: error: {e}", file=sys.stderr)
        return False
    return True


def _timeline_missing() -> str | None:
    """Why ``--timeline`` cannot draw (matplotlib does not import), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"--timeline needs matplotlib (pip install '.[plot]'): {e}"
    return None


def _grid(a) -> int:
    import collectives as cc
    from .grid import train
    if a.timeline:
        missing = _timeline_missing()
        if missing:  # every rank stops; rank 0 says why
            from mpi4py import MPI
            if MPI.COMM_WORLD.Get_rank() == 0:
                print(f"python -m trainer: error: {missing}", file=sys.stderr)
            return 2
    sys.setswitchinterval(SWITCH_INTERVAL)
    with cc.init(transport=a.transport) as comm:
        cfg = grid_config_from(a, comm.size)
        if not _fits(cfg, comm):
            return 2
        train(comm, cfg, progress=not a.quiet, json_path=a.json, timeline_path=a.timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
