"""The arguments of the collectives that hold more than an array or two:
checked (validate.py), and turned into what their algorithms take.

The Communicator calls these before anything is queued, so each raises
TypeError or ValueError on this rank alone, before any byte moves.  ``me``,
``size`` and ``device``: the communicator's rank, size and CUDA device
(None: numpy arrays only).
"""
from __future__ import annotations

from . import validate as v
from .arrays import empty


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
