"""How fast collectives.kernels reduces k arrays, against numpy, in one process.

    python -m bench.kernels_probe [--n 4194304] [--reps 5] [--ks 2,4]

For each dtype (float32, float16, bfloat16) and k, the GB/s of output
(``out.nbytes / time``, median of ``--reps`` rounds) of:

- ``numpy pairwise``: ``np.add(x0, x1, out=o)`` then ``np.add(o, x, out=o)``,
  in the dtype itself (what the reductions do without the kernels);
- ``numpy fallback``: ``kernels.reduce_into`` on its numpy path (half types
  widened to float32, rounded once: the kernels' semantics, numpy's speed);
- each instruction set the processor runs (``kernels.use``), streaming its
  stores as the default threshold says, and the best one without streaming.

Every round times each method in turn, so a machine whose speed drifts
favours none of them.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from collectives import kernels


def _pairwise(out, xs) -> None:
    np.add(xs[0], xs[1], out=out)
    for x in xs[2:]:
        np.add(out, x, out=out)


def _methods() -> dict:
    """name -> fn(out, xs)"""
    def on(path, stream_bytes=None):
        def fn(out, xs):
            kernels.use(path)
            kernels.reduce_into(out, xs, "sum", stream_bytes=stream_bytes)
        return fn
    m = {"numpy pairwise": _pairwise, "numpy fallback": on("numpy")}
    for path in kernels.isas()[1:]:
        m[path] = on(path)
    if len(kernels.isas()) > 1:
        m[f"{kernels.isas()[-1]}, no streaming"] = on(kernels.isas()[-1], 0)
    return m


def _time(fn, out, xs, min_seconds: float = 0.05) -> float:
    """Seconds per call, over enough calls to last min_seconds."""
    calls, t0 = 0, time.perf_counter()
    while True:
        fn(out, xs)
        calls += 1
        t = time.perf_counter() - t0
        if t >= min_seconds:
            return t / calls


def probe(n: int, ks, reps: int) -> None:
    dtypes = [np.dtype(np.float32), np.dtype(np.float16)]
    dtypes += [kernels.bfloat16] if kernels.bfloat16 is not None else []
    methods = _methods()
    before = kernels.isa()
    rng = np.random.default_rng(0)
    print(f"{n} elements, GB/s of output, median of {reps}; best path here: {kernels.isas()[-1]}, "
          f"streams outputs of {kernels.streaming.STREAM_BYTES} bytes and more")
    print(f"{'dtype':>9} {'k':>2} " + " ".join(f"{name:>20}" for name in methods))
    try:
        for dt in dtypes:
            pool = [rng.uniform(-1, 1, n).astype(np.float32).astype(dt) for _ in range(max(ks))]
            out = np.empty(n, dt)
            for k in ks:
                xs = pool[:k]
                times = {name: [] for name in methods}
                for _ in range(reps):
                    for name, fn in methods.items():
                        times[name].append(_time(fn, out, xs))
                rates = [out.nbytes / statistics.median(t) / 1e9 for t in times.values()]
                print(f"{str(dt):>9} {k:>2} " + " ".join(f"{r:20.2f}" for r in rates))
    finally:
        kernels.use(before)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4 << 20, help="elements per array")
    ap.add_argument("--reps", type=int, default=5, help="rounds; the median is printed")
    ap.add_argument("--ks", default="2,4", help="numbers of inputs, comma-separated")
    a = ap.parse_args(argv)
    probe(a.n, [int(k) for k in a.ks.split(",")], a.reps)


if __name__ == "__main__":
    main()
