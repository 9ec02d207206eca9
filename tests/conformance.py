"""Conformance cases, run under mpiexec by the test modules.

    mpiexec -n N python tests/conformance.py TRANSPORT OUTDIR [FAMILY ...]

Every rank runs every case of each family and checks its own result against
a numpy reference that it computes from all ranks' (deterministic) inputs.
Each rank writes OUTDIR/rank<r>.json: {family: {"cases": k, "failures": [...]}}.
A family that raises (a desynchronised job) is recorded as an error and the
next family starts on a fresh communicator.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from cases import DTYPES, expect, make, ops_for, reduce_ref  # noqa: E402

BIG = (1 << 20) + 3  # "over a million elements"
MODES = ("new", "inplace", "out")

# The array module of the inputs and results: numpy, or CuPy for the "cuda"
# transport (the references are numpy arrays either way).
xp = np


def dev(a: np.ndarray):
    """``a`` on the side the transport under test moves (a copy on the GPU for cuda)."""
    return a if xp is np else xp.asarray(a)


def mk(dtype, shape, rank: int, seed: int, op: str = "sum"):
    return dev(make(dtype, shape, rank, seed, op))


def check(got, want: np.ndarray, what: str = "result") -> None:
    """``expect`` for a result of the array module under test."""
    if xp is not np:
        assert isinstance(got, xp.ndarray), f"{what} is {type(got).__name__}, not a CuPy array"
        got = xp.asnumpy(got)
    expect(got, want, what)


class Recorder:
    def __init__(self):
        self.cases = 0
        self.failures: list[str] = []

    def check(self, desc: str, fn) -> None:
        self.cases += 1
        try:
            fn()
        except AssertionError as e:
            self.failures.append(f"{desc}: {str(e).strip()[:600]}")


def counts(n: int) -> list:
    return [0, 1, 7, 3 * n + 1, 1000, (2, 3, 5)]


def shape_of(c) -> tuple:
    return c if isinstance(c, tuple) else (c,)


def stack(dt, shape, n, seed, op="sum"):
    return np.stack([make(dt, shape, r, seed, op) for r in range(n)]) if n else None


def sweep(n: int):
    """(dtype, op, shape) for the dtype x op sweep: an odd count not divisible by n."""
    for dt in DTYPES:
        for op in ops_for(dt):
            yield dt, op, (3 * n + 1,)


def unchanged(x, x0, what="x"):
    assert bool(xp.array_equal(x, x0)), f"{what} was modified"


# -- reducing calls ---------------------------------------------------------------

def fam_all_reduce(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("all_reduce"):
        cases = [(dt, op, shp) for dt, op, shp in sweep(n)]
        cases += [(dt, "sum", shape_of(c)) for c in counts(n) for dt in ("float32", "int64")]
        cases += [("float32", "sum", (BIG,)), ("int32", "max", (BIG,))]
        for i, (dt, op, shp) in enumerate(cases):
            for mode in (MODES if i % 7 == 0 else [MODES[i % 3]]):
                seed = i * 31 + len(alg)
                x = mk(dt, shp, r, seed, op)
                want = reduce_ref(stack(dt, shp, n, seed, op), op, n)

                def run(x=x, mode=mode, op=op, want=want):
                    x0 = x.copy()
                    if mode == "new":
                        got = comm.all_reduce(x, op=op, algorithm=alg)
                        unchanged(x, x0)
                    elif mode == "inplace":
                        got = comm.all_reduce(x, out=x, op=op, algorithm=alg)
                        assert got is x, "in place did not return x"
                    else:
                        o = xp.full_like(x, 3)
                        got = comm.all_reduce(x, out=o, op=op, algorithm=alg)
                        assert got is o, "out= was not returned"
                        unchanged(x, x0)
                    check(got, want)
                rec.check(f"all_reduce alg={alg} dtype={dt} op={op} shape={shp} mode={mode}", run)


def fam_reduce(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("reduce"):
        cases = [(dt, op, shp, n - 1) for dt, op, shp in sweep(n)]
        cases += [(dt, "sum", shape_of(c), root) for root in range(n) for c in counts(n)
                  for dt in ("float32", "int16")]
        cases += [("float64", "sum", (BIG,), n // 2)]
        for i, (dt, op, shp, root) in enumerate(cases):
            mode = MODES[i % 3]
            seed = i * 17 + len(alg)
            x = mk(dt, shp, r, seed, op)
            want = reduce_ref(stack(dt, shp, n, seed, op), op, n)

            def run(x=x, mode=mode, op=op, want=want, root=root):
                x0 = x.copy()
                if mode == "inplace" and r == root:
                    got = comm.reduce(x, out=x, op=op, root=root, algorithm=alg)
                    assert got is x
                elif mode == "out" and r == root:
                    o = xp.zeros_like(x)
                    got = comm.reduce(x, out=o, op=op, root=root, algorithm=alg)
                    assert got is o
                    unchanged(x, x0)
                else:
                    got = comm.reduce(x, op=op, root=root, algorithm=alg)
                    unchanged(x, x0)
                if r == root:
                    check(got, want)
                else:
                    assert got is None, "non-root got a result"
            rec.check(f"reduce alg={alg} dtype={dt} op={op} shape={shp} root={root} mode={mode}", run)


def fam_reduce_scatter(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("reduce_scatter"):
        cases = [(dt, op, (n, 3)) for dt in DTYPES for op in ops_for(dt)]
        cases += [(dt, "sum", (n, *shape_of(c))) for c in counts(n) for dt in ("float32", "uint8")]
        cases += [("float32", "sum", (n, BIG // n + 1))]
        for i, (dt, op, shp) in enumerate(cases):
            mode = MODES[i % 3]
            seed = i * 13 + len(alg)
            x = mk(dt, shp, r, seed, op)
            want = reduce_ref(stack(dt, shp, n, seed, op), op, n)[r]

            def run(x=x, mode=mode, op=op, want=want):
                x0 = x.copy()
                if mode == "inplace":  # out is this rank's block of x
                    got = comm.reduce_scatter(x, out=x[r], op=op, algorithm=alg)
                    assert got.base is x or got.base is x.base
                    x0[r] = x[r]
                elif mode == "out":
                    o = xp.zeros(x.shape[1:], x.dtype)
                    got = comm.reduce_scatter(x, out=o, op=op, algorithm=alg)
                    assert got is o
                else:
                    got = comm.reduce_scatter(x, op=op, algorithm=alg)
                unchanged(x, x0)
                check(got, want)
            rec.check(f"reduce_scatter alg={alg} dtype={dt} op={op} shape={shp} mode={mode}", run)


# -- data movement ----------------------------------------------------------------

def fam_broadcast(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("broadcast"):
        cases = [(dt, (3 * n + 1,), n - 1) for dt in DTYPES]
        cases += [(dt, shape_of(c), root) for root in range(n) for c in counts(n)
                  for dt in ("float32", "int8")]
        cases += [("float32", (BIG,), 0), ("uint16", (BIG,), n - 1)]
        for i, (dt, shp, root) in enumerate(cases):
            seed = i * 7 + len(alg)
            want = make(dt, shp, root, seed)
            buf = mk(dt, shp, r, seed) if r == root else xp.zeros(shp, dt)

            def run(buf=buf, want=want, root=root):
                got = comm.broadcast(buf, root=root, algorithm=alg)
                assert got is buf, "broadcast did not return buf"
                check(got, want)
            rec.check(f"broadcast alg={alg} dtype={dt} shape={shp} root={root}", run)


def fam_all_gather(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("all_gather"):
        cases = [(dt, (3,)) for dt in DTYPES] + [(dt, shape_of(c)) for c in counts(n)
                                                 for dt in ("float64", "int32")]
        cases += [("float32", (BIG // n + 1,))]
        for i, (dt, shp) in enumerate(cases):
            mode = MODES[i % 3]
            seed = i * 5 + len(alg)
            x = mk(dt, shp, r, seed)
            want = stack(dt, shp, n, seed)

            def run(x=x, mode=mode, want=want):
                x0 = x.copy()
                if mode == "inplace":  # x is this rank's block of out
                    o = xp.zeros((n, *x.shape), x.dtype)
                    o[r] = x
                    got = comm.all_gather(o[r], out=o, algorithm=alg)
                    assert got is o
                elif mode == "out":
                    o = xp.zeros((n, *x.shape), x.dtype)
                    got = comm.all_gather(x, out=o, algorithm=alg)
                    assert got is o
                else:
                    got = comm.all_gather(x, algorithm=alg)
                unchanged(x, x0)
                check(got, want)
            rec.check(f"all_gather alg={alg} dtype={dt} shape={shp} mode={mode}", run)


def fam_all_to_all(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("all_to_all"):
        cases = [(dt, (n, 3)) for dt in DTYPES] + [(dt, (n, *shape_of(c))) for c in counts(n)
                                                   for dt in ("complex64", "int8")]
        cases += [("float32", (n, BIG // n + 1))]
        for i, (dt, shp) in enumerate(cases):
            mode = MODES[i % 3]
            seed = i * 3 + len(alg)
            x = mk(dt, shp, r, seed)
            want = stack(dt, shp, n, seed)[:, r]

            def run(x=x, mode=mode, want=want):
                x0 = x.copy()
                if mode == "inplace":
                    got = comm.all_to_all(x, out=x, algorithm=alg)
                    assert got is x
                elif mode == "out":
                    o = xp.zeros_like(x)
                    got = comm.all_to_all(x, out=o, algorithm=alg)
                    assert got is o
                    unchanged(x, x0)
                else:
                    got = comm.all_to_all(x, algorithm=alg)
                    unchanged(x, x0)
                check(got, want)
            rec.check(f"all_to_all alg={alg} dtype={dt} shape={shp} mode={mode}", run)


def fam_gather(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("gather"):
        cases = [(dt, (3,), n - 1) for dt in DTYPES]
        cases += [(dt, shape_of(c), root) for root in range(n) for c in counts(n)
                  for dt in ("float32", "uint64")]
        cases += [("float32", (BIG // n + 1,), n // 2)]
        for i, (dt, shp, root) in enumerate(cases):
            mode = ("new", "out")[i % 2]
            seed = i * 11 + len(alg)
            x = mk(dt, shp, r, seed)
            want = stack(dt, shp, n, seed)

            def run(x=x, mode=mode, want=want, root=root):
                x0 = x.copy()
                if mode == "out" and r == root:
                    o = xp.zeros((n, *x.shape), x.dtype)
                    got = comm.gather(x, out=o, root=root, algorithm=alg)
                    assert got is o
                else:
                    got = comm.gather(x, root=root, algorithm=alg)
                unchanged(x, x0)
                if r == root:
                    check(got, want)
                else:
                    assert got is None, "non-root got a result"
            rec.check(f"gather alg={alg} dtype={dt} shape={shp} root={root} mode={mode}", run)


def fam_scatter(comm, rec):
    n, r = comm.size, comm.rank
    for alg in comm.algorithms("scatter"):
        cases = [(dt, (3,), n - 1) for dt in DTYPES]
        cases += [(dt, shape_of(c), root) for root in range(n) for c in counts(n)
                  for dt in ("float16", "int64")]
        cases += [("float32", (BIG // n + 1,), n // 2)]
        for i, (dt, shp, root) in enumerate(cases):
            seed = i * 19 + len(alg)
            full = stack(dt, shp, n, seed)
            x = dev(full.copy()) if r == root else None

            def run(x=x, full=full, root=root, shp=shp, dt=dt):
                o = xp.zeros(shp, dt)
                got = comm.scatter(x, o, root=root, algorithm=alg)
                assert got is o, "scatter did not return out"
                if x is not None:
                    unchanged(x, dev(full))
                check(got, full[r])
            rec.check(f"scatter alg={alg} dtype={dt} shape={shp} root={root}", run)


def fam_barrier(comm, rec):
    n, r = comm.size, comm.rank
    for i, alg in enumerate(comm.algorithms("barrier") * 3):
        def run(i=i, alg=alg):
            time.sleep(0.002 * ((r + i) % n))
            t_in = time.time()
            assert comm.barrier(algorithm=alg) is None
            t_out = time.time()
            times = comm.all_gather(np.array([t_in, t_out]))
            assert times[:, 1].min() >= times[:, 0].max(), \
                f"a rank left the barrier before another entered: {times.tolist()}"
        rec.check(f"barrier alg={alg} #{i}", run)


# -- point to point, async, split -------------------------------------------------

def fam_p2p(comm, rec):
    n, r = comm.size, comm.rank
    if n == 1:  # no peer to talk to: a message to oneself is refused
        def alone():
            try:
                comm.send(xp.ones(3), 0)
            except ValueError as e:
                assert "dst" in str(e)
            else:
                raise AssertionError("send to self was accepted")
        rec.check("p2p in a world of one", alone)
        return
    right, left = (r + 1) % n, (r - 1) % n
    for i, (dt, c) in enumerate(itertools.product(("float32", "int8", "complex128"),
                                                  (0, 1, 1000, 300_001))):
        def run(dt=dt, c=c, i=i):
            a, b = mk(dt, (c,), r, i), mk(dt, (c + 1,), r, i + 1)
            ra, rb = xp.zeros((c,), dt), xp.zeros((c + 1,), dt)
            # tag 2 is received first although it is sent second
            sa = comm.isend(a, right, tag=1)
            comm.send(b, right, tag=2) if c < 1000 else None
            hb = comm.irecv(rb, left, tag=2) if c < 1000 else None
            got_a = comm.recv(ra, left, tag=1)
            sa.wait()
            assert sa.done()
            check(got_a, make(dt, (c,), left, i), "tag 1")
            if hb is not None:
                check(hb.wait(), make(dt, (c + 1,), left, i + 1), "tag 2")
        rec.check(f"p2p ring dtype={dt} count={c}", run)

    def exchange():  # both directions at once, larger than the slots
        x = mk("float64", (600_000,), r, 5)
        out = xp.empty_like(x)
        hs = [comm.isend(x, right, tag=7), comm.irecv(out, left, tag=7)]
        for h in hs:
            h.wait()
        check(out, make("float64", (600_000,), left, 5))
    rec.check("p2p isend/irecv exchange", exchange)

    def ordered():  # one pair, one tag: arrival in send order
        if r == 0:
            for k in range(5):
                comm.send(xp.full(10, k, np.int32), 1 % n, tag=3)
        if r == 1 % n:
            for k in range(5):
                check(comm.recv(xp.empty(10, np.int32), 0, tag=3), np.full(10, k, np.int32))
        comm.barrier()
    rec.check("p2p order within a tag", ordered)


def fam_async(comm, rec):
    n, r = comm.size, comm.rank

    def run():
        xs = [mk("float32", (5000 * (k + 1),), r, k) for k in range(4)]
        hs = [comm.all_reduce(x, async_op=True) for x in xs]
        hb = comm.broadcast(mk("int32", (77,), r, 9), root=n - 1, async_op=True)
        hg = comm.all_gather(mk("int8", (5,), r, 10), async_op=True)
        busy = sum(float(np.sum(np.sqrt(np.arange(20000.0)))) for _ in range(5))  # compute meanwhile
        assert busy > 0
        for k, h in enumerate(hs):
            check(h.wait(), reduce_ref(stack("float32", (5000 * (k + 1),), n, k), "sum", n))
            assert h.done()
        check(hb.wait(), make("int32", (77,), n - 1, 9))
        check(hg.wait(), stack("int8", (5,), n, 10))
        y = comm.all_reduce(np.ones(3), op="sum")  # a blocking call after async ones
        expect(y, np.full(3, float(n)))
    rec.check("async mixed calls complete in order", run)

    def barrier_async():
        h = comm.barrier(async_op=True)
        assert h.wait() is None and h.done()
    rec.check("async barrier", barrier_async)


def fam_split(comm, rec):
    n, r = comm.size, comm.rank

    def run():
        color = r % 2
        sub = comm.split(color, key=-r)
        members = [p for p in range(n) if p % 2 == color]
        assert sub.size == len(members), f"sub.size {sub.size} != {len(members)}"
        assert sub.rank == sorted(members, reverse=True).index(r), "key order not honoured"
        before = sub.traffic
        got = sub.all_reduce(dev(np.array([r], np.int64)))
        check(got, np.array([sum(members)], np.int64))
        g = sub.all_gather(dev(np.array([r], np.int64)))
        check(g, np.array([[p] for p in sorted(members, reverse=True)], np.int64))
        assert (sub.traffic - before).sent_bytes >= 0
        none = comm.split(-1 if r == 0 else 0)
        assert (none is None) == (r == 0), "negative color must give None"
        if none is not None:
            expect(none.all_reduce(np.ones(2)), np.full(2, float(n - 1)))
            none.close()
        sub.close()
    rec.check("split by parity, reversed keys, negative color", run)


FAMILIES = {f.__name__[4:]: f for f in [
    fam_all_reduce, fam_reduce, fam_reduce_scatter, fam_broadcast, fam_all_gather,
    fam_all_to_all, fam_gather, fam_scatter, fam_barrier, fam_p2p, fam_async, fam_split]}


def main(argv: list[str]) -> int:
    transport, outdir, *names = argv
    names = names or list(FAMILIES)
    if transport == "cuda":  # CuPy arrays; each rank on a GPU of its own where there are enough
        global xp
        import cupy
        from mpi4py import MPI
        cupy.cuda.Device(MPI.COMM_WORLD.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
        xp = cupy
    results = {}
    rank = None
    for name in names:
        rec = Recorder()
        t0 = time.perf_counter()
        try:
            with cc.init(transport=transport) as comm:
                rank = comm.rank
                assert comm.transport == transport
                FAMILIES[name](comm, rec)
        except Exception:
            rec.failures.append(f"{name} raised:\n{traceback.format_exc()}")
        results[name] = {"cases": rec.cases, "failures": rec.failures,
                         "seconds": round(time.perf_counter() - t0, 3)}
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
