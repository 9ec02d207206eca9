"""One benchmark case per collective: its buffers, our calls, MPI's call, the check.

A case is built for one message size on every rank.  ``ours(algorithm)``,
``ours_in_place(algorithm)`` and ``mpi()`` return argument-free callables
that the runner times; ``reset(in_place)`` readies the buffers of the
checked call (outputs poisoned, in-place inputs restored) and
``wrong(in_place)`` counts this rank's mismatching result elements after
it.  Sizes follow nccl-tests (see the package docstring).

In place, as nccl-tests times it, is each call's in-place form in the
library's interface: ``all_reduce(x, out=x)``, ``reduce(x, out=x)`` at the
root, ``all_gather(out[rank], out=out)``, ``reduce_scatter(x,
out=x[rank])``, ``all_to_all(x, out=x)`` (``in_place = "own"``).
``broadcast`` is in place already: its one call stands for both
(``"same"``).  ``gather``, ``scatter`` and ``barrier`` have no in-place
form (``"none"``).  Repeated in-place reductions overwrite their input, so
the timed loop reduces values that grow (integers wrap, floats reach
infinity): the time does not depend on the values, and the checked call
starts again from the inputs.

On the cuda transport the buffers of our calls are CuPy copies of the host
ones; MPI's call keeps the host buffers (MPICH is not CUDA-aware), and
NCCL's, where it can be had (``bench.gpu``), runs on the CuPy buffers.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from collectives.dtypes import BFLOAT16

from . import data

Call = Callable[[], Any]

SEED = 0  # of the inputs (bench.data.make)


def mpi_op(op: str):
    """MPI's predefined op for ``op``, or None where MPI has none (avg)."""
    from mpi4py import MPI
    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}.get(op)


_USER_OPS: dict = {}


def bfloat16_op(op: str):
    """MPI has no bfloat16 type and so no op on it: the baseline reduces
    16-bit words (``MPI.UINT16_T``) with a user-defined op (``MPI.Op.Create``)
    that reads them as bfloat16, computes in float32 with numpy and rounds
    to bfloat16, as a user of mpi4py would write it.  None for avg."""
    from mpi4py import MPI
    if op not in ("sum", "prod", "max", "min"):
        return None
    if op not in _USER_OPS:
        uf = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]

        def combine(inbuf, inout, datatype):
            a = np.frombuffer(inbuf, np.uint16).view(BFLOAT16)
            b = np.frombuffer(inout, np.uint16).view(BFLOAT16)
            b[...] = uf(a.astype(np.float32), b.astype(np.float32)).astype(BFLOAT16)
        _USER_OPS[op] = MPI.Op.Create(combine, commute=True)
    return _USER_OPS[op]


def _words(a):
    """A bfloat16 array as an MPI buffer of 16-bit words (None stays None)."""
    from mpi4py import MPI
    return None if a is None else [a.reshape(-1).view(np.uint16), MPI.UINT16_T]


def _b(a: Optional[np.ndarray]):
    """A byte-typed MPI buffer spec over ``a`` (data movement ignores the dtype)."""
    from mpi4py import MPI
    return None if a is None else [a.reshape(-1).view(np.uint8), MPI.BYTE]


def _put(dst, src: np.ndarray) -> None:
    """Copy host array ``src`` into ``dst`` (numpy, or CuPy on the cuda transport)."""
    src = src.reshape(dst.shape)
    if isinstance(dst, np.ndarray):
        np.copyto(dst, src)
    else:
        dst.set(src)


class Case:
    """The buffers and calls of one collective at one size, on this rank.

    ``x0`` is this rank's input on the host; ``x``/``out`` (or ``buf``) are
    the buffers of the out-of-place call, ``ip`` the buffer of the in-place
    one, ``mout``/``mbuf`` MPI's.
    """

    name = ""
    factor_kind = "one"     # "one", "ring" ((n-1)/n), "allreduce" (2(n-1)/n), "none"
    blocked = False         # the size covers n blocks of S // (n * itemsize) elements
    reducing = False        # takes an op
    rooted = False          # takes a root
    in_place = "own"        # "own", "same" (the call is in place already), "none"

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
        self.x0: Optional[np.ndarray] = None
        self.out: Any = None
        self.ip: Any = None
        self._want: Optional[np.ndarray] = None
        self.setup()
        self._mpi = self.mpi()  # on the host buffers, before they move to the GPU
        if comm.transport == "cuda":
            import cupy
            for k in ("x", "out", "buf", "ip"):
                v = getattr(self, k, None)
                if isinstance(v, np.ndarray):
                    setattr(self, k, cupy.asarray(v))

    def in_regions(self) -> None:
        """Move our buffers (x, out, buf, ip; MPI's keep theirs) into
        communicator-allocated arrays (``comm.empty``), the same values:
        collective, so every rank allocates each buffer that any rank has,
        in the same order, and drops it where it has none (a non-root's)."""
        for k in ("x", "out", "buf", "ip"):
            v = getattr(self, k, None)
            mine = v.shape if isinstance(v, np.ndarray) else None
            shapes = [s for s in self.mpicomm.allgather(mine) if s is not None]
            if not shapes:
                continue
            r = self.comm.empty(shapes[0], self.dtype)
            if mine is not None:
                r[...] = v
                setattr(self, k, r)

    def baseline(self, nccl=None) -> Optional[Call]:
        """NCCL's collective on our CuPy buffers where ``nccl`` is given (None
        where NCCL has no such call or dtype), else MPI's on the host buffers."""
        if nccl is not None:
            return nccl.call(self)
        return self._mpi

    def copy(self) -> Optional[Call]:
        """One local copy of the message's bytes (``np.copyto``; on the cuda
        transport a device-to-device copy, waited for), the one-copy reference
        of the ``%cpy`` column; None for the barrier, which moves no bytes.

        Every rank copies at once and the slowest rank's time counts, as for
        the collectives: the reference then shares the cores and the caches as
        they do, at the same size, in the same rounds."""
        if self.nbytes == 0:
            return None
        src, dst = np.ones(self.nbytes, np.uint8), np.zeros(self.nbytes, np.uint8)
        if self.comm.transport != "cuda":
            return lambda: np.copyto(dst, src)
        import cupy
        src, dst = cupy.asarray(src), cupy.asarray(dst)
        # the host stand-in of the tests copies at once: nothing to wait for
        sync = getattr(cupy.cuda.get_current_stream(), "synchronize", lambda: None)

        def device_copy():
            dst[...] = src
            sync()
        return device_copy

    # -- to be provided by each collective --------------------------------
    def setup(self) -> None:
        """Allocate and fill this rank's buffers."""

    def ours(self, algorithm: Optional[str]) -> Call:
        raise NotImplementedError

    def ours_in_place(self, algorithm: Optional[str]) -> Call:
        """The in-place call, for ``in_place == "own"``."""
        raise NotImplementedError

    def mpi(self) -> Optional[Call]:
        """MPI's native collective on same-sized buffers, or None if MPI has none."""
        raise NotImplementedError

    def expected(self) -> Optional[np.ndarray]:
        """This rank's correct result, or None where it receives none."""
        return None

    def prepare(self, in_place: bool, want: Optional[np.ndarray]) -> None:
        """Ready the buffers for the checked call: restore the in-place buffer's
        input, or poison the output so that a stale element cannot pass."""
        if in_place:
            _put(self.ip, self.x0)
        elif want is not None:
            _put(self.out, data.poison(want))

    def result(self, in_place: bool):
        """The buffer that holds this rank's result after the call."""
        return self.ip if in_place else self.out

    def choose_nbytes(self) -> int:
        """The ``nbytes`` that the library's default chooser sees for this call."""
        return self.nbytes

    # -- shared ------------------------------------------------------------
    def reset(self, in_place: bool = False) -> None:
        """Before the checked call (on every rank)."""
        self._want = self.expected()
        self.prepare(in_place, self._want)

    def wrong(self, in_place: bool = False) -> int:
        """This rank's mismatching result elements after the checked call."""
        want, self._want = self._want, None
        return 0 if want is None else data.mismatches(self.result(in_place), want)

    def factor(self) -> float:
        n = self.n
        return {"one": 1.0, "ring": (n - 1) / n, "allreduce": 2 * (n - 1) / n,
                "none": 0.0}[self.factor_kind]

    def inputs(self, rank: int, count: int, offset: int = 0) -> np.ndarray:
        return data.make(self.dtype, count, rank, SEED, self.op, offset)

    def reduced(self, count: int, offset: int = 0) -> np.ndarray:
        return data.reduced(self.n, self.dtype, count, self.op, SEED, offset)

    def mpi_reduce_op(self):
        return bfloat16_op(self.op) if self.dtype == BFLOAT16 else mpi_op(self.op)

    def mpi_buffers(self, *arrays):
        """MPI's buffers for ``arrays``: the arrays themselves (mpi4py maps
        their dtype), or 16-bit words for bfloat16 (see ``bfloat16_op``)."""
        return [_words(a) for a in arrays] if self.dtype == BFLOAT16 else list(arrays)

    def mpi_reducing(self, fn) -> Optional[Call]:
        """MPI's reducing call ``fn(x, mout, op=...)``, or None for an op MPI lacks."""
        mop = self.mpi_reduce_op()
        if mop is None:
            return None
        x, out = self.mpi_buffers(self.x, self.mout)
        return lambda: fn(x, out, op=mop)


class AllReduce(Case):
    name, factor_kind, reducing = "all_reduce", "allreduce", True

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.count)
        self.out = np.empty_like(self.x0)
        self.mout = np.empty_like(self.x0)
        self.ip = self.x0.copy()

    def ours(self, algorithm):
        c, x, out, op = self.comm, self.x, self.out, self.op
        return lambda: c.all_reduce(x, out, op=op, algorithm=algorithm)

    def ours_in_place(self, algorithm):
        c, ip, op = self.comm, self.ip, self.op
        return lambda: c.all_reduce(ip, out=ip, op=op, algorithm=algorithm)

    def mpi(self):
        return self.mpi_reducing(self.mpicomm.Allreduce)

    def expected(self):
        return self.reduced(self.count)


class Broadcast(Case):
    name, rooted, in_place = "broadcast", True, "same"

    def setup(self) -> None:
        self.x0 = self.inputs(self.root, self.count)
        self.buf = self.x0.copy() if self.rank == self.root else np.zeros_like(self.x0)
        self.mbuf = self.buf.copy()

    def ours(self, algorithm):
        c, buf, root = self.comm, self.buf, self.root
        return lambda: c.broadcast(buf, root, algorithm=algorithm)

    def mpi(self):
        mc, buf, root = self.mpicomm, _b(self.mbuf), self.root
        return lambda: mc.Bcast(buf, root)

    def expected(self):
        return self.x0

    def prepare(self, in_place, want):
        _put(self.buf, want if self.rank == self.root else data.poison(want))

    def result(self, in_place):
        return self.buf


class Reduce(Case):
    name, reducing, rooted = "reduce", True, True

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.count)
        me = self.rank == self.root
        self.out = np.empty_like(self.x0) if me else None
        self.mout = np.empty_like(self.x0) if me else None
        self.ip = self.x0.copy()

    def ours(self, algorithm):
        c, x, out, op, root = self.comm, self.x, self.out, self.op, self.root
        return lambda: c.reduce(x, out, op=op, root=root, algorithm=algorithm)

    def ours_in_place(self, algorithm):
        c, ip, op, root = self.comm, self.ip, self.op, self.root
        out = ip if self.rank == root else None
        return lambda: c.reduce(ip, out, op=op, root=root, algorithm=algorithm)

    def mpi(self):
        mop = self.mpi_reduce_op()
        if mop is None:
            return None
        (x, out), mc, root = self.mpi_buffers(self.x, self.mout), self.mpicomm, self.root
        return lambda: mc.Reduce(x, out, op=mop, root=root)

    def expected(self):
        return self.reduced(self.count) if self.rank == self.root else None


class AllGather(Case):
    name, factor_kind, blocked = "all_gather", "ring", True

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.m)
        self.out = np.empty((self.n, self.m), self.dtype)
        self.mout = np.empty_like(self.out)
        self.ip = np.zeros_like(self.out)
        self.ip[self.rank] = self.x0

    def ours(self, algorithm):
        c, x, out = self.comm, self.x, self.out
        return lambda: c.all_gather(x, out, algorithm=algorithm)

    def ours_in_place(self, algorithm):
        c, ip = self.comm, self.ip
        mine = ip[self.rank]
        return lambda: c.all_gather(mine, ip, algorithm=algorithm)

    def mpi(self):
        mc, x, out = self.mpicomm, _b(self.x), _b(self.mout)
        return lambda: mc.Allgather(x, out)

    def expected(self):
        return data.stacked(self.n, self.dtype, self.m, SEED)

    def prepare(self, in_place, want):
        p = data.poison(want)
        if in_place:
            p[self.rank] = self.x0
        _put(self.ip if in_place else self.out, p)

    def choose_nbytes(self) -> int:
        return self.x.nbytes


class ReduceScatter(Case):
    name, factor_kind, blocked, reducing = "reduce_scatter", "ring", True, True

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.count).reshape(self.n, self.m)
        self.out = np.empty(self.m, self.dtype)
        self.mout = np.empty_like(self.out)
        self.ip = self.x0.copy()

    def ours(self, algorithm):
        c, x, out, op = self.comm, self.x, self.out, self.op
        return lambda: c.reduce_scatter(x, out, op=op, algorithm=algorithm)

    def ours_in_place(self, algorithm):
        c, ip, op = self.comm, self.ip, self.op
        mine = ip[self.rank]
        return lambda: c.reduce_scatter(ip, mine, op=op, algorithm=algorithm)

    def mpi(self):
        return self.mpi_reducing(self.mpicomm.Reduce_scatter_block)

    def expected(self):
        return self.reduced(self.m, offset=self.rank * self.m)

    def result(self, in_place):
        return self.ip[self.rank] if in_place else self.out


class AllToAll(Case):
    name, factor_kind, blocked = "all_to_all", "ring", True

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.count).reshape(self.n, self.m)
        self.out = np.empty_like(self.x0)
        self.mout = np.empty_like(self.x0)
        self.ip = self.x0.copy()

    def ours(self, algorithm):
        c, x, out = self.comm, self.x, self.out
        return lambda: c.all_to_all(x, out, algorithm=algorithm)

    def ours_in_place(self, algorithm):
        c, ip = self.comm, self.ip
        return lambda: c.all_to_all(ip, ip, algorithm=algorithm)

    def mpi(self):
        mc, x, out = self.mpicomm, _b(self.x), _b(self.mout)
        return lambda: mc.Alltoall(x, out)

    def expected(self):
        return np.stack([self.inputs(j, self.m, offset=self.rank * self.m)
                         for j in range(self.n)])


class Gather(Case):
    name, factor_kind, blocked, rooted, in_place = "gather", "ring", True, True, "none"

    def setup(self) -> None:
        self.x = self.x0 = self.inputs(self.rank, self.m)
        me = self.rank == self.root
        self.out = np.empty((self.n, self.m), self.dtype) if me else None
        self.mout = np.empty((self.n, self.m), self.dtype) if me else None

    def ours(self, algorithm):
        c, x, out, root = self.comm, self.x, self.out, self.root
        return lambda: c.gather(x, out, root=root, algorithm=algorithm)

    def mpi(self):
        mc, x, out, root = self.mpicomm, _b(self.x), _b(self.mout), self.root
        return lambda: mc.Gather(x, out, root=root)

    def expected(self):
        return data.stacked(self.n, self.dtype, self.m, SEED) if self.rank == self.root else None

    def choose_nbytes(self) -> int:
        return self.x.nbytes


class Scatter(Case):
    name, factor_kind, blocked, rooted, in_place = "scatter", "ring", True, True, "none"

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

    def expected(self):
        return self.inputs(self.root, self.m, offset=self.rank * self.m)

    def choose_nbytes(self) -> int:
        return self.out.nbytes


class Barrier(Case):
    name, factor_kind, in_place = "barrier", "none", "none"

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
