"""The GPU side of the benchmark: each rank's device, and NCCL as the baseline.

``--transport cuda`` measures the library on CuPy buffers.  Its baseline is
NCCL's own collective on the same CuPy buffers in the same run, where NCCL
can be had: CuPy's NCCL binding (``cupy.cuda.nccl``, which loads the NCCL
library, e.g. from the ``nvidia-nccl-cu12`` wheel) and one GPU per rank
(NCCL refuses two ranks on one GPU).  Elsewhere the baseline stays MPI's
collective on host buffers, and the header says why.
"""
from __future__ import annotations

import numpy as np


def use_device(rank: int) -> None:
    """Rank r uses GPU r mod (number of GPUs), before the communicator is made."""
    import cupy
    cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()


class Nccl:
    """An NCCL communicator over the ranks, and its calls on a case's buffers."""

    def __init__(self, mpicomm):
        import cupy
        from cupy.cuda import nccl
        self.cp, self.nccl = cupy, nccl
        uid = nccl.get_unique_id() if mpicomm.Get_rank() == 0 else None
        uid = mpicomm.bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(mpicomm.Get_size(), uid, mpicomm.Get_rank())
        self.stream = cupy.cuda.Stream(non_blocking=True)
        names = {"float16": "FLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
                 "int8": "INT8", "uint8": "UINT8", "int32": "INT32", "uint32": "UINT32",
                 "int64": "INT64", "uint64": "UINT64"}
        self.dtypes = {np.dtype(k): getattr(nccl, "NCCL_" + v) for k, v in names.items()
                       if hasattr(nccl, "NCCL_" + v)}
        self.ops = {k: getattr(nccl, "NCCL_" + k.upper()) for k in
                    ("sum", "prod", "max", "min", "avg") if hasattr(nccl, "NCCL_" + k.upper())}

    def call(self, case):
        """NCCL's collective for ``case`` (finished on return), or None."""
        dt, op = self.dtypes.get(case.dtype), self.ops.get(case.op)
        if dt is None or (case.reducing and op is None):
            return None
        c, st, name = self.comm, self.stream, case.name
        p = lambda a: 0 if a is None else a.data.ptr  # noqa: E731
        if name == "all_reduce":
            args = (c.allReduce, p(case.x), p(case.out), case.count, dt, op, st.ptr)
        elif name == "reduce":
            out = case.out if case.out is not None else case.x  # ignored off the root
            args = (c.reduce, p(case.x), p(out), case.count, dt, op, case.root, st.ptr)
        elif name == "broadcast":
            args = (c.broadcast, p(case.buf), p(case.buf), case.count, dt, case.root, st.ptr)
        elif name == "all_gather":
            args = (c.allGather, p(case.x), p(case.out), case.m, dt, st.ptr)
        elif name == "reduce_scatter":
            args = (c.reduceScatter, p(case.x), p(case.out), case.m, dt, op, st.ptr)
        else:
            return None
        fn, rest = args[0], args[1:]

        def run():
            fn(*rest)
            st.synchronize()
        return run


def nccl_baseline(mpicomm) -> tuple[Nccl | None, str]:
    """(NCCL for the baseline, "") where every rank can have it; else (None, why)."""
    import cupy
    from mpi4py import MPI
    why = ""
    bus = cupy.cuda.Device().pci_bus_id
    buses = mpicomm.allgather(bus)
    if len(set(buses)) < len(buses):
        why = f"{len(buses)} ranks share {len(set(buses))} GPU(s); NCCL needs one GPU per rank"
    else:
        try:
            from cupy.cuda import nccl  # noqa: F401
        except Exception as e:
            why = f"no NCCL for CuPy ({type(e).__name__}: {e})"
    if not mpicomm.allreduce(not why, op=MPI.LAND):
        return None, why or "NCCL is missing on another rank"
    try:
        nc, why = Nccl(mpicomm), ""
    except Exception as e:
        nc, why = None, f"NCCL did not start ({type(e).__name__}: {e})"
    if not mpicomm.allreduce(nc is not None, op=MPI.LAND):
        return None, why or "NCCL did not start on another rank"
    return nc, ""
