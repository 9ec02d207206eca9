"""collectives: hand-written collective communication for numpy arrays.

    import collectives as cc
    comm = cc.init()                      # under mpiexec -n N python prog.py
    y = comm.all_reduce(x, op=cc.SUM)
"""
from transports.errors import CollectiveError, CollectiveTimeout, PeerFailure

from .communicator import Communicator, Traffic, init
from .debug import CollectiveMismatch
from .ops import AVG, MAX, MIN, PROD, SUM, Op
from .tuning import TuningError, TuningWarning
from .work import Work

__version__ = "0.1.0"


def __getattr__(name: str):
    """``DTYPES`` and ``bfloat16``: they import ml_dtypes, on first use
    (collectives/dtypes.py)."""
    if name in ("DTYPES", "bfloat16"):
        from . import dtypes
        return getattr(dtypes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["init", "Communicator", "Traffic", "Work", "Op", "SUM", "PROD", "MAX", "MIN",
           "AVG", "DTYPES", "bfloat16", "CollectiveError", "CollectiveTimeout", "PeerFailure",
           "CollectiveMismatch", "TuningError", "TuningWarning"]
