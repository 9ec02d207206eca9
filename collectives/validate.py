"""Argument checks, all in one place, run before any byte moves.

Each check raises TypeError (wrong kind of thing) or ValueError (right kind,
wrong value) whose message names the call, the argument and what was expected.
"""
from __future__ import annotations

import numbers
from typing import Iterable

import numpy as np

from transports import TAG_UB

from .arrays import address, is_device
from .dtypes import DEVICE_DTYPES, NAMES, is_bfloat16, supported

_DEVICE_DTYPES = frozenset(DEVICE_DTYPES)


def array(call: str, name: str, a, *, writable: bool = False, device: int | None = None):
    """A supported array: numpy, or CuPy on CUDA device ``device`` where the
    communicator has one (``device`` None: numpy only)."""
    if not isinstance(a, np.ndarray):
        return _device_array(call, name, a, device)
    if not supported(a.dtype):
        raise TypeError(f"{call}: {name}.dtype {a.dtype} is not supported; expected one of "
                        f"{NAMES}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{call}: {name} must be C-contiguous (use numpy.ascontiguousarray)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{call}: {name} is read-only; the result is written into it")
    return a


def _device_array(call: str, name: str, a, device: int | None):
    kinds = "numpy.ndarray" if device is None else "numpy.ndarray or cupy.ndarray"
    if not is_device(a):
        raise TypeError(f"{call}: {name} must be a {kinds} (or an object with __dlpack__, "
                        f"__array_interface__ or the buffer protocol), got {type(a).__name__}")
    if device is None:
        raise TypeError(f"{call}: {name} is a cupy.ndarray, but this communicator's transport "
                        "moves host memory only; use cc.init(transport='cuda') (or 'auto' "
                        "with cupy imported before cc.init)")
    if a.dtype not in _DEVICE_DTYPES:
        why = (" for CuPy arrays (CuPy's kernels have no bfloat16; reduce in float32, or "
               "move the array to the host)" if is_bfloat16(a.dtype) else "")
        raise TypeError(f"{call}: {name}.dtype {a.dtype} is not supported{why}; expected one "
                        f"of {', '.join(str(d) for d in DEVICE_DTYPES)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{call}: {name} must be C-contiguous (use cupy.ascontiguousarray)")
    if a.device.id != device:
        raise ValueError(f"{call}: {name} is on CUDA device {a.device.id}; this communicator "
                         f"uses device {device}")
    return a


def out(call: str, o, shape: tuple, x, what: str, device: int | None = None):
    """Check a caller's ``out``: writable, contiguous, of ``shape``, of ``x``'s
    dtype and of ``x``'s kind (numpy or CuPy)."""
    array(call, "out", o, writable=True, device=device)
    if o.shape != tuple(shape):
        raise ValueError(f"{call}: out has shape {o.shape}, expected {tuple(shape)} ({what})")
    if o.dtype != x.dtype:
        raise TypeError(f"{call}: out has dtype {o.dtype}, expected {x.dtype} (the dtype of x)")
    same_kind(call, x, o)
    return o


def same_kind(call: str, x, o) -> None:
    """``x`` and ``out`` both numpy or both CuPy."""
    if isinstance(x, np.ndarray) is not isinstance(o, np.ndarray):
        raise TypeError(f"{call}: out is a {_kind(o)} but x is a {_kind(x)}; both must be "
                        "numpy arrays or both CuPy arrays")


def _kind(a) -> str:
    return "numpy.ndarray" if isinstance(a, np.ndarray) else f"{type(a).__module__}.ndarray"


def no_overlap(call: str, x: np.ndarray, o: np.ndarray) -> bool:
    """True for in place (``out`` is ``x`` or a view of exactly its bytes);
    ValueError for any other overlap of ``out`` and ``x``."""
    if o is not x and not np.may_share_memory(x, o):
        return False
    if not (o is x or (o.nbytes == x.nbytes and address(o) == address(x))):
        raise ValueError(f"{call}: out overlaps x; pass out=x for in place or a separate array")
    return True


def block_in_place(call: str, whole: np.ndarray, part: np.ndarray, rank: int) -> None:
    """Allow ``part`` to overlap ``whole`` only as exactly block ``rank`` of it
    (MPI_IN_PLACE for all_gather, reduce_scatter, and gather and scatter at
    their root); ValueError otherwise."""
    if not np.may_share_memory(whole, part):
        return
    base = address(whole) + rank * part.nbytes
    if address(part) != base:  # shapes are already checked
        raise ValueError(f"{call}: x and out overlap; they may share memory only as "
                         f"block {rank} (this rank's) of the larger one, for in place")


def integer(call: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{call}: {name} must be an int, got {type(v).__name__}")
    return int(v)


def rank(call: str, name: str, v, size: int) -> int:
    v = integer(call, name, v)
    if not 0 <= v < size:
        raise ValueError(f"{call}: {name}={v} is out of range; expected 0 <= {name} < {size}")
    return v


def peer(call: str, name: str, v, size: int, me: int) -> int:
    v = rank(call, name, v, size)
    if v == me:
        raise ValueError(f"{call}: {name}={v} is this rank; expected another rank")
    return v


def tag(call: str, v) -> int:
    v = integer(call, "tag", v)
    if not 0 <= v <= TAG_UB:
        raise ValueError(f"{call}: tag={v} is out of range; expected 0 <= tag <= {TAG_UB}")
    return v


def algorithm(call: str, name, offered: Iterable[str], family=None) -> str | None:
    """``name`` if this communicator offers it; ``family``: the call's
    algorithm records (collectives/algorithm.py), which say what the ones
    not offered here need."""
    if name is None:
        return None
    offered = list(offered)
    if name not in offered:
        known = family is not None and name in family.names()
        why = f"needs {family[name].needs()}" if known else "is unknown"
        raise ValueError(f"{call}: algorithm={name!r} {why}; expected None or one of "
                         f"{offered}")
    return name


def leading_size(call: str, x: np.ndarray, size: int) -> None:
    if x.ndim == 0 or x.shape[0] != size:
        raise ValueError(f"{call}: x has shape {x.shape}, expected (size={size}, ...) "
                         "with one block per rank")
