"""bfloat16 and float16 under mpiexec: ``python tests/bfloat16_check.py OUT.json TRANSPORT``.

Every collective on bfloat16 (``cc.bfloat16``), with every algorithm and op,
in place and out of place, against a reference computed in float32 in rank
order and rounded once to bfloat16:

- *exact* inputs (small integers; for prod 0.5, 1, 2, -1): every algorithm
  gives the reference bit for bit;
- *inexact* inputs (uniform in [-1, 1]): ``direct`` and ``two_shot`` reduce
  all N contributions in rank order in one float32 pass, so they give the
  reference bit for bit too; the other algorithms round after each step, and
  are within N roundings of it;
- the ranks' results are the same bits for ``direct`` and ``two_shot``
  (and for every algorithm on exact inputs).

Then all_reduce of float16 and bfloat16 through the compiled kernels and
through numpy (``kernels.use("numpy")``, as ``COLLECTIVES_KERNELS=0``) give
the same bits on exact inputs.  Each rank prints its failures on stderr;
rank 0 writes the number of checks and of failures, over all ranks, to
OUT.json.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from collectives import kernels  # noqa: E402
from launch import finish  # noqa: E402

BF16, F32 = np.dtype(cc.bfloat16), np.float32
OPS = ("sum", "prod", "max", "min", "avg")
UFUNCS = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum,
          "min": np.minimum}
COUNTS = (1, 1001, 40_003)  # one element, uneven blocks, chunked rounds (> 32 KiB)
U = 2.0 ** -8  # bfloat16's unit roundoff
BITWISE = ("direct", "two_shot")  # one float32 pass over all N, in rank order


def inputs(rank: int, count: int, op: str, exact: bool, dtype=BF16) -> np.ndarray:
    """Rank ``rank``'s input: exact reductions, or uniform in [-1, 1]."""
    rng = np.random.default_rng([rank, count, OPS.index(op), exact])
    if not exact:
        return rng.uniform(-1, 1, count).astype(F32).astype(dtype)
    if op == "prod":
        return rng.choice(np.array([0.5, 1, 2, -1], F32), count).astype(dtype)
    return rng.integers(-8, 9, count).astype(F32).astype(dtype)


def reference(parts: list[np.ndarray], op: str) -> np.ndarray:
    """The reduction in float32 in rank order, rounded once; avg divides the
    rounded sum in float32 and rounds once more."""
    acc = parts[0].astype(F32)
    for p in parts[1:]:
        UFUNCS[op](acc, p.astype(F32), out=acc)
    out = acc.astype(parts[0].dtype)
    if op == "avg":
        out = (out.astype(F32) / F32(len(parts))).astype(parts[0].dtype)
    return out


def tolerance(parts: list[np.ndarray], op: str, want: np.ndarray) -> np.ndarray:
    """How far an algorithm that rounds after each of its N-1 steps may be
    from the reference: N roundings of the largest partial result."""
    n = len(parts)
    if op in ("max", "min"):
        return np.zeros(want.shape, F32)
    if op == "prod":
        return n * U * np.abs(want.astype(F32))
    return n * U * sum(np.abs(p.astype(F32)) for p in parts)


class Checker:
    def __init__(self, comm):
        self.comm, self.failures, self.checks = comm, [], 0

    def same(self, got, want, what: str, tol=None) -> None:
        """``got`` equals ``want``: bit for bit, or within ``tol``."""
        self.checks += 1
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append(f"rank {self.comm.rank} {what}: got {got.dtype}{got.shape}, "
                                 f"want {want.dtype}{want.shape}")
            return
        if tol is None:
            bad = np.flatnonzero(got.view(np.uint16) != want.view(np.uint16))
        else:
            bad = np.flatnonzero(~(np.abs(got.astype(F32) - want.astype(F32)) <= tol))
        if bad.size:
            i = bad[:3]
            self.failures.append(f"rank {self.comm.rank} {what}: {bad.size} of {want.size} "
                                 f"differ, at {i.tolist()}: got {got[i].tolist()}, "
                                 f"want {want[i].tolist()}")

    def alike(self, got: np.ndarray, what: str) -> None:
        """Every rank holds the same bits (all_gather of the raw 16-bit words)."""
        rows = self.comm.all_gather(np.ascontiguousarray(got).view(np.uint16))
        self.checks += 1
        if not (rows == rows[0]).all():
            self.failures.append(f"{what}: the ranks' results differ "
                                 f"(rank {self.comm.rank} compared)")


def reducing(c: Checker, count: int, op: str, exact: bool) -> None:
    """all_reduce, reduce (at the first and last rank) and reduce_scatter."""
    comm = c.comm
    n, r = comm.size, comm.rank
    parts = [inputs(p, count, op, exact) for p in range(n)]
    want = reference(parts, op)
    tol = tolerance(parts, op, want)
    blocks = [inputs(p, n * count, op, exact).reshape(n, count) for p in range(n)]
    want_rs = reference(blocks, op)[r]
    tol_rs = tolerance(blocks, op, reference(blocks, op))[r]
    for alg in comm.algorithms("all_reduce"):
        for in_place in (False, True):
            what = f"all_reduce {alg} {op} count={count} exact={exact} in_place={in_place}"
            x = parts[r].copy()
            got = comm.all_reduce(x, out=x if in_place else None, op=op, algorithm=alg)
            bitwise = exact or alg in BITWISE
            c.same(got, want, what, None if bitwise else tol)
            if bitwise:
                c.alike(got, what)
    for alg in comm.algorithms("reduce"):
        for root in sorted({0, n - 1}):
            for in_place in (False, True):
                what = f"reduce {alg} root={root} {op} count={count} exact={exact} " \
                       f"in_place={in_place}"
                x = parts[r].copy()
                got = comm.reduce(x, out=x if in_place and r == root else None, op=op,
                                  root=root, algorithm=alg)
                if r == root:
                    c.same(got, want, what, None if exact or alg in BITWISE else tol)
                elif got is not None:
                    c.failures.append(f"rank {r} {what}: got a result off the root")
    for alg in comm.algorithms("reduce_scatter"):
        for in_place in (False, True):
            what = f"reduce_scatter {alg} {op} count={count} exact={exact} in_place={in_place}"
            x = blocks[r].copy()
            got = comm.reduce_scatter(x, out=x[r] if in_place else None, op=op, algorithm=alg)
            c.same(got, want_rs, what, None if exact or alg in BITWISE else tol_rs)


def moving(c: Checker, count: int) -> None:
    """The calls that move bytes without reducing them: exact, every algorithm."""
    comm = c.comm
    n, r = comm.size, comm.rank
    mine = inputs(r, count, "sum", False)
    every = np.stack([inputs(p, count, "sum", False) for p in range(n)])
    root = n - 1
    for alg in comm.algorithms("broadcast"):
        buf = mine.copy()
        c.same(comm.broadcast(buf, root=root, algorithm=alg), every[root], f"broadcast {alg}")
    for alg in comm.algorithms("all_gather"):
        c.same(comm.all_gather(mine, algorithm=alg), every, f"all_gather {alg}")
        out = np.zeros((n, count), BF16)
        out[r] = mine
        c.same(comm.all_gather(out[r], out=out, algorithm=alg), every, f"all_gather {alg} in place")
    for alg in comm.algorithms("gather"):
        got = comm.gather(mine, root=root, algorithm=alg)
        if r == root:
            c.same(got, every, f"gather {alg}")
    for alg in comm.algorithms("scatter"):
        table = every if r == root else None
        c.same(comm.scatter(table, np.empty(count, BF16), root=root, algorithm=alg), every[r],
               f"scatter {alg}")
    square = np.stack([inputs(p, n * count, "sum", False).reshape(n, count) for p in range(n)])
    for alg in comm.algorithms("all_to_all"):
        c.same(comm.all_to_all(square[r], algorithm=alg), square[:, r], f"all_to_all {alg}")


def kernels_against_numpy(c: Checker) -> None:
    """float16 and bfloat16 all_reduce: compiled kernels and numpy, the same bits."""
    comm = c.comm
    before = kernels.isa()
    try:
        for dt in (np.dtype(np.float16), BF16):
            for op in OPS:
                x = inputs(comm.rank, 40_003, op, True, dt)
                for alg in comm.algorithms("all_reduce"):
                    got = {}
                    for path in ("best", "numpy"):
                        kernels.use(path)
                        got[path] = comm.all_reduce(x, op=op, algorithm=alg)
                    c.same(got["best"], got["numpy"], f"all_reduce {dt} {op} {alg}: "
                           f"kernels ({before}) against numpy")
    finally:
        kernels.use(before)


def main() -> int:
    out_path, transport = sys.argv[1], sys.argv[2]
    comm = cc.init(transport=transport)
    c = Checker(comm)
    for count in COUNTS:
        for op in OPS:
            for exact in (True, False):
                reducing(c, count, op, exact)
        moving(c, count)
    kernels_against_numpy(c)
    for line in c.failures:
        print(line, file=sys.stderr, flush=True)
    bad = comm.all_reduce(np.array([len(c.failures), c.checks], np.int64))
    result = {"checks": int(bad[1]), "failures": int(bad[0])}
    return finish(out_path, result, comm.rank, comm)


if __name__ == "__main__":
    sys.exit(main())
