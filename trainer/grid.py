"""A data × tensor × pipeline process grid, and its training loop.

N = D·T·P ranks; rank = (pipeline index · D + data index) · T + tensor index,
so the T ranks of a tensor group are neighbours.  ``comm.split`` builds the
three groups every rank belongs to: ``tp`` (same stage and replica), ``pp``
(same replica and tensor index, ordered by stage) and ``dp`` (same stage and
tensor index).  Each step: the replica's share of the global batch goes
through the pipeline schedule (with the tensor-parallel layers inside each
stage), the gradients are all-reduced over ``dp``, and every rank runs Adam
(fp32) on the parameter shards it holds: its parameters and gradients are
two flat buffers, the parameters being Adam's master weights.  ``pipeline`` and ``tensor`` are
this grid with P = N or T = N.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from . import pipeline as pl
from .layout import split_rows
from .lm import LMConfig
from .mixed import F32, Adam
from .tensor_parallel import TP, build_layers, traffic_formula


@dataclass
class GridConfig:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    schedule: str = "1f1b"
    micro_batches: int = 4
    chunks: int = 1            # model chunks per rank (interleaved)
    steps: int = 10
    batch: int = 512           # global rows per step
    # Adam's first update moves every weight by lr (times the sign of its
    # gradient); at 3e-3 that makes the second step's loss five times the first
    lr: float = 1e-3
    algorithm: str = "ring"
    model: LMConfig = field(default_factory=LMConfig)

    def check(self, n: int) -> None:
        if self.dp * self.tp * self.pp != n:
            raise ValueError(f"--dp {self.dp} × --tp {self.tp} × --pp {self.pp} = "
                             f"{self.dp * self.tp * self.pp}, but there are {n} ranks")
        if self.schedule not in pl.SCHEDULES:
            raise ValueError(f"schedule must be one of {pl.SCHEDULES}, got {self.schedule!r}")
        v = self.chunks if self.schedule == "interleaved" else 1
        if self.model.blocks % (self.pp * v):
            raise ValueError(f"blocks ({self.model.blocks}) must be a multiple of "
                             f"pp × chunks ({self.pp * v})")
        if self.batch % self.dp or (self.batch // self.dp) < self.micro_batches:
            raise ValueError(f"batch {self.batch} must split into dp {self.dp} replicas of at "
                             f"least micro-batches ({self.micro_batches}) rows")
        if self.schedule == "interleaved" and self.micro_batches % self.pp:
            raise ValueError(f"interleaved needs micro-batches ({self.micro_batches}) to be a "
                             f"multiple of pp ({self.pp})")
        if self.model.vocab < self.tp or self.model.hidden < self.tp:
            raise ValueError("vocab and hidden must be at least tp")


class Grid:
    def __init__(self, comm, cfg: GridConfig):
        cfg.check(comm.size)
        self.comm, self.cfg = comm, cfg
        D, T, P = cfg.dp, cfg.tp, cfg.pp
        r = comm.rank
        self.t, self.d, self.s = r % T, (r // T) % D, r // (T * D)
        self.tp_comm = comm.split(self.s * D + self.d, key=self.t)
        self.dp_comm = comm.split(self.s * T + self.t, key=self.d)
        self.pp_comm = comm.split(self.d * T + self.t, key=self.s)
        # timelines and barriers: not the pipeline's own traffic
        self.pp_ctrl = comm.split(self.d * T + self.t, key=self.s)
        self.v = cfg.chunks if cfg.schedule == "interleaved" else 1
        tp = TP(self.tp_comm, cfg.algorithm)
        layers = build_layers(cfg.model, tp)
        embed, blocks, head = layers[0], layers[1:-1], layers[-1]
        stages = P * self.v
        per = cfg.model.blocks // stages
        chunks = []
        for c in range(self.v):
            st = c * P + self.s
            chunk = list(blocks[st * per:(st + 1) * per])
            if st == 0:
                chunk.insert(0, embed)
            if st == stages - 1:
                chunk.append(head)
            chunks.append(chunk)
        self.layers = [ly for ch in chunks for ly in ch]
        self.head = head if head in self.layers else None
        if self.head is not None:
            self.head.denom = cfg.batch
        self.pipe = pl.Pipeline(self.pp_comm, chunks, self.v)
        n = sum(p.size for ly in self.layers for p in ly.params.values())
        self.adam = Adam(np.empty(n, F32), cfg.lr)
        self.grads = np.zeros(n, F32)
        o = 0
        for ly in self.layers:
            o = ly.bind(self.adam.master, self.grads, o)

    # -- one step ----------------------------------------------------------------
    def step(self, step: int) -> tuple[float, list, float, float]:
        """Returns (this rank's loss sum, its timeline, start, end)."""
        cfg = self.cfg
        self.grads.fill(0)
        ids, tg = cfg.model.batch(step, cfg.batch)
        rb = split_rows(cfg.batch, cfg.dp)
        ids, tg = ids[rb[self.d]:rb[self.d + 1]], tg[rb[self.d]:rb[self.d + 1]]
        mb = split_rows(len(ids), cfg.micro_batches)
        ids_m = [ids[mb[i]:mb[i + 1]] for i in range(cfg.micro_batches)]
        tg_m = [tg[mb[i]:mb[i + 1]] for i in range(cfg.micro_batches)]
        self.pp_ctrl.barrier()
        start = time.perf_counter()
        loss = self.pipe.run(cfg.schedule, ids_m, tg_m, cfg.model.d)
        end = time.perf_counter()
        if self.dp_comm.size > 1:
            self.dp_comm.all_reduce(self.grads, out=self.grads, algorithm=cfg.algorithm)
        self.adam.step([(0, self.grads, None)], 1.0)
        return loss, list(self.pipe.timeline), start, end

    def shards(self) -> dict:
        """name -> (array, slices) of every parameter shard this rank holds."""
        return {k: (p, ly.slices[k]) for ly in self.layers for k, p in ly.params.items()}

    def close(self) -> None:
        for c in (self.tp_comm, self.dp_comm, self.pp_comm, self.pp_ctrl):
            c.close()


def train(comm, cfg: GridConfig, *, progress: bool = True, json_path: str | None = None,
          timeline_path: str | None = None, table: bool = True) -> dict | None:
    """Train; returns the report on rank 0 (None elsewhere)."""
    g = Grid(comm, cfg)
    ctrl = comm.split(0)
    try:
        return _train(comm, ctrl, g, cfg, progress, json_path, timeline_path, table)
    finally:
        ctrl.close()
        g.close()


def _train(comm, ctrl, g: Grid, cfg, progress, json_path, timeline_path, table):
    tr0 = {n: c.traffic for n, c in (("tp", g.tp_comm), ("pp", g.pp_comm), ("dp", g.dp_comm))}
    steps, bubbles, replays = [], [], []
    for s in range(cfg.steps):
        t = time.perf_counter()
        loss, tl, start, end = g.step(s)
        dt = time.perf_counter() - t
        mine = loss if (g.head is not None and g.t == 0) else 0.0
        tot = ctrl.all_reduce(np.array([mine]))
        steps.append({"loss": float(tot[0]) / cfg.batch, "time_s": dt})
        # the pipeline's timelines, gathered over the pipeline group of replica 0 / tensor 0
        stamps = np.array([(op == "B", c, i, t0, t1, cpu) for op, c, i, t0, t1, cpu in tl],
                          np.float64)
        allt = g.pp_ctrl.all_gather(stamps)
        span = g.pp_ctrl.all_gather(np.array([start, end]))
        tls = [[("B" if row[0] else "F", int(row[1]), int(row[2]), row[3], row[4], row[5])
                for row in a] for a in allt]
        b = pl.bubble(tls, float(span[:, 0].min()), float(span[:, 1].max()))
        bubbles.append(b)
        replays.append(pl.replay(tls, cfg.pp, g.v, cfg.micro_batches))
        if progress and comm.rank == 0:
            print(f"step {s + 1:>4}/{cfg.steps}  loss {steps[-1]['loss']:.4f}  "
                  f"step {dt * 1e3:7.1f} ms  {cfg.batch / dt:8.1f} samples/s  "
                  f"bubble {b['bubble']:.3f}", flush=True)
        if s == cfg.steps - 1 and timeline_path and comm.rank == 0:
            title = (f"{cfg.schedule}: p={cfg.pp}, m={cfg.micro_batches}"
                     + (f", v={g.v}" if g.v > 1 else ""))
            pl.plot_timeline(tls, float(span[:, 0].min()), timeline_path, title)
    T = cfg.steps
    moved = {n: (c.traffic - tr0[n]).sent_bytes / T
             for n, c in (("tp", g.tp_comm), ("pp", g.pp_comm), ("dp", g.dp_comm))}
    # per layer on tp: measured and formula, per step
    rows_dp = cfg.batch // cfg.dp
    layer_rows = []
    for ly in g.layers:
        f = traffic_formula(ly.name, cfg.tp, rows_dp, cfg.model.d)
        layer_rows.append({"layer": ly.name, "measured": {k: v / T for k, v in ly.sent.items()},
                           "predicted": f})
    pp_pred = _pp_formula(g, cfg, rows_dp)
    dp_pred = 2 * (cfg.dp - 1) / cfg.dp * g.grads.size * 4
    mine = {"rank": comm.rank, "coords": [g.d, g.t, g.s], "peak": g.pipe.peak,
            "peak_formula": pl.peak_formula(cfg.schedule, cfg.pp, g.s, cfg.micro_batches, g.v),
            "traffic": moved, "traffic_formula": {"pp": pp_pred, "dp": dp_pred},
            "layers": layer_rows}
    per_rank = _gather_json(ctrl, mine)
    if comm.rank != 0:
        return None
    skip = steps[1:] or steps
    rep = {"strategy": "grid", "ranks": comm.size, "dp": cfg.dp, "tp": cfg.tp, "pp": cfg.pp,
           "schedule": cfg.schedule, "micro_batches": cfg.micro_batches, "chunks": g.v,
           "batch": cfg.batch, "params": int(sum(p.size for p in cfg.model.full_params().values())),
           "model": asdict(cfg.model), "bytes_per_element": 4, "steps": steps,
           "samples_per_s": cfg.batch / float(np.median([s["time_s"] for s in skip])),
           "bubble": {"measured": float(np.median([b["bubble"] for b in bubbles[1:] or bubbles])),
                      "replayed": float(np.median([b["bubble"] for b in replays[1:] or replays])),
                      "idle_fraction": float(np.median([b["idle_fraction"]
                                                        for b in bubbles[1:] or bubbles])),
                      "formula": pl.bubble_formula(cfg.schedule, cfg.pp, cfg.micro_batches, g.v)},
           "per_rank": per_rank}
    if table:
        print_report(rep)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rep, f, indent=1)
    return rep


def _pp_formula(g: Grid, cfg, rows_dp: int) -> float:
    """Bytes this rank sends on the pipeline group per step: each of its
    virtual stages sends every micro-batch's activations forward (unless it
    is the last) and its input's gradient back (unless it is the first)."""
    P, v = cfg.pp, g.v
    last = P * v - 1
    per_mb = rows_dp * cfg.model.d * 4
    out = 0.0
    for c in range(v):
        s = c * P + g.s
        out += (s < last) * per_mb + (s > 0) * per_mb
    return out


def _gather_json(ctrl, obj) -> list | None:
    """Every rank's dict to rank 0 (as JSON bytes in uint8 arrays)."""
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = ctrl.gather(np.array([data.size]), root=0)
    width = int(ctrl.all_reduce(np.array([data.size]), op="max")[0])
    buf = np.zeros(width, np.uint8)
    buf[:data.size] = data
    allb = ctrl.gather(buf, root=0)
    if ctrl.rank != 0:
        return None
    return [json.loads(bytes(allb[i, :int(sizes[i, 0])]).decode()) for i in range(ctrl.size)]


def print_report(rep: dict) -> None:
    b = rep["bubble"]
    kind = rep["schedule"] if rep["pp"] > 1 else ("tensor" if rep["tp"] > 1 else "data")
    print(f"# {kind}: N={rep['ranks']} (dp {rep['dp']} × tp {rep['tp']} × pp {rep['pp']})"
          f"  m={rep['micro_batches']}  v={rep['chunks']}  Ψ={rep['params']:,}  "
          f"batch={rep['batch']}  {rep['samples_per_s']:.1f} samples/s  final loss "
          f"{rep['steps'][-1]['loss']:.4f}")
    if rep["pp"] > 1:
        name = "(p-1)/(v·m)" if rep["chunks"] > 1 else "(p-1)/m"
        print(f"# bubble (idle / busy): measured {b['measured']:.3f}   replayed {b['replayed']:.3f}"
              f"   formula {name} = {b['formula']:.3f}   (idle / total {b['idle_fraction']:.3f})")
    print(f"{'rank':>4} {'d,t,s':>7} {'peak act':>8} {'formula':>7} {'tp MB':>9} {'pp MB':>9} "
          f"{'pred':>9} {'dp MB':>9} {'pred':>9}")
    for r in rep["per_rank"]:
        tr, f = r["traffic"], r["traffic_formula"]
        print(f"{r['rank']:>4} {','.join(map(str, r['coords'])):>7} {r['peak']:>8} "
              f"{r['peak_formula']:>7} {tr['tp'] / 1e6:9.4f} {tr['pp'] / 1e6:9.4f} "
              f"{f['pp'] / 1e6:9.4f} {tr['dp'] / 1e6:9.4f} {f['dp'] / 1e6:9.4f}")
    if rep["tp"] > 1:
        print("# tensor-parallel bytes sent per step by rank 0's layers (measured / formula)")
        for ly in rep["per_rank"][0]["layers"]:
            m, p = ly["measured"], ly["predicted"]
            print(f"  {ly['layer']:>8}: forward {m['forward']:10.0f} / {p['forward']:10.0f}   "
                  f"backward {m['backward']:10.0f} / {p['backward']:10.0f}")
