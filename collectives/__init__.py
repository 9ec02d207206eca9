"""collectives: hand-written collective communication for numpy arrays.

    import collectives as cc
    comm = cc.init()                      # under mpiexec -n N python prog.py
    y = comm.all_reduce(x, op=cc.SUM)
"""
from transports.errors import CollectiveError, CollectiveTimeout, PeerFailure

from .communicator import Communicator, Traffic, init
from .debug import CollectiveMismatch
from .dtypes import DTYPES, bfloat16
from .ops import AVG, MAX, MIN, PROD, SUM, Op
from .work import Work

__version__ = "0.1.0"

__all__ = ["init", "Communicator", "Traffic", "Work", "Op", "SUM", "PROD", "MAX", "MIN",
           "AVG", "DTYPES", "bfloat16", "CollectiveError", "CollectiveTimeout", "PeerFailure",
           "CollectiveMismatch"]
