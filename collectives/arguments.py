"""The arguments of the collectives that hold more than an array or two:
checked (validate.py), and turned into what their algorithms take.

The Communicator calls these before anything is queued, so each raises
TypeError or ValueError on this rank alone, before any byte moves.  ``me``,
``size`` and ``device``: the communicator's rank, size and CUDA device
(None: numpy arrays only).
"""
from __future__ import annotations

import numpy as np

from . import validate as v
from .arrays import address, empty


def result(c: str, x, out, shape: tuple, what: str, device: int | None) -> tuple:
    """The array the result of ``x``'s call goes into: a new one of ``shape``,
    or the caller's checked ``out``; and whether that is ``x`` itself (in
    place)."""
    if out is None:
        return empty(shape, x), False
    v.out(c, out, shape, x, what, device)
    return out, v.no_overlap(c, x, out)


def rows(c: str, x, out, me: int, size: int, device: int | None):
    """The array of shape (size, *x.shape) that all_gather and gather fill
    with every rank's ``x``: a new one, or the caller's checked ``out``, whose
    block ``me`` may be ``x`` itself (in place: it is there already)."""
    if out is None:
        return empty((size, *x.shape), x)
    v.out(c, out, (size, *x.shape), x, "(size, *x.shape)", device)
    v.block_in_place(c, out, x, me)
    return out


def gather(x, out, root, me: int, size: int, device: int | None) -> tuple:
    """gather's root, and the array the rows go into on the root (``rows``;
    None on the other ranks, which ignore ``out``)."""
    c = "gather"
    v.array(c, "x", x, device=device)
    root = v.rank(c, "root", root, size)
    return root, rows(c, x, out, me, size, device) if me == root else None


def scatter(x, out, root, me: int, size: int, device: int | None) -> tuple:
    """scatter's root, and on the root its ``x`` flat (None elsewhere, where
    ``x`` is ignored): ``size`` blocks shaped like ``out``, of which ``out``
    may be block ``root`` (in place: the root's block stays where it is)."""
    c = "scatter"
    v.array(c, "out", out, writable=True, device=device)
    root = v.rank(c, "root", root, size)
    if me != root:
        return root, None
    v.array(c, "x", x, device=device)
    v.same_kind(c, x, out)
    if x.shape != (size, *out.shape) or x.dtype != out.dtype:
        raise ValueError(f"scatter: x on root has shape {x.shape} and dtype {x.dtype}, "
                         f"expected {(size, *out.shape)} and {out.dtype} "
                         "(size blocks shaped like out)")
    v.block_in_place(c, x, out, root)
    return root, x.reshape(-1)


def reduce_scatter_out(x, out, me: int, size: int, device: int | None):
    """reduce_scatter's result: a new array of shape x.shape[1:], or the
    caller's checked ``out``, which may be ``x``'s block ``me`` (in place)."""
    c = "reduce_scatter"
    v.leading_size(c, x, size)
    if out is None:
        return empty(x.shape[1:], x)
    v.out(c, out, x.shape[1:], x, "x.shape[1:]", device)
    v.block_in_place(c, x, out, me)
    return out


def counts(c: str, name: str, cs, size: int) -> tuple[int, ...]:
    """A variable-count call's ``counts``: ``size`` ints >= 0 (a list, tuple
    or 1-D integer array)."""
    if isinstance(cs, (str, bytes)) or not hasattr(cs, "__len__"):
        raise TypeError(f"{c}: {name} must be a sequence of {size} ints, got "
                        f"{type(cs).__name__}")
    if len(cs) != size:
        raise ValueError(f"{c}: {name} has {len(cs)} entries, expected one per rank ({size})")
    if all(type(k) is int and k >= 0 for k in cs):  # the common case, checked at once
        return tuple(cs)
    out = tuple(v.integer(c, f"{name}[{i}]", k) for i, k in enumerate(cs))
    for i, k in enumerate(out):
        if k < 0:
            raise ValueError(f"{c}: {name}[{i}]={k} is negative")
    return out


def rows_sum(c: str, name: str, cs: tuple, x) -> None:
    """``x`` has the rows that counts ``cs`` sum to."""
    if sum(cs) != x.shape[0]:
        raise ValueError(f"{c}: {name} sum to {sum(cs)} but x has {x.shape[0]} rows "
                         f"(shape {x.shape})")


def has_rows(c: str, name: str, x) -> None:
    """``x`` has a first axis (the rows that counts count)."""
    if x.ndim == 0:
        raise ValueError(f"{c}: {name} is 0-d; counts count rows along its first axis")


def own_count(c: str, name: str, cs: tuple, me: int, x, what: str = "x") -> None:
    """This rank's count in ``cs`` is the rows of its ``x``."""
    if cs[me] != x.shape[0]:
        raise ValueError(f"{c}: {name}[{me}]={cs[me]} but this rank's {what} has "
                         f"{x.shape[0]} rows (shape {x.shape})")


def rows_out(c: str, x, out, total: int, rest: tuple, device, what: str):
    """The result of ``total`` rows shaped ``rest``: a new array like ``x``,
    or the caller's checked ``out``."""
    if out is None:
        return empty((total, *rest), x)
    return v.out(c, out, (total, *rest), x, what, device)


def block_at(c: str, whole, part, start: int) -> None:
    """``part`` may overlap ``whole`` only as exactly its elements from
    ``start`` on (in place); ValueError otherwise."""
    if part.nbytes and np.may_share_memory(whole, part) and \
            address(part) != address(whole) + start * part.itemsize:
        raise ValueError(f"{c}: x and out overlap; they may share memory only as this "
                         "rank's block of the larger one, for in place")


def offset_in(c: str, whole, part) -> int:
    """Where ``part`` lies in ``whole``, in elements, where it lies inside it
    (in place), -1 where they do not overlap; ValueError for any other
    overlap."""
    if not part.nbytes or not np.may_share_memory(whole, part):
        return -1
    at, item = address(part) - address(whole), part.itemsize
    if at < 0 or at % item or at + part.nbytes > whole.nbytes:
        raise ValueError(f"{c}: x and out overlap; they may share memory only as this "
                         "rank's block of the larger one, for in place")
    return at // item
