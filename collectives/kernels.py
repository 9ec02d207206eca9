"""One-pass reductions of k arrays, in C.

``reduce_into(out, inputs, op)`` computes
``out = op(...op(op(inputs[0], inputs[1]), inputs[2])..., inputs[k-1])``
elementwise, reading each input once and writing ``out`` once, where numpy's
pairwise ufuncs re-read and re-write ``out`` k-1 times.  The loops are the C
extension ``collectives._kernels`` (SSE2, AVX2 or AVX-512, chosen at run
time; portable vector code on other processors), which releases the GIL
while it runs; numpy is the reference, and the fallback where the extension
is not built or ``COLLECTIVES_KERNELS=0``.  Both give the same bits:

- integers wrap around; float32/float64 are numpy's sequence of binary ops
  bit for bit (never fused or reordered); max/min are ``np.maximum`` /
  ``np.minimum`` (NaN propagates; of two equal values, -0.0 and +0.0
  included, the later input wins);
- float16 and bfloat16 (``ml_dtypes.bfloat16``) are widened to float32, reduced
  there across all k inputs and rounded once, to nearest even; a NaN stays a
  NaN (its payload is not kept bit for bit, here or anywhere else in numpy);
- complex sum is the float sum of the parts; complex prod is numpy's own
  multiply, ``uf(in0, in1, out=out)`` then ``uf(out, x, out=out)`` as the
  library's reductions call it: numpy fuses its complex multiply on some
  processors and not others, and even in place and not, so only numpy
  equals numpy; max/min are refused.

``divisor=d`` divides the result by d in the same pass (avg = sum / N):
floating dtypes only, as ``np.true_divide(out, d)`` does, except that half
types divide in float32 before their single rounding.  Complex results are
divided by numpy afterwards.

Outputs of ``stream_bytes`` and more are written with streaming stores; by
default that is ``streaming.STREAM_BYTES`` (``COLLECTIVES_STREAM_BYTES``, 32
MiB; collectives/streaming.py says why).  ``COLLECTIVES_KERNELS_ISA=sse2``
(``avx2``, ``avx512``, ``avx512bf16``) caps the instruction set, for tests; ``use()`` picks
a path at run time.
"""
from __future__ import annotations

import os
from typing import Sequence, Union

import numpy as np

from . import streaming
from .arrays import address
from .dtypes import is_bfloat16, is_half, is_inexact, supported

try:
    from . import _kernels
except ImportError:  # not built: numpy does everything
    _kernels = None

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_OP_NAMES = {**{n: n for n in _UFUNCS}, **{u: n for n, u in _UFUNCS.items()}}

# (dtype, op) -> (dtype index, op index) of the C tables; complex sums are
# float sums of twice as many numbers
_CODES: dict = {}
_BF16_CODES: dict = {}  # op -> codes of bfloat16, keyed by dtype once it exists
if _kernels is not None:
    for _i, _name in enumerate(_kernels.DTYPES):
        for _j, _op in enumerate(_kernels.OPS):
            if _name == "bfloat16":  # ml_dtypes is imported only when needed (dtypes.py)
                _BF16_CODES[_op] = (_i, _j)
            else:
                _CODES[np.dtype(_name), _op] = (_i, _j)
    for _c, _f in (("complex64", "float32"), ("complex128", "float64")):
        _CODES[np.dtype(_c), "sum"] = _CODES[np.dtype(_f), "sum"]


def _code(dt: np.dtype, op: str):
    """The C tables' (dtype, op) indices, None where they have none."""
    c = _CODES.get((dt, op))
    if c is None and _BF16_CODES and is_bfloat16(dt):
        for o, v in _BF16_CODES.items():
            _CODES[dt, o] = v
        c = _CODES.get((dt, op))
    return c


_numpy = _kernels is None  # True: every call goes to numpy


def isas() -> tuple:
    """The names ``use()`` accepts here: "numpy", then the instruction sets
    this processor runs, best last."""
    return ("numpy",) + (_kernels.isas() if _kernels is not None else ())


def compiled() -> bool:
    """Whether calls take a compiled path now (not the numpy fallback)."""
    return not _numpy


def isa() -> str:
    """The path calls take now: an instruction set, or "numpy"."""
    return "numpy" if _numpy else _kernels.isa()


def use(name: str) -> None:
    """Take the path ``name`` (one of ``isas()``, or "best") from now on."""
    global _numpy
    choices = isas()
    if name == "best":
        name = choices[-1]
    if name not in choices:
        raise ValueError(f"kernels.use: {name!r} is not one of {choices + ('best',)}")
    _numpy = name == "numpy"
    if not _numpy:
        _kernels.set_isa(name)


def _use_from_env() -> None:
    if os.environ.get("COLLECTIVES_KERNELS", "1").strip() == "0":
        use("numpy")
        return
    cap = os.environ.get("COLLECTIVES_KERNELS_ISA", "").strip()
    if not cap:
        return
    if cap not in _RANK:
        raise ValueError(f"COLLECTIVES_KERNELS_ISA must be one of {tuple(_RANK)}, got {cap!r}")
    use(capped(cap))


# how capable each path is: "generic" (the portable loops, on processors
# that are not x86) stands where SSE2 does
_RANK = {"numpy": 0, "generic": 1, "sse2": 1, "avx2": 2, "avx512": 3, "avx512bf16": 4}


def capped(cap: str) -> str:
    """The best path of ``isas()`` that is no more capable than ``cap``."""
    return [n for n in isas() if _RANK[n] <= _RANK[cap]][-1]


_use_from_env()

Op = Union[str, np.ufunc]


def _op_name(op: Op) -> str:
    try:
        return _OP_NAMES[op]
    except (KeyError, TypeError):
        pass
    name = getattr(op, "value", op)  # collectives.ops.Op is a str enum
    if isinstance(name, str) and name in _UFUNCS:
        return name
    raise ValueError(f"reduce_into: op must be one of {list(_UFUNCS)} or their ufuncs "
                     f"(avg is 'sum' with divisor=N), got {op!r}")


def _check(out, inputs, op: str, divisor) -> None:
    """The checks both paths share: TypeError for a wrong type or dtype,
    ValueError for a wrong size, layout or count."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"reduce_into: out must be a numpy array, got {type(out).__name__}")
    dt = out.dtype
    if not supported(dt):
        raise TypeError(f"reduce_into: dtype {dt} is not supported")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("reduce_into: out must be C-contiguous and writeable")
    if len(inputs) == 0:
        raise ValueError("reduce_into: needs at least one input")
    for j, x in enumerate(inputs):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"reduce_into: inputs[{j}] must be a numpy array, got {type(x).__name__}")
        if x.dtype != dt:
            raise TypeError(f"reduce_into: inputs[{j}] has dtype {x.dtype}, out {dt}")
        if x.size != out.size:
            raise ValueError(f"reduce_into: inputs[{j}] has {x.size} elements, out {out.size}")
        if not x.flags.c_contiguous:
            raise ValueError(f"reduce_into: inputs[{j}] must be C-contiguous")
    if dt.kind == "c" and op in ("max", "min"):
        raise TypeError(f"reduce_into: op={op!r} is not defined for complex dtype {dt}")
    if divisor is not None and not is_inexact(dt):
        raise TypeError(f"reduce_into: divisor needs a floating or complex dtype, got {dt}")


def reduce_into(out: np.ndarray, inputs: Sequence[np.ndarray], op: Op = "sum", *,
                divisor: float | None = None, stream_bytes: int | None = None) -> np.ndarray:
    """``out`` = the elementwise reduction of ``inputs`` (k >= 1 C-contiguous
    arrays of out's dtype and size, or a (k, size) array) with ``op`` ("sum", "prod", "max", "min"
    or ``np.add`` ...), in input order, divided by ``divisor`` if given.
    ``out`` may be one of the inputs (``reduce_into(acc, [acc, x], "sum")``);
    any other overlap with an input is a ValueError.  Outputs of
    ``stream_bytes`` or more (default ``streaming.STREAM_BYTES``; 0 never)
    are streamed.  Returns ``out``."""
    name = _op_name(op)
    _check(out, inputs, name, divisor)
    code = None if _numpy else _code(out.dtype, name)
    if code is None:
        _numpy_reduce(out, inputs, name, divisor)
        return out
    limit = streaming.STREAM_BYTES if stream_bytes is None else stream_bytes
    c_div = divisor if out.dtype.kind != "c" else None
    if is_bfloat16(out.dtype):  # numpy exports no buffer of ml_dtypes' dtypes
        _kernels.reduce(out.view(np.uint16), [x.view(np.uint16) for x in inputs],
                        code[0], code[1], 0 < limit <= out.nbytes, c_div)
    else:
        _kernels.reduce(out, inputs, code[0], code[1], 0 < limit <= out.nbytes, c_div)
    if divisor is not None and c_div is None and out.size:
        np.true_divide(out, divisor, out=out)
    return out


def _check_overlap(out: np.ndarray, inputs: Sequence[np.ndarray]) -> None:
    for j, x in enumerate(inputs):
        if np.may_share_memory(out, x) and (
                address(out) != address(x)):
            raise ValueError(f"reduce_into: out overlaps inputs[{j}] without being the same memory")


def _numpy_reduce(out: np.ndarray, inputs: Sequence[np.ndarray], op: str, divisor) -> None:
    """The reference: numpy's pairwise ufuncs in input order; half types in a
    float32 accumulator, rounded once."""
    _check_overlap(out, inputs)
    if not out.size:
        return
    uf = _UFUNCS[op]
    o = out.reshape(-1)
    xs = [x.reshape(-1) for x in inputs]
    if len(xs) == 1 and divisor is None:
        if not np.shares_memory(o, xs[0]):
            np.copyto(o, xs[0])
        return
    if is_half(out.dtype):
        acc, tmp = xs[0].astype(np.float32), np.empty(o.size, np.float32)
        for x in xs[1:]:
            tmp[...] = x
            uf(acc, tmp, out=acc)
        if divisor is not None:
            np.true_divide(acc, divisor, out=acc)
        o[...] = acc
        return
    # out may be one of the inputs: accumulate elsewhere if it is read later
    acc = o if not any(np.shares_memory(o, x) for x in xs[2:]) else np.empty_like(o)
    if len(xs) == 1:
        np.copyto(acc, xs[0])
    else:
        uf(xs[0], xs[1], out=acc)
    for x in xs[2:]:
        uf(acc, x, out=acc)
    if divisor is not None:
        np.true_divide(acc, divisor, out=acc)
    if acc is not o:
        np.copyto(o, acc)


def exchange_reducer(dtype: np.dtype, op: str):
    """What the shm transport's compiled exchange takes to reduce (its
    ``Exchange.fused``, transports/_native.c ``exchange_reduce``): the
    kernel of ``dtype`` and ``op`` ("sum", "prod", "max", "min") as a
    PyCapsule (transports/native_api.h), which reduces as ``reduce_into``
    does, so with the bits of ``ops.in_rank_order``, on the instruction set
    in use when it runs.  None on the numpy path, where the module is not
    built, or for complex prod."""
    if _numpy:
        return None
    code = _code(np.dtype(dtype), _op_name(op))
    return None if code is None else _kernels.reducer(*code)


_FUSED: dict = {}  # (op, dtype) -> exchange_reducer's capsule or None


def fused(op: str, dtype: np.dtype):
    """``exchange_reducer(dtype, op)``, kept: what the transports' compiled
    rounds reduce with (shm's exchange, mpi's steps); None while the
    kernels are off or where there is none."""
    if not compiled():
        return None
    try:
        return _FUSED[op, dtype]
    except KeyError:
        f = _FUSED[op, dtype] = exchange_reducer(dtype, op)
        return f


def __getattr__(name: str):
    """``bfloat16`` (its dtype) and ``DTYPES``, which import ml_dtypes (dtypes.py)."""
    if name in ("bfloat16", "DTYPES"):
        from . import dtypes
        return dtypes.load_bfloat16() if name == "bfloat16" else dtypes.DTYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
