"""One benchmark case per collective: its buffers, our call, MPI's call, the check.

A case is built for one message size on every rank.  ``ours(algorithm)``
and ``mpi()`` return argument-free callables that the runner times;
``reset()`` overwrites the outputs before the checked call and ``wrong()``
counts this rank's mismatching result elements afterwards.  Sizes follow
nccl-tests (see the package docstring).

On the cuda transport the buffers of our call are CuPy copies of the host
ones; MPI's call keeps the host buffers (MPICH is not CUDA-aware), and
NCCL's, where it can be had (``bench.gpu``), runs on the CuPy buffers.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from . import data

Call = Callable[[], Any]

_SENTINEL = 0  # inputs are >= 1 (see bench.data), so a reset output never matches


def mpi_op(op: str):
    """MPI's predefined op for ``op``, or None where MPI has none (avg)."""
    from mpi4py import MPI
    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}.get(op)


def _b(a: Optional[np.ndarray]):
    """A byte-typed MPI buffer spec over ``a`` (data movement ignores the dtype)."""
    from mpi4py import MPI
    return None if a is None else [a.reshape(-1).view(np.uint8), MPI.BYTE]


class Case:
    """The buffers and calls of one collective at one size, on this rank."""

    name = ""
    factor_kind = "one"     # "one", "ring" ((n-1)/n), "allreduce" (2(n-1)/n), "none"
    blocked = False         # the size covers n blocks of S // (n * itemsize) elements
    reducing = False        # takes an op
    rooted = False          # takes a root

    def __init__(self, comm, mpicomm, nbytes: int, dtype: np.dtype, op: str, root: int):
        self.comm, self.mpicomm = comm, mpicomm
        self.n, self.rank = comm.size, comm.rank
        self.dtype = np.dtype(dtype)
        self.op = op if self.reducing else "sum"
        self.root = root if self.rooted else -1
        isz = self.dtype.itemsize
        if self.blocked:
            self.m = nbytes // (isz * self.n)      # elements per block
            self.count = self.m * self.n
        else:
            self.count = nbytes // isz
            self.m = self.count
        self.nbytes = self.count * isz
        self.setup()
        self._mpi = self.mpi()  # on the host buffers, before they move to the GPU
        if comm.transport == "cuda":
            import cupy
            for k in ("x", "out", "buf"):
                v = getattr(self, k, None)
                if isinstance(v, np.ndarray):
                    setattr(self, k, cupy.asarray(v))

    def baseline(self, nccl=None) -> Optional[Call]:
        """NCCL's collective on our CuPy buffers where ``nccl`` is given (None
        where NCCL has no such call or dtype), else MPI's on the host buffers."""
        if nccl is not None:
            return nccl.call(self)
        return self._mpi

    # -- to be provided by each collective --------------------------------
    def setup(self) -> None:
        """Allocate and fill this rank's buffers."""

    def ours(self, algorithm: Optional[str]) -> Call:
        raise NotImplementedError

    def mpi(self) -> Optional[Call]:
        """MPI's native collective on same-sized buffers, or None if MPI has none."""
        raise NotImplementedError

    def reset(self) -> None:
        """Overwrite the outputs so that a stale result cannot pass the check."""

    def wrong(self) -> int:
        """This rank's mismatching result elements after ``ours`` ran."""
        return 0

    def choose_nbytes(self) -> int:
        """The ``nbytes`` that the library's default chooser sees for this call."""
        return self.nbytes

    # -- shared ------------------------------------------------------------
    def factor(self) -> float:
        n = self.n
        return {"one": 1.0, "ring": (n - 1) / n, "allreduce": 2 * (n - 1) / n,
                "none": 0.0}[self.factor_kind]

    def inputs(self, rank: int, count: int, offset: int = 0) -> np.ndarray:
        return data.inputs(rank, count, self.dtype, self.op, offset)

    def mpi_reduce_op(self):
        return mpi_op(self.op)

    def mpi_reducing(self, fn) -> Optional[Call]:
        """MPI's reducing call ``fn(x, mout, op=...)``, or None for an op MPI lacks."""
        mop = self.mpi_reduce_op()
        if mop is None:
            return None
        x, out = self.x, self.mout
        return lambda: fn(x, out, op=mop)


class AllReduce(Case):
    name, factor_kind, reducing = "all_reduce", "allreduce", True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.count)
        self.out = np.empty_like(self.x)
        self.mout = np.empty_like(self.x)

    def ours(self, algorithm):
        c, x, out, op = self.comm, self.x, self.out, self.op
        return lambda: c.all_reduce(x, out, op=op, algorithm=algorithm)

    def mpi(self):
        return self.mpi_reducing(self.mpicomm.Allreduce)

    def reset(self) -> None:
        self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        want = data.reduced(self.n, self.count, self.dtype, self.op)
        return data.mismatches(self.out, want, self.n)


class Broadcast(Case):
    name, rooted = "broadcast", True

    def setup(self) -> None:
        self.want = self.inputs(self.root, self.count)
        self.buf = self.want.copy() if self.rank == self.root else np.zeros_like(self.want)
        self.mbuf = self.buf.copy()

    def ours(self, algorithm):
        c, buf, root = self.comm, self.buf, self.root
        return lambda: c.broadcast(buf, root, algorithm=algorithm)

    def mpi(self):
        mc, buf, root = self.mpicomm, _b(self.mbuf), self.root
        return lambda: mc.Bcast(buf, root)

    def reset(self) -> None:
        if self.rank != self.root:
            self.buf.fill(_SENTINEL)

    def wrong(self) -> int:
        return data.mismatches(self.buf, self.want, self.n)


class Reduce(Case):
    name, reducing, rooted = "reduce", True, True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.count)
        me = self.rank == self.root
        self.out = np.empty_like(self.x) if me else None
        self.mout = np.empty_like(self.x) if me else None

    def ours(self, algorithm):
        c, x, out, op, root = self.comm, self.x, self.out, self.op, self.root
        return lambda: c.reduce(x, out, op=op, root=root, algorithm=algorithm)

    def mpi(self):
        mop = self.mpi_reduce_op()
        if mop is None:
            return None
        mc, x, out, root = self.mpicomm, self.x, self.mout, self.root
        return lambda: mc.Reduce(x, out, op=mop, root=root)

    def reset(self) -> None:
        if self.out is not None:
            self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        if self.out is None:
            return 0
        want = data.reduced(self.n, self.count, self.dtype, self.op)
        return data.mismatches(self.out, want, self.n)


class AllGather(Case):
    name, factor_kind, blocked = "all_gather", "ring", True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.m)
        self.out = np.empty((self.n, self.m), self.dtype)
        self.mout = np.empty_like(self.out)

    def ours(self, algorithm):
        c, x, out = self.comm, self.x, self.out
        return lambda: c.all_gather(x, out, algorithm=algorithm)

    def mpi(self):
        mc, x, out = self.mpicomm, _b(self.x), _b(self.mout)
        return lambda: mc.Allgather(x, out)

    def reset(self) -> None:
        self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        want = np.stack([self.inputs(q, self.m) for q in range(self.n)])
        return data.mismatches(self.out, want, self.n)

    def choose_nbytes(self) -> int:
        return self.x.nbytes


class ReduceScatter(Case):
    name, factor_kind, blocked, reducing = "reduce_scatter", "ring", True, True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.count).reshape(self.n, self.m)
        self.out = np.empty(self.m, self.dtype)
        self.mout = np.empty_like(self.out)

    def ours(self, algorithm):
        c, x, out, op = self.comm, self.x, self.out, self.op
        return lambda: c.reduce_scatter(x, out, op=op, algorithm=algorithm)

    def mpi(self):
        return self.mpi_reducing(self.mpicomm.Reduce_scatter_block)

    def reset(self) -> None:
        self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        want = data.reduced(self.n, self.m, self.dtype, self.op, offset=self.rank * self.m)
        return data.mismatches(self.out, want, self.n)


class AllToAll(Case):
    name, factor_kind, blocked = "all_to_all", "ring", True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.count).reshape(self.n, self.m)
        self.out = np.empty_like(self.x)
        self.mout = np.empty_like(self.x)

    def ours(self, algorithm):
        c, x, out = self.comm, self.x, self.out
        return lambda: c.all_to_all(x, out, algorithm=algorithm)

    def mpi(self):
        mc, x, out = self.mpicomm, _b(self.x), _b(self.mout)
        return lambda: mc.Alltoall(x, out)

    def reset(self) -> None:
        self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        want = np.stack([self.inputs(j, self.m, offset=self.rank * self.m)
                         for j in range(self.n)])
        return data.mismatches(self.out, want, self.n)


class Gather(Case):
    name, factor_kind, blocked, rooted = "gather", "ring", True, True

    def setup(self) -> None:
        self.x = self.inputs(self.rank, self.m)
        me = self.rank == self.root
        self.out = np.empty((self.n, self.m), self.dtype) if me else None
        self.mout = np.empty((self.n, self.m), self.dtype) if me else None

    def ours(self, algorithm):
        c, x, out, root = self.comm, self.x, self.out, self.root
        return lambda: c.gather(x, out, root=root, algorithm=algorithm)

    def mpi(self):
        mc, x, out, root = self.mpicomm, _b(self.x), _b(self.mout), self.root
        return lambda: mc.Gather(x, out, root=root)

    def reset(self) -> None:
        if self.out is not None:
            self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        if self.out is None:
            return 0
        want = np.stack([self.inputs(q, self.m) for q in range(self.n)])
        return data.mismatches(self.out, want, self.n)

    def choose_nbytes(self) -> int:
        return self.x.nbytes


class Scatter(Case):
    name, factor_kind, blocked, rooted = "scatter", "ring", True, True

    def setup(self) -> None:
        me = self.rank == self.root
        self.x = self.inputs(self.root, self.count).reshape(self.n, self.m) if me else None
        self.out = np.empty(self.m, self.dtype)
        self.mout = np.empty_like(self.out)

    def ours(self, algorithm):
        c, x, out, root = self.comm, self.x, self.out, self.root
        return lambda: c.scatter(x, out, root=root, algorithm=algorithm)

    def mpi(self):
        mc, x, out, root = self.mpicomm, _b(self.x), _b(self.mout), self.root
        return lambda: mc.Scatter(x, out, root=root)

    def reset(self) -> None:
        self.out.fill(_SENTINEL)

    def wrong(self) -> int:
        want = self.inputs(self.root, self.m, offset=self.rank * self.m)
        return data.mismatches(self.out, want, self.n)

    def choose_nbytes(self) -> int:
        return self.out.nbytes


class Barrier(Case):
    name, factor_kind = "barrier", "none"

    def __init__(self, comm, mpicomm, nbytes: int, dtype: np.dtype, op: str, root: int):
        super().__init__(comm, mpicomm, 0, dtype, op, root)

    def ours(self, algorithm):
        c = self.comm
        return lambda: c.barrier(algorithm=algorithm)

    def mpi(self):
        mc = self.mpicomm
        return lambda: mc.Barrier()


CASES: dict[str, type[Case]] = {c.name: c for c in (
    AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter,
    Barrier)}
COLLECTIVES: tuple[str, ...] = tuple(CASES)
