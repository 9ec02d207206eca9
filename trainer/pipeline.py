"""Pipeline parallelism: the layers cut into stages over the ranks of a
pipeline communicator, activations and their gradients sent between
neighbours with ``isend``/``recv``, a mini-batch cut into m micro-batches.

Schedules, for rank r of p (each a list of ("F"|"B", chunk, micro-batch)):

- ``gpipe`` (Huang et al. 2019): every forward, then every backward.  A rank
  holds the activations of all m micro-batches; the bubble is (p-1)/m of
  the ideal time.
- ``1f1b`` (PipeDream-Flush, Narayanan et al. 2019/2021): p-r-1 warm-up
  forwards, then one forward and one backward in turn, then the remaining
  backwards.  Same bubble, but a rank holds at most p-r micro-batches.
- ``interleaved`` (Narayanan et al. 2021, "Efficient Large-Scale Language
  Model Training on GPU Clusters"): each rank holds v non-contiguous model
  chunks (virtual stage c·p + r is chunk c of rank r), which cuts the bubble
  to (p-1)/(v·m) for v times the point-to-point messages.  m must be a
  multiple of p.

Virtual stage s (0 .. p·v-1) runs on rank s mod p; its activations go to
s+1 and its input's gradient back to s-1.  Sends are non-blocking and
received in schedule order, so no pair of ranks can wait on each other.
"""
from __future__ import annotations

import time

import numpy as np

from .mixed import F32

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def schedule(kind: str, p: int, r: int, m: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The ops of rank ``r``: (op, local chunk, micro-batch)."""
    if kind == "gpipe":
        return [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in reversed(range(m))]
    if kind == "1f1b":
        warm = min(p - r - 1, m)
        fs = [("F", 0, i) for i in range(m)]
        bs = [("B", 0, i) for i in range(m)]
        return _one_f_one_b(fs, bs, warm)
    if kind == "interleaved":
        if m % p:
            raise ValueError(f"interleaved 1F1B needs micro-batches ({m}) to be a multiple of "
                             f"the pipeline ranks ({p})")
        fs = [("F", c, g * p + j) for g in range(m // p) for c in range(v) for j in range(p)]
        bs = [("B", c, g * p + j) for g in range(m // p) for c in reversed(range(v))
              for j in range(p)]
        warm = min((p - r - 1) * 2 + (v - 1) * p, m * v)
        return _one_f_one_b(fs, bs, warm)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {kind!r}")


def _one_f_one_b(fs, bs, warm):
    ops = list(fs[:warm])
    for i in range(len(fs) - warm):
        ops += [fs[warm + i], bs[i]]
    return ops + bs[len(fs) - warm:]


def bubble_formula(kind: str, p: int, m: int, v: int = 1) -> float:
    """Idle time over ideal compute time: (p-1)/m, interleaved (p-1)/(v·m)."""
    return (p - 1) / (v * m) if kind == "interleaved" else (p - 1) / m


def peak_formula(kind: str, p: int, r: int, m: int, v: int = 1) -> int:
    """Micro-batch activations (per chunk) a rank holds at most."""
    if kind == "gpipe":
        return m * v
    if kind == "1f1b":
        return min(p - r, m)
    return min((p - r - 1) * 2 + (v - 1) * p + 1, m * v)


class Pipeline:
    """Runs one rank's schedule over its local chunks.

    ``chunks[c]`` is the list of layers of virtual stage c·p + r; the first
    virtual stage's first layer takes token ids, the last one's last layer
    (the head) returns the loss.  ``pp`` is the pipeline communicator (None
    or size 1: a single stage)."""

    def __init__(self, pp, chunks: list, v: int):
        self.pp = pp if pp is not None and pp.size > 1 else None
        self.p = pp.size if pp is not None else 1
        self.r = pp.rank if pp is not None else 0
        self.chunks, self.v = chunks, v
        self.stages = self.p * v
        # (op, chunk, micro-batch, start, end, CPU seconds of this thread)
        self.timeline: list[tuple[str, int, int, float, float, float]] = []
        self.peak = 0

    def stage(self, c: int) -> int:
        return c * self.p + self.r

    def run(self, kind: str, ids: list, targets: list, width: int) -> float:
        """One mini-batch of m = len(ids) micro-batches; returns the loss sum
        (on the rank of the last stage, 0 elsewhere)."""
        m = len(ids)
        ops = schedule(kind, self.p, self.r, m, self.v)
        last = self.stages - 1
        head = self.chunks[-1][-1] if self.stage(self.v - 1) == last else None
        if head is not None:
            for i in range(m):
                head.targets[i] = targets[i]
        live, sends, loss = set(), [], 0.0
        self.timeline, self.peak = [], 0
        for op, c, i in ops:
            s = self.stage(c)
            rows = len(ids[i])
            if op == "F":
                x = ids[i] if s == 0 else self._recv((rows, width), s - 1, _tag(s, i, 0))
                t0, c0 = time.perf_counter(), time.thread_time()
                for layer in self.chunks[c]:
                    x = layer.forward(i, x)
                t1, c1 = time.perf_counter(), time.thread_time()
                live.add((c, i))
                self.peak = max(self.peak, len(live))
                if s == last:
                    loss += x
                else:
                    sends.append(self.pp.isend(x, self._rank(s + 1), _tag(s + 1, i, 0)))
            else:
                g = None if s == last else self._recv((rows, width), s + 1, _tag(s, i, 1))
                t0, c0 = time.perf_counter(), time.thread_time()
                for layer in reversed(self.chunks[c]):
                    g = layer.backward(i, g)
                t1, c1 = time.perf_counter(), time.thread_time()
                live.discard((c, i))
                if s > 0:
                    sends.append(self.pp.isend(g, self._rank(s - 1), _tag(s - 1, i, 1)))
            self.timeline.append((op, c, i, t0, t1, c1 - c0))
        for h in sends:
            h.wait()
        return loss

    def _rank(self, s: int) -> int:
        return s % self.p

    def _recv(self, shape, s: int, tag: int) -> np.ndarray:
        out = np.empty(shape, F32)
        return self.pp.recv(out, self._rank(s), tag)


def _tag(stage: int, mb: int, direction: int) -> int:
    """Messages of one pair and tag arrive in order, so tags may repeat."""
    return (2 * (stage * 1024 + mb) + direction) % 32768


def bubble(timelines: list[list], start: float, end: float) -> dict:
    """From every rank's timeline: per rank busy and idle time over [start,
    end], idle over busy (beside the formula), and idle over the total."""
    busy = [sum(e[4] - e[3] for e in tl) for tl in timelines]
    total = end - start
    idle = [total - b for b in busy]
    return {"busy_s": busy, "idle_s": idle, "total_s": total,
            "bubble": float(np.mean([i / b for i, b in zip(idle, busy)])),
            "idle_fraction": float(np.mean([i / total for i in idle]))}


def replay(timelines: list[list], p: int, v: int, m: int) -> dict:
    """The same schedules replayed with each op's measured CPU time, as if
    every rank had a core of its own and messages took no time: what the
    schedule itself costs, apart from a machine with fewer cores than ranks
    (where an op's wall time includes the time its core ran another rank)."""
    dur = {}
    for r, tl in enumerate(timelines):
        for op, c, i, *_, cpu in tl:
            dur[(r, op, c, i)] = cpu
    done: dict = {}
    clock = [0.0] * p
    pos = [0] * p
    ops = [[(e[0], e[1], e[2]) for e in tl] for tl in timelines]
    last = p * v - 1
    progressed = True
    while progressed:
        progressed = False
        for r in range(p):
            while pos[r] < len(ops[r]):
                op, c, i = ops[r][pos[r]]
                s = c * p + r
                dep = None
                if op == "F" and s > 0:
                    dep = ("F", s - 1, i)
                elif op == "B" and s < last:
                    dep = ("B", s + 1, i)
                if dep is not None and dep not in done:
                    break
                begin = max(clock[r], done.get(dep, 0.0))
                clock[r] = begin + dur[(r, op, c, i)]
                done[(op, s, i)] = clock[r]
                pos[r] += 1
                progressed = True
    start, end = 0.0, max(clock)
    busy = [sum(dur[(r, op, c, i)] for op, c, i in ops[r]) for r in range(p)]
    return {"total_s": end - start,
            "bubble": float(np.mean([(end - b) / b for b in busy]))}


def plot_timeline(timelines: list[list], start: float, path: str, title: str) -> None:
    """Each rank's forward (light), backward (dark) and idle (blank) time."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"--timeline needs matplotlib (pip install '.[plot]'): {e}")
    p = len(timelines)
    fig, ax = plt.subplots(figsize=(12, 0.6 * p + 1.2))
    colours = {"F": "#8ecae6", "B": "#219ebc"}
    for r, tl in enumerate(timelines):
        for op, c, i, t0, t1, *_ in tl:
            ax.broken_barh([((t0 - start) * 1e3, (t1 - t0) * 1e3)], (p - 1 - r - 0.4, 0.8),
                           facecolors=colours[op], edgecolor="white", linewidth=0.5)
            if (t1 - t0) * 1e3 > 0.02 * max(1e-9, (tl[-1][4] - start) * 1e3):
                ax.text((t0 + t1 - 2 * start) * 5e2, p - 1 - r, f"{i}", ha="center",
                        va="center", fontsize=7)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"rank {p - 1 - k}" for k in range(p)])
    ax.set_xlabel("ms")
    ax.set_title(title)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colours["F"], label="forward"),
                       Patch(color=colours["B"], label="backward")], loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
