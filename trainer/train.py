"""The training loop, its live progress line, and the measured-vs-predicted report."""
from __future__ import annotations

import json
import sys
import time

import numpy as np

import collectives as cc

from . import claims
from .layout import live_bytes
from .mixed import half_dtype
from .model import MLP
from .strategies import STRATEGIES
from .strategies.base import TrainConfig


def run(cfg: TrainConfig, comm=None, *, progress: bool = True, json_path: str | None = None,
        table: bool = True, transport: str = "auto") -> dict:
    """Train ``cfg.steps`` steps; returns the report (complete on rank 0)."""
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {cfg.strategy!r}")
    own = comm is None
    comm = comm or cc.init(transport=transport)
    ctrl = comm.split(0)  # losses, overflow flags and the report: not model traffic
    try:
        return _run(cfg, comm, ctrl, progress, json_path, table)
    finally:
        ctrl.close()
        if own:
            comm.close()


def _run(cfg, comm, ctrl, progress, json_path, table) -> dict:
    model = MLP(cfg.model)
    strat = STRATEGIES[cfg.strategy](comm, ctrl, model, cfg)
    ctrl.barrier()
    t0, c0 = comm.traffic, ctrl.traffic
    steps, start = [], time.perf_counter()
    live = progress and comm.rank == 0
    for s in range(cfg.steps):
        t = time.perf_counter()
        loss = strat.train_step(s)
        dt = time.perf_counter() - t
        steps.append({"loss": loss, "time_s": dt})
        if live:
            _progress(s, cfg, loss, dt)
    strat.finish()
    wall = time.perf_counter() - start
    if live:
        sys.stdout.write("\n")
    moved, ctl = comm.traffic - t0, ctrl.traffic - c0
    mem = live_bytes(a for arrs in strat.state().values() for a in arrs)
    mine = np.array([moved.sent_bytes, moved.recv_bytes, ctl.sent_bytes, ctl.recv_bytes, mem,
                     moved.inter_sent_bytes, moved.inter_recv_bytes, comm.host], np.float64)
    every = ctrl.gather(mine, root=0)
    report = None
    if comm.rank == 0:
        report = _report(cfg, strat, model, comm.size, steps, wall, every)
        if comm.hosts > 1:
            report["inter_host"] = _inter_host(cfg, model, comm, every, report)
        if table:
            print_report(report)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(report, f, indent=1)
    return report if report is not None else {"steps": steps}


def _progress(s, cfg, loss, dt) -> None:
    lv = "   -   " if loss is None else f"{loss:.5f}"
    line = (f"step {s + 1:>5}/{cfg.steps}  loss {lv}  step {dt * 1e3:8.1f} ms  "
            f"{cfg.batch / dt:9.1f} samples/s")
    if sys.stdout.isatty():
        sys.stdout.write("\r" + line)
    elif (s + 1) % max(1, cfg.steps // 10) == 0 or s == 0:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _report(cfg, strat, model, n, steps, wall, every) -> dict:
    psi, T, lay = model.n_params, cfg.steps, strat.lay
    b = half_dtype(cfg.dtype).itemsize  # bytes per element on the wire
    conv = claims.traffic_convention(cfg.strategy)
    sent, recv = every[:, 0] / T, every[:, 1] / T
    measured = sent + recv if conv == "sent+recv" else sent
    pred_t = [claims.traffic(cfg.strategy, n, psi, b, r, cfg.accum, cfg.staleness, T)
              for r in range(n)]
    pred_m = [claims.memory(cfg.strategy, n, psi, 12, r, cfg.staleness) for r in range(n)]
    times = [s["time_s"] for s in steps[1:]] or [steps[0]["time_s"]]
    return {
        "strategy": cfg.strategy, "ranks": n, "params": psi, "dtype": cfg.dtype,
        "bytes_per_element": b,
        "padding_elements": lay.padding, "groups": len(lay.groups),
        "batch": cfg.batch, "accum": cfg.accum,
        "staleness": cfg.staleness, "overlap": cfg.overlap, "bucket_mb": cfg.bucket_mb,
        "steps": steps,
        "samples_per_s": cfg.batch / float(np.median(times)),
        "wall_s": wall,
        "loss_scale_skips": strat.scaler.skipped,
        "traffic": {"convention": conv,
                    "measured_bytes_per_rank": measured.tolist(),
                    "predicted_bytes_per_rank": pred_t,
                    "sent_bytes_per_rank": sent.tolist(), "recv_bytes_per_rank": recv.tolist(),
                    "control_bytes_per_rank": ((every[:, 2] + every[:, 3]) / T).tolist()},
        "memory": {"measured_bytes_per_rank": every[:, 4].tolist(),
                   "predicted_bytes_per_rank": pred_m},
    }


def _inter_host(cfg, model, comm, every, rep: dict) -> dict:
    """Bytes per step and rank to and from other hosts, beside the formula
    (claims.inter_traffic): the flat ring with ``--algorithm ring``, the
    hierarchical algorithms with ``auto`` on the "hier" transport where the
    default does not adapt (COLLECTIVES_ADAPT=0: an adapting default runs
    whichever is fastest, with no one formula)."""
    T, n, b = cfg.steps, comm.size, rep["bytes_per_element"]
    host_of = [int(h) for h in every[:, 7]]
    sent, recv = every[:, 5] / T, every[:, 6] / T
    conv = rep["traffic"]["convention"]
    measured = sent + recv if conv == "sent+recv" else sent
    auto = cfg.algorithm in (None, "auto")
    hier = comm.transport == "hier" and auto and not comm.adaptive
    known = cfg.strategy == "ps" or hier or cfg.algorithm == "ring"
    pred = [claims.inter_traffic(cfg.strategy, host_of, model.n_params, b, r, cfg.accum, hier,
                                 cfg.staleness, T) if known else None for r in range(n)]
    return {"convention": conv, "host_of_rank": host_of,
            "algorithms": "hierarchical" if hier else "adaptive" if auto else cfg.algorithm,
            "measured_bytes_per_rank": measured.tolist(), "predicted_bytes_per_rank": pred,
            "sent_bytes_per_rank": sent.tolist(), "recv_bytes_per_rank": recv.tolist()}


def print_report(rep: dict) -> None:
    n, psi = rep["ranks"], rep["params"]
    tr, me = rep["traffic"], rep["memory"]
    print(f"# {rep['strategy']}: N={n}  Ψ={psi:,} params (+{rep['padding_elements']} padding)  "
          f"{rep['dtype']} b={rep['bytes_per_element']}  batch={rep['batch']}  accum={rep['accum']}  "
          f"{rep['samples_per_s']:.1f} samples/s  final loss "
          f"{_last_loss(rep['steps'])}")
    print(f"# traffic per step and rank ({tr['convention']}), memory = model states per rank")
    print(f"{'rank':>4} {'sent MB':>10} {'recv MB':>10} {'measured MB':>12} {'predicted MB':>13} "
          f"{'ratio':>7} {'ctrl B':>7} {'mem MB':>9} {'pred MB':>9} {'ratio':>7}")
    for r in range(n):
        mt, pt = tr["measured_bytes_per_rank"][r], tr["predicted_bytes_per_rank"][r]
        mm, pm = me["measured_bytes_per_rank"][r], me["predicted_bytes_per_rank"][r]
        print(f"{r:>4} {tr['sent_bytes_per_rank'][r] / 1e6:10.3f} {tr['recv_bytes_per_rank'][r] / 1e6:10.3f} "
              f"{mt / 1e6:12.3f} {pt / 1e6:13.3f} {_ratio(mt, pt):>7} "
              f"{tr['control_bytes_per_rank'][r]:7.0f} {mm / 1e6:9.3f} {pm / 1e6:9.3f} {_ratio(mm, pm):>7}")
    if "inter_host" in rep:
        print_inter_host(rep["inter_host"])


def print_inter_host(ih: dict) -> None:
    hosts = max(ih["host_of_rank"]) + 1
    print(f"# to and from other hosts per step and rank ({ih['convention']}; {hosts} hosts, "
          f"algorithms: {ih['algorithms']})")
    print(f"{'rank':>4} {'host':>4} {'inter sent MB':>13} {'inter recv MB':>13} "
          f"{'measured MB':>12} {'predicted MB':>13} {'ratio':>7}")
    for r, h in enumerate(ih["host_of_rank"]):
        mt, pt = ih["measured_bytes_per_rank"][r], ih["predicted_bytes_per_rank"][r]
        print(f"{r:>4} {h:>4} {ih['sent_bytes_per_rank'][r] / 1e6:13.3f} "
              f"{ih['recv_bytes_per_rank'][r] / 1e6:13.3f} {mt / 1e6:12.3f} "
              f"{'-' if pt is None else format(pt / 1e6, '13.3f'):>13} "
              f"{'-' if pt is None else _ratio(mt, pt):>7}")


def _ratio(a, b) -> str:
    return "-" if b == 0 and a == 0 else ("inf" if b == 0 else f"{a / b:.4f}")


def _last_loss(steps) -> str:
    for s in reversed(steps):
        if s["loss"] is not None:
            return f"{s['loss']:.5f}"
    return "-"
