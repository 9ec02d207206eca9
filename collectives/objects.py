"""Python objects between ranks: ``broadcast_object``, ``all_gather_object``,
``gather_object`` and ``scatter_object`` (the Communicator's methods call
these).

Each object is pickled (highest protocol); the ranks agree the sizes first
(a small broadcast or all_gather of int64), then the bytes move with the
array calls (``broadcast``, ``all_gather_v``, ``gather_v``, ``scatter_v``).
An object that cannot be pickled travels as a negative size and the reason
in words instead of its bytes, so that every rank raises ``TypeError``
naming the rank and the object's type, and nothing else moves: the
communicator stays usable.

This is the one module of the library that unpickles what peers send
(docs/reliability.md, "Security"): the array calls move raw bytes only.
Unpickling runs the classes' code, so only ranks of the user's own job are
peers here.
"""
from __future__ import annotations

import pickle

import numpy as np

from . import validate as v

_EMPTY = (True, np.empty(0, np.uint8))


def broadcast(comm, obj, root: int):
    c = "broadcast_object"
    comm._open(c)
    root = v.rank(c, "root", root, comm.size)
    mine = _pickled(obj) if comm.rank == root else _EMPTY
    size = comm.broadcast(np.array([_signed(mine)], np.int64), root=root)
    _unpicklable(comm, c, [(root, size[0])], mine, root)
    # broadcast writes into buf (a pickle's bytes are read-only): a copy on root
    buf = mine[1].copy() if comm.rank == root else np.empty(int(size[0]), np.uint8)
    comm.broadcast(buf, root=root)
    return obj if comm.rank == root else pickle.loads(buf)


def all_gather(comm, obj) -> list:
    c = "all_gather_object"
    comm._open(c)
    mine = _pickled(obj)
    sizes = comm.all_gather(np.array([_signed(mine)], np.int64)).reshape(-1)
    _unpicklable(comm, c, list(enumerate(sizes)), mine)
    return _loads(sizes, comm.all_gather_v(mine[1], sizes.tolist()))


def gather(comm, obj, root: int):
    c = "gather_object"
    comm._open(c)
    root = v.rank(c, "root", root, comm.size)
    mine = _pickled(obj)
    # all_gather: every rank learns of an object that cannot be pickled
    sizes = comm.all_gather(np.array([_signed(mine)], np.int64)).reshape(-1)
    _unpicklable(comm, c, list(enumerate(sizes)), mine)
    data = comm.gather_v(mine[1], sizes.tolist(), root=root)
    return None if data is None else _loads(sizes, data)


def scatter(comm, objs, root: int):
    c = "scatter_object"
    comm._open(c)
    root = v.rank(c, "root", root, comm.size)
    n = comm.size
    x, parts = None, [_EMPTY] * n
    if comm.rank == root:
        if not hasattr(objs, "__len__") or len(objs) != n:
            what = type(objs).__name__ + (f" of {len(objs)}" if hasattr(objs, "__len__") else "")
            parts = [_reason(f"objs must be a sequence of {n} objects (one per rank), got "
                             f"a {what}")] + [_EMPTY] * (n - 1)
        else:
            parts = [_pickled(o) for o in objs]
        x = np.concatenate([p[1] for p in parts])
    sizes = comm.broadcast(np.array([_signed(p) for p in parts], np.int64), root=root)
    _unpicklable(comm, c, list(enumerate(sizes)), parts, root)
    out = np.empty(int(sizes[comm.rank]), np.uint8)
    return pickle.loads(comm.scatter_v(x, sizes.tolist(), out=out, root=root))


def _unpicklable(comm, c: str, sizes: list, mine, root: int | None = None) -> None:
    """Where a shared size says an object could not be pickled, TypeError on
    every rank naming the first such rank and why, sent by the rank that
    knows (``root``, whose ``mine`` is then a payload per rank or its one
    payload; else each rank of its own ``mine``): nothing else moves."""
    bad = [(r, int(k)) for r, k in sizes if k < 0]
    if not bad:
        return
    r0, k0 = bad[0]
    if root is None:  # every failing rank's reason, to every rank
        counts = [_length(k) if k < 0 else 0 for _, k in sizes]
        own = mine[1] if not mine[0] else _EMPTY[1]
        data = comm.all_gather_v(own, counts)
        at = sum(counts[:r0])
        why, whose = data[at:at + counts[r0]], f"rank {r0}'s object"
    else:  # root's reason for rank r0, to every rank
        why = np.empty(_length(k0), np.uint8)
        if comm.rank == root:
            np.copyto(why, (mine[r0] if isinstance(mine, list) else mine)[1])
        comm.broadcast(why, root=root)
        whose = f"root {root}'s object" + (f" for rank {r0}" if isinstance(mine, list) else "")
    raise TypeError(f"{c}: {whose} cannot be sent: {bytes(why).decode('utf-8', 'replace')}")


def _reason(text: str) -> tuple[bool, np.ndarray]:
    return False, np.frombuffer(text.encode("utf-8", "replace"), np.uint8)


def _pickled(obj) -> tuple[bool, np.ndarray]:
    """``obj`` pickled: (True, its bytes); or, where it cannot be, (False,
    the reason in words, encoded)."""
    try:
        return True, np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    except Exception as e:  # pickle raises several kinds (TypeError, PicklingError, ...)
        t = type(obj)
        return _reason(f"an object of type {t.__module__}.{t.__qualname__} cannot be pickled "
                       f"({type(e).__name__}: {e})")


def _signed(p: tuple[bool, np.ndarray]) -> int:
    """A payload's size as the ranks share it: its length, or -(length + 1)
    for a reason why there is no payload."""
    return p[1].size if p[0] else -p[1].size - 1


def _length(k) -> int:
    k = int(k)
    return k if k >= 0 else -k - 1


def _loads(sizes, data) -> list:
    """The objects of a gather, pickled back to back in ``data``."""
    b = [0, *np.cumsum(sizes).tolist()]
    return [pickle.loads(data[b[r]:b[r + 1]]) for r in range(len(sizes))]
