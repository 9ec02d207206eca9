"""The calls beyond the fixed-count collectives, against numpy, under mpiexec:

    mpiexec -n N python tests/variable_check.py TRANSPORT OUT.json

- the variable-count calls (``all_gather_v``, ``gather_v``, ``scatter_v``,
  ``all_to_all_v``, ``reduce_scatter_v``), with every algorithm offered and
  the default, counts equal, unequal, with zeros, and all but one zero,
  counts given and agreed (None), out new, given and in place, every root
  (a sample above 4 ranks), three dtypes and, for reduce_scatter_v, sum,
  max and avg;
- ``scan`` and ``exscan``, every algorithm, op and those dtypes, in place too;
- every dtype (bfloat16 included) with every op it takes, through
  ``reduce_scatter_v`` on unequal counts and ``scan``, by default;
- the object calls, and foreign arrays (``__dlpack__`` alone, memoryview,
  array.array) as input and out.

Inputs are ``bench.data.make``'s; each rank checks its own result and rank
0 writes ``{"cases": k, "failures": [...]}`` over every rank.
"""
from __future__ import annotations

import array
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from bench.data import DTYPES as ALL_DTYPES, expect, make, ops_for, reduced  # noqa: E402
from launch import finish  # noqa: E402

DTYPES = (np.float64, np.int32, np.float16)
REST = (3,)  # elements of a row past the first axis


def patterns(n: int) -> list[tuple[int, ...]]:
    """Counts per rank: equal, unequal with a zero, all but the last zero."""
    return [tuple([2] * n), tuple((3 * r + 1) % 4 for r in range(n)),
            tuple([0] * (n - 1) + [5])]


def roots(n: int) -> list[int]:
    return list(range(n)) if n <= 4 else [0, n - 1]


class DL:
    """Only ``__dlpack__`` and ``__dlpack_device__``, over a numpy array."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def blocks(counts, dt, seed: int, op: str = "sum") -> list[np.ndarray]:
    return [make(dt, (c, *REST), i, seed, op) for i, c in enumerate(counts)]


def cases(comm):
    """(name, fn) for every case; fn raises on a wrong result."""
    n, me = comm.size, comm.rank
    out = []

    def add(name, fn):
        out.append((name, fn))

    for alg in [None] + comm.algorithms("all_gather_v"):
        for cs in patterns(n):
            for dt in DTYPES:
                for given in (True, False):
                    for mode in ("new", "out", "inplace"):
                        def f(alg=alg, cs=cs, dt=dt, given=given, mode=mode, seed=len(out)):
                            parts = blocks(cs, dt, seed)
                            want = np.concatenate(parts)
                            o = np.empty_like(want) if mode != "new" else None
                            x = parts[me]
                            if mode == "inplace":
                                at = sum(cs[:me])
                                o[at:at + cs[me]] = x
                                x = o[at:at + cs[me]]
                            got = comm.all_gather_v(x, cs if given else None, out=o,
                                                    algorithm=alg)
                            expect(got, want)
                            assert o is None or got is o
                        add(f"all_gather_v {alg} {cs} {np.dtype(dt)} given={given} {mode}", f)
    # counts None, blocks longer than the default's first round (512 KiB) on
    # shm: the rest in rounds, in place from communicator-allocated arrays,
    # and (N = 2, past 16 MiB a rank) read where it lies; a rank with none
    rows_of = [(30000, False), (30000, True)] + ([(700000, False)] if n == 2 else [])
    for scale, allocated in rows_of:
        def f(scale=scale, allocated=allocated, seed=len(out)):
            cs = [scale * ((r + 1) % 3) + r for r in range(n)]  # a rank with r rows alone
            parts = [make(np.float64, (c, *REST), i, seed) for i, c in enumerate(cs)]
            x = parts[me]
            if allocated:  # one shape on every rank: the longest block
                a = comm.empty((max(cs), *REST), x.dtype)[:len(x)]
                a[...] = x
                x = a
            before = comm.traffic
            expect(comm.all_gather_v(x), np.concatenate(parts))
            d, row = comm.traffic - before, REST[0] * 8
            moved = ((n - 1) * cs[me] * row, (sum(cs) - cs[me]) * row)
            if comm.transport == "shm":  # the blocks' bytes, and nothing else
                assert (d.sent_bytes, d.recv_bytes) == moved, (scale, allocated, d, moved)
        add(f"all_gather_v None rows of {scale}{' allocated' * allocated}", f)
    for alg in [None] + comm.algorithms("gather_v"):
        for cs in patterns(n):
            for root in roots(n):
                for dt in DTYPES[:2]:
                    def f(alg=alg, cs=cs, root=root, dt=dt, seed=len(out)):
                        parts = blocks(cs, dt, seed)
                        got = comm.gather_v(parts[me], cs if seed % 2 else None, root=root,
                                            algorithm=alg)
                        if me == root:
                            expect(got, np.concatenate(parts))
                        else:
                            assert got is None
                    add(f"gather_v {alg} {cs} root={root} {np.dtype(dt)}", f)
    # counts None, root's out new, given and in place; blocks past 2 MiB go
    # by rendezvous on shm (variable.READ_BYTES); a rank with none; root
    # receives the blocks' bytes and nothing else
    for scale in (5, 30000, 100000):
        for mode in ("new", "out", "inplace"):
            def f(scale=scale, mode=mode, seed=len(out)):
                cs = [scale * ((r + 1) % 3) + r for r in range(n)]
                parts = [make(np.float64, (c, *REST), i, seed) for i, c in enumerate(cs)]
                want, x = np.concatenate(parts), parts[me]
                for root in roots(n):
                    o = np.empty_like(want) if mode != "new" and me == root else None
                    if o is not None and mode == "inplace":
                        at = sum(cs[:me])
                        o[at:at + cs[me]] = x
                        x = o[at:at + cs[me]]
                    before = comm.traffic
                    got = comm.gather_v(x, root=root, out=o)
                    d, row = comm.traffic - before, REST[0] * 8
                    if me == root:
                        expect(got, want)
                        assert o is None or got is o
                        moved = (0, (sum(cs) - cs[me]) * row)
                    else:
                        assert got is None
                        moved = (cs[me] * row, 0)
                    if comm.transport == "shm":
                        assert (d.sent_bytes, d.recv_bytes) == moved, (scale, mode, root, d,
                                                                      moved)
                    x = parts[me]
            add(f"gather_v None rows of {scale} {mode}", f)
    for alg in [None] + comm.algorithms("scatter_v"):
        for cs in patterns(n):
            for root in roots(n):
                for dt in DTYPES[:2]:
                    def f(alg=alg, cs=cs, root=root, dt=dt, seed=len(out)):
                        parts = blocks(cs, dt, seed)
                        full = np.concatenate(parts)
                        if seed % 2:  # out given
                            got = comm.scatter_v(full if me == root else None, cs,
                                                 out=np.empty((cs[me], *REST), dt), root=root,
                                                 algorithm=alg)
                        else:  # out made from x's dtype and rows
                            got = comm.scatter_v(full if me == root else full[:0], cs,
                                                 root=root, algorithm=alg)
                        expect(got, parts[me])
                    add(f"scatter_v {alg} {cs} root={root} {np.dtype(dt)}", f)
    for alg in [None] + comm.algorithms("all_to_all_v"):
        for k, send in enumerate(((2,) * n, None, (0,) * n)):
            for dt in DTYPES[:2]:
                for given in (True, False):
                    def f(alg=alg, send=send, dt=dt, given=given, seed=len(out), k=k):
                        def cnt(i, j):  # rows rank i sends rank j
                            return send[j] if send is not None else (i + 2 * j + k) % 3
                        x = np.concatenate([make(dt, (cnt(me, j), *REST), 100 * me + j, seed)
                                            for j in range(n)])
                        want = np.concatenate([make(dt, (cnt(i, me), *REST), 100 * i + me, seed)
                                               for i in range(n)])
                        got = comm.all_to_all_v(x, [cnt(me, j) for j in range(n)],
                                                [cnt(i, me) for i in range(n)] if given else None,
                                                algorithm=alg)
                        expect(got, want)
                    add(f"all_to_all_v {alg} {send} {np.dtype(dt)} given={given}", f)
        # blocks of several of staged's rounds (512 KiB a round at N = 2) and,
        # in all, past the 2 MiB from which one_copy_or_staged reads the rest
        # in place at N > 2; at N = 2, communicator-allocated arrays past the
        # 4 MiB a rank from which it reads them in place (plain ones: rounds)
        big = (150000,) if n == 2 and alg in (None, "one_copy_or_staged") else ()
        for scale, allocated in ((700, False), (30000, False), *((s, a) for s in big
                                                                  for a in (False, True))):
            def f(alg=alg, scale=scale, allocated=allocated, seed=len(out)):
                def cnt(i, j):
                    return scale * ((i + 2 * j) % 3) + j
                x = np.concatenate([make(np.float64, (cnt(me, j), *REST), 100 * me + j, seed)
                                    for j in range(n)])
                if allocated:  # one shape on every rank: the longest x
                    most = max(sum(cnt(i, j) for j in range(n)) for i in range(n))
                    a = comm.empty((most, *REST), x.dtype)[:len(x)]
                    a[...] = x
                    x = a
                want = np.concatenate([make(np.float64, (cnt(i, me), *REST), 100 * i + me, seed)
                                       for i in range(n)])
                expect(comm.all_to_all_v(x, [cnt(me, j) for j in range(n)],
                                         [cnt(i, me) for i in range(n)], algorithm=alg), want)
            add(f"all_to_all_v {alg} rows of {scale}{' allocated' * allocated}", f)
        # from 3 ranks, a rank whose own blocks reach the read total sends its
        # first round without data and is read whole: rank 0 alone here, the
        # others' first rounds carry data; and a rank whose one large block
        # is its own (every other block within one round)
        mixed = {"rank 0 sends most": lambda i, j: (40000 if i == 0 else 300) + j,
                 "rank 0 keeps most": lambda i, j: 100000 if i == j == 0 else 5 + j}
        for what, cnt in mixed.items() if n > 2 else ():
            for given in (True, False):
                def f(alg=alg, cnt=cnt, given=given, seed=len(out)):
                    x = np.concatenate([make(np.float64, (cnt(me, j), *REST), 100 * me + j, seed)
                                        for j in range(n)])
                    want = np.concatenate([make(np.float64, (cnt(i, me), *REST), 100 * i + me,
                                                seed) for i in range(n)])
                    before = comm.traffic
                    expect(comm.all_to_all_v(x, [cnt(me, j) for j in range(n)],
                                             [cnt(i, me) for i in range(n)] if given else None,
                                             algorithm=alg), want)
                    d, row = comm.traffic - before, REST[0]
                    moved = ((sum(cnt(me, j) for j in range(n)) - cnt(me, me)) * row * 8,
                             (sum(cnt(i, me) for i in range(n)) - cnt(me, me)) * row * 8)
                    # the blocks' bytes, and nothing else: with the counts given,
                    # and by the default on shm without them (its first round tells)
                    if given or (alg is None and comm.transport == "shm"):
                        assert (d.sent_bytes, d.recv_bytes) == moved, (what, alg, d, moved)
                add(f"all_to_all_v {alg} {what} given={given}", f)
    for alg in [None] + comm.algorithms("reduce_scatter_v"):
        for cs in patterns(n):
            for dt in DTYPES:
                for op in ("sum", "max", "avg") if np.dtype(dt).kind == "f" else ("sum", "max"):
                    for inplace in (False, True):
                        def f(alg=alg, cs=cs, dt=dt, op=op, inplace=inplace, seed=len(out)):
                            total = sum(cs)
                            x = make(dt, (total, *REST), me, seed, op)
                            want = reduced(n, dt, (total, *REST), op, seed)
                            at = sum(cs[:me])
                            o = x[at:at + cs[me]] if inplace else None
                            got = comm.reduce_scatter_v(x, cs, out=o, op=op, algorithm=alg)
                            expect(got, want[at:at + cs[me]])
                        add(f"reduce_scatter_v {alg} {cs} {np.dtype(dt)} {op} "
                            f"inplace={inplace}", f)
    for call in ("scan", "exscan"):
        for alg in [None] + comm.algorithms(call):
            for dt in DTYPES:
                for op in ("sum", "prod", "max", "min"):
                    for inplace in (False, True):
                        def f(call=call, alg=alg, dt=dt, op=op, inplace=inplace, seed=len(out)):
                            x = make(dt, (5, *REST), me, seed, op)
                            o = x if inplace else None
                            got = getattr(comm, call)(x, out=o, op=op, algorithm=alg)
                            upto = me + 1 if call == "scan" else me
                            if upto == 0:
                                ident = cc.prefix.identity(op, np.dtype(dt))
                                expect(got, np.full((5, *REST), ident, dt))
                            else:
                                expect(got, reduced(upto, dt, (5, *REST), op, seed))
                        add(f"{call} {alg} {np.dtype(dt)} {op} inplace={inplace}", f)

    # every dtype with every op it takes: reduce_scatter_v (unequal counts)
    # and scan/exscan, by default
    cs = patterns(n)[1]
    for dt in ALL_DTYPES:
        for op in ops_for(dt):
            def f(dt=dt, op=op, seed=len(out)):
                total = sum(cs)
                x = make(dt, (total, *REST), me, seed, op)
                at = sum(cs[:me])
                want = reduced(n, dt, (total, *REST), op, seed)
                expect(comm.reduce_scatter_v(x, cs, op=op), want[at:at + cs[me]])
                if op != "avg":
                    y = make(dt, (3, *REST), me, seed, op)
                    expect(comm.scan(y, op=op), reduced(me + 1, dt, (3, *REST), op, seed))
            add(f"every dtype and op: {np.dtype(dt)} {op}", f)

    def traffic():
        """Each algorithm's bytes on unequal counts: what docs/algorithms.md
        ("Variable counts") says, as comm.traffic counts it."""
        cs = patterns(n)[1]
        row = 3 * 8
        S = [c * row for c in cs]
        T = sum(S)
        if n == 1:
            return
        nxt, prv = (me + 1) % n, (me - 1) % n
        want = {("all_gather_v", "ring"): (T - S[nxt], T - S[me]),
                ("all_gather_v", "linear"): ((n - 1) * S[me], T - S[me]),
                ("all_gather_v", "one_copy"): ((n - 1) * S[me], T - S[me]),
                ("reduce_scatter_v", "ring"): (T - S[me], T - S[prv]),
                ("reduce_scatter_v", "linear"): (T - S[me], (n - 1) * S[me])}
        # all_to_all_v: rank i sends rank j (i + 2j) % 3 rows (the bounds that
        # one_copy's ranks exchange first are not counted)
        def a2a(i, j):
            return (i + 2 * j) % 3
        sc, rc = [a2a(me, j) for j in range(n)], [a2a(i, me) for i in range(n)]
        for alg in ("pairwise", "linear", "one_copy", "staged", "one_copy_or_staged"):
            want[("all_to_all_v", alg)] = ((sum(sc) - sc[me]) * row, (sum(rc) - rc[me]) * row)
        x = make(np.float64, (cs[me], *REST), me)
        full = make(np.float64, (sum(cs), *REST), me)
        xa = make(np.float64, (sum(sc), *REST), me)
        for (call, alg), (sent, recv) in want.items():
            if alg not in comm.algorithms(call):
                continue
            before = comm.traffic
            if call == "all_gather_v":
                comm.all_gather_v(x, cs, algorithm=alg)
            elif call == "all_to_all_v":
                comm.all_to_all_v(xa, sc, rc, algorithm=alg)
            else:
                comm.reduce_scatter_v(full, cs, algorithm=alg)
            d = comm.traffic - before
            assert (d.sent_bytes, d.recv_bytes) == (sent, recv), (call, alg, d, sent, recv)
        if "staged" not in comm.algorithms("all_to_all_v"):
            return
        # the default without recv_counts learns them in its first round (one
        # round, and blocks of several rounds, read in place past it at N > 2)
        for scale in (1, 30000):
            s2, r2 = [scale * k for k in sc], [scale * k for k in rc]
            before = comm.traffic
            comm.all_to_all_v(make(np.float64, (sum(s2), *REST), me), s2)
            d = comm.traffic - before
            want2 = ((sum(s2) - s2[me]) * row, (sum(r2) - r2[me]) * row)
            assert (d.sent_bytes, d.recv_bytes) == want2, ("learned", scale, d, want2)
    add("traffic", traffic)

    def objects():
        mine = {"rank": me, "items": list(range(me))}
        every = [{"rank": i, "items": list(range(i))} for i in range(n)]
        assert comm.all_gather_object(mine) == every
        for root in roots(n):
            assert comm.broadcast_object(mine if me == root else None, root=root) == every[root]
            g = comm.gather_object(mine, root=root)
            assert g == (every if me == root else None)
            assert comm.scatter_object(every if me == root else None, root=root) == mine
    add("objects", objects)

    def foreign():
        x = make(np.float32, 7, me)
        want = reduced(n, np.float32, 7)
        o = np.zeros(7, np.float32)
        expect(comm.all_reduce(DL(x), out=DL(o)), want)
        expect(o, want)
        mv = memoryview(bytearray(x.tobytes())).cast("f")
        a = array.array("f", [0.0] * 7)
        comm.all_reduce(mv, out=a)
        expect(np.asarray(a), want)
        buf = bytearray(b"root..!" if me == 0 else bytes(7))
        comm.broadcast(buf)
        assert buf == b"root..!"
        got = comm.all_gather_v(array.array("d", [me] * me), None)
        assert got.tolist() == [float(i) for i in range(n) for _ in range(i)]
    add("foreign arrays", foreign)
    return out


def main(transport: str, out_path: str) -> int:
    comm = cc.init(transport=transport)
    failures, done = [], 0
    for name, fn in cases(comm):
        try:
            fn()
        except Exception:  # noqa: BLE001 (recorded, the test reports it)
            failures.append(f"rank {comm.rank} of {comm.size} {name}: "
                            f"{traceback.format_exc(limit=3)[-1500:]}")
            if isinstance(comm._broken, BaseException):  # the communicator is gone
                break
        done += 1
    from mpi4py import MPI
    every = MPI.COMM_WORLD.gather(failures, root=0)
    total = MPI.COMM_WORLD.reduce(done, root=0)
    return finish(out_path, {"cases": total, "failures": sum(every or [], [])}, comm.rank, comm)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
