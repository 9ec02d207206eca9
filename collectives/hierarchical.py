"""Hierarchical algorithms: shared memory within a host, MPI between hosts.

Each runs on the collective endpoint of the "hier" transport
(transports/hier.py), whose ``local`` part connects the ranks of this host
(shared memory) and whose ``cross`` part connects the ranks with this rank's
local rank, one per host (local rank 0's: the hosts' leaders).  Within a host
each step runs the algorithm that the selection table (selection.py) picks
for a flat communicator on shared memory; between hosts, the one it picks
for messages (or the ring, where the inter-host bytes below say so).

Inter-host bytes per rank, S = the call's message size as docs/algorithms.md
defines it, H hosts, L ranks per host (L_h on host h), B one rank's
block (N blocks in all):
  all_reduce hier_slices  2(H-1)/H * S/L sent and received by every rank
                          (equal hosts only); hier_pipelined the same
  all_reduce hier_mirror  every rank: the table's flat all-reduce among H
                          ranks of S (equal hosts only)
  all_reduce hier_leader  leaders: the table's flat all-reduce among H
                          ranks of S; the others 0
  broadcast/reduce hier   leaders: the table's flat broadcast/reduce among
                          H ranks of S; the others 0
  all_gather hier         equal hosts: (H - 1) * B sent and received by every
                          rank; unequal: the leader of host h sends
                          (H - 1) * L_h * B and receives (N - L_h) * B
  reduce_scatter hier     equal hosts: (H - 1) * B sent and received by every
                          rank; unequal: the leader of host h sends
                          (N - L_h) * B and receives (H - 1) * L_h * B
  all_to_all hier         (N - L_h) * B sent and received on host h
  barrier hier            0 bytes
"""
from __future__ import annotations

import numpy as np

from . import all_gather as _ag
from . import all_reduce as _ar
from . import all_to_all as _a2a
from . import barrier as _barrier
from . import broadcast as _bc
from . import reduce as _reduce
from . import reduce_scatter as _rs
from transports.errors import CollectiveError, renumber

from . import ring as _ring
from . import selection
from .algorithm import Algorithm
from .ranks import block_bounds


def _on(part, fn, *args, **kw):
    """``fn(*args, **kw)``, a step on ``part`` (``local`` or ``cross``), whose
    errors name the whole communicator's ranks and their hosts instead of
    the part's own numbering (transports/errors.py, ``renumber``)."""
    try:
        return fn(*args, **kw)
    except CollectiveError as e:
        raise renumber(e, part.world, *part.world_hosts)


def _local(module, nbytes: int, ep):
    """Run on ``ep`` (a host's ranks) the algorithm of ``module``'s family that
    the selection table picks for a flat communicator on shared memory."""
    return lambda *args: _on(ep, module.FAMILY.run_chosen, nbytes, ep, *args, shared=True)


def _cross(module, nbytes: int, ep):
    """Run on ``ep`` the algorithm of ``module``'s family that the selection
    table picks for a flat communicator on messages."""
    return lambda *args: _on(ep, module.FAMILY.run_chosen, nbytes, ep, *args)


def _run(module, name: str, ep, *args) -> None:
    """Run algorithm ``name`` of ``module``'s family on part ``ep``."""
    _on(ep, module.FAMILY.run, name, ep, *args)


def _leader(ep) -> bool:
    return ep.local.rank == 0


def _root_at(ep, root: int) -> tuple[int, int]:
    """Host index and local rank of rank ``root``."""
    h = ep.hosts.host_of[root]
    return h, ep.members[h].index(root)


# -- all_reduce ---------------------------------------------------------------------

def hier_slices(ep, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Horovod-style: reduce-scatter within the host (local rank l gets slice l
    of the host's sum), all-reduce of each slice across hosts among the ranks
    of its local rank (all slices at once, the ring), then all-gather within
    the host.  The steps within the host are the ring passes: through the
    shared-memory slots they pipeline chunk by chunk, where the exchange
    buffers would stop all ranks of the host once per buffer (measured
    10-20% faster at 1-16 MiB on an emulated 2 x 2)."""
    loc, cr = ep.local, ep.cross
    n, l = loc.size, loc.rank
    b = block_bounds(buf.size, n)
    _host_slices(loc, src, buf, b, op)
    piece = buf[b[l]:b[l + 1]]
    _run(_ar, "ring", cr, piece, piece, op)
    _on(loc, _ring.all_gather, loc, buf, b)


def _host_slices(loc, src, buf: np.ndarray, b, op) -> None:
    """The ring reduce-scatter within the host that hier_slices and
    hier_pipelined start with: local rank l ends owning slice l (bounds
    ``b``) of the host's sum in ``buf``; ``src`` is read where it lies
    (ring.reduce_scatter's ``src``) where it is a numpy array apart from
    ``buf``, else copied into it first."""
    if loc.size > 1 and type(src) is np.ndarray and not np.may_share_memory(src, buf):
        _on(loc, _ring.reduce_scatter, loc, buf, b, op, shift=-1, src=src)
    else:
        _ar.alone(src, buf, op)
        _on(loc, _ring.reduce_scatter, loc, buf, b, op, shift=-1)


class _Across:
    """The all-reduce of one chunk's slice among the hosts (the ranks of
    ``cr``, one per host), in flight while the host works on the next
    chunk: a reduce-scatter of the slice's H blocks (block j to host j),
    then an all-gather of the reduced blocks, each as messages posted at
    once; 2(H-1)/H of the slice sent and received, as the ring.  The blocks
    of the other hosts are received apart and reduced in host order, so
    that every rank ends with the same bits, run after run."""

    def __init__(self, cr, piece: np.ndarray, op):
        self.cr, self.piece, self.op = cr, piece, op
        h, me = cr.size, cr.rank
        self.b = b = block_bounds(piece.size, h)
        self.mine = piece[b[me]:b[me + 1]]
        self.theirs = {j: np.empty_like(self.mine) for j in range(h) if j != me}
        self.reqs = _on(cr, _post, cr, [(cr.irecv, t, j) for j, t in self.theirs.items()] +
                        [(cr.isend, piece[b[j]:b[j + 1]], j) for j in self.theirs])

    def finish(self) -> None:
        cr, piece, b, me = self.cr, self.piece, self.b, self.cr.rank
        _on(cr, cr.waitall, self.reqs)
        parts = [self.mine if j == me else self.theirs[j] for j in range(cr.size)]
        acc = parts[0].copy()
        for x in parts[1:]:
            self.op(acc, x, out=acc)
        np.copyto(self.mine, acc)
        others = list(self.theirs)
        _on(cr, _swap, cr, [(cr.irecv, piece[b[j]:b[j + 1]], j) for j in others] +
            [(cr.isend, self.mine, j) for j in others])


def hier_pipelined(ep, src: np.ndarray, buf: np.ndarray, op) -> None:
    """hier_slices chunk by chunk, the steps of consecutive chunks at once:
    the hosts exchange chunk k's slices (_Across) while the ranks of a host
    reduce-scatter chunk k + 1 among themselves, as NCCL and Open MPI's
    coll/han pipeline theirs; the bytes of hier_slices."""
    loc, cr = ep.local, ep.cross
    n, l = loc.size, loc.rank
    k = max(1, min(selection.PIPELINE_CHUNKS, buf.nbytes // selection.PIPELINE_CHUNK_BYTES))
    cb = block_bounds(buf.size, k)

    def land(across: _Across, chunk: np.ndarray, b) -> None:
        across.finish()
        _on(loc, _ring.all_gather, loc, chunk, b)

    flying = None
    for c in range(k):
        chunk = buf[cb[c]:cb[c + 1]]
        b = block_bounds(chunk.size, n)
        _host_slices(loc, chunk if src is buf else src[cb[c]:cb[c + 1]], chunk, b, op)
        nxt = (_Across(cr, chunk[b[l]:b[l + 1]], op), chunk, b)
        if flying is not None:
            land(*flying)
        flying = nxt
    land(*flying)


def hier_leader(ep, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Reduce within the host to its leader, all-reduce among the leaders,
    broadcast within the host: for small messages and hosts of unequal sizes."""
    loc, cr = ep.local, ep.cross
    lead = _leader(ep)
    _local(_reduce, buf.nbytes, loc)(src, buf if lead else None, op, 0)
    if lead:
        _cross(_ar, buf.nbytes, cr)(buf, buf, op)
    _local(_bc, buf.nbytes, loc)(buf, 0)


def hier_mirror(ep, src: np.ndarray, buf: np.ndarray, op) -> None:
    """Every local rank does a leader's work: all-reduce within the host (each
    rank ends with the host's sum), then the full message across hosts among
    the ranks of each local rank, the L groups at once.  Two steps where
    hier_leader takes three, for L times the leaders' inter-host bytes: for
    small messages on hosts of equal sizes, where the steps cost and the bytes
    do not.  Every group reduces the same host sums in the same order, so
    every rank ends with the same bits."""
    loc, cr = ep.local, ep.cross
    _local(_ar, buf.nbytes, loc)(src, buf, op)
    _cross(_ar, buf.nbytes, cr)(buf, buf, op)


# -- broadcast and reduce ---------------------------------------------------------

def broadcast(ep, buf: np.ndarray, root: int) -> None:
    """Within root's host from root; among the leaders from root's host's
    leader; within every other host from its leader."""
    loc, cr = ep.local, ep.cross
    hr, lr = _root_at(ep, root)
    home = ep.hosts.host == hr
    if home:
        _local(_bc, buf.nbytes, loc)(buf, lr)
    if _leader(ep):
        _cross(_bc, buf.nbytes, cr)(buf, hr)
    if not home:
        _local(_bc, buf.nbytes, loc)(buf, 0)


def reduce(ep, x: np.ndarray, out, op, root: int) -> None:
    """Within each host to its leader, among the leaders to root's host's
    leader, then (where root is not that leader) from it to root within the host."""
    loc, cr = ep.local, ep.cross
    hr, lr = _root_at(ep, root)
    home, lead = ep.hosts.host == hr, _leader(ep)
    acc = None
    if lead:
        acc = out if (home and lr == 0) else np.empty_like(x)
    _local(_reduce, x.nbytes, loc)(x, acc, op, 0)
    if lead:
        _cross(_reduce, x.nbytes, cr)(acc, acc if home else None, op, hr)
    if home and lr != 0:
        if lead:
            _on(loc, loc.send, acc, lr)
        elif loc.rank == lr:
            _on(loc, loc.recv, out, 0)


# -- all_gather and reduce_scatter ------------------------------------------------

def _post(ep, posts) -> list:
    """Post every ``(post, *args)`` of ``posts`` (on ``ep``); their requests."""
    return [post(*args) for post, *args in posts]


def _swap(ep, posts) -> None:
    """Post ``posts`` on ``ep``, then wait for all."""
    ep.waitall(_post(ep, posts))


def _bundles(ep, m: int):
    """(j, i, rank): local rank j's bundle of blocks (one per host, H blocks)
    holds rank ``rank``'s block at i (hosts of equal sizes)."""
    for j, _ in enumerate(ep.members[ep.hosts.host]):
        for i, h in enumerate(ep.cross_hosts[j]):
            yield j, i, ep.members[h][j]


def _blocks(a: np.ndarray, ranks, m: int) -> np.ndarray:
    """The blocks of ``ranks`` in ``a`` (blocks of ``m``), one after another."""
    return np.concatenate([a[g * m:(g + 1) * m] for g in ranks]) if ranks else a[:0].copy()


def all_gather(ep, x: np.ndarray, out: np.ndarray) -> None:
    """Equal hosts: across hosts among the ranks of each local rank (the ring:
    local rank l gathers the blocks of local rank l of every host), then the
    H-block bundles within the host, then every block to its place.  Unequal
    hosts: within the host, then the leaders swap their hosts' blocks, then
    each leader broadcasts the whole within its host."""
    loc, cr, m, hh = ep.local, ep.cross, x.size, ep.hosts.hosts
    if not ep.hosts.equal:
        return _all_gather_leaders(ep, x, out)
    bundle = np.empty(hh * m, x.dtype)
    _run(_ag, "ring", cr, x, bundle)
    big = np.empty(loc.size * hh * m, x.dtype)
    _local(_ag, bundle.nbytes, loc)(bundle, big)
    for j, i, g in _bundles(ep, m):
        at = (j * hh + i) * m
        np.copyto(out[g * m:(g + 1) * m], big[at:at + m])


def _all_gather_leaders(ep, x: np.ndarray, out: np.ndarray) -> None:
    loc, cr, m = ep.local, ep.cross, x.size
    here = ep.members[ep.hosts.host]
    mine = np.empty(len(here) * m, x.dtype)
    _local(_ag, x.nbytes, loc)(x, mine)
    if _leader(ep):
        theirs = {h: np.empty(len(ep.members[h]) * m, x.dtype)
                  for h in range(ep.hosts.hosts) if h != ep.hosts.host}
        _on(cr, _swap, cr, [(cr.irecv, b, h) for h, b in theirs.items()] +
            [(cr.isend, mine, h) for h in theirs])
        theirs[ep.hosts.host] = mine
        for h, b in theirs.items():
            for j, g in enumerate(ep.members[h]):
                np.copyto(out[g * m:(g + 1) * m], b[j * m:(j + 1) * m])
    _local(_bc, out.nbytes, loc)(out, 0)


def reduce_scatter(ep, x: np.ndarray, out: np.ndarray, op) -> None:
    """The mirror of all_gather.  Equal hosts: within the host, reduce-scatter
    of the bundles (local rank l's holds the blocks of local rank l of every
    host), then across hosts among the ranks of each local rank (the ring).
    Unequal hosts: within the host to the leader, the leaders swap the blocks
    of each other's ranks and reduce those of their own, then each leader
    sends each rank of its host its block."""
    loc, cr, m, hh = ep.local, ep.cross, out.size, ep.hosts.hosts
    if not ep.hosts.equal:
        return _reduce_scatter_leaders(ep, x, out, op)
    send = np.empty(loc.size * hh * m, x.dtype)
    for j, i, g in _bundles(ep, m):
        at = (j * hh + i) * m
        np.copyto(send[at:at + m], x[g * m:(g + 1) * m])
    mine = np.empty(hh * m, x.dtype)
    _local(_rs, send.nbytes, loc)(send, mine, op)
    _run(_rs, "ring", cr, mine, out, op)


def _reduce_scatter_leaders(ep, x: np.ndarray, out: np.ndarray, op) -> None:
    loc, cr, m = ep.local, ep.cross, out.size
    here = ep.members[ep.hosts.host]
    if not _leader(ep):
        _local(_reduce, x.nbytes, loc)(x, None, op, 0)
        _on(loc, loc.recv, out, 0)
        return
    acc = np.empty_like(x)
    _local(_reduce, x.nbytes, loc)(x, acc, op, 0)
    mine = _blocks(acc, here, m)
    others = [h for h in range(ep.hosts.hosts) if h != ep.hosts.host]
    outgoing = [_blocks(acc, ep.members[h], m) for h in others]
    _on(cr, _swap, cr, [(cr.irecv_reduce, mine, h, op) for h in others] +
        [(cr.isend, b, h) for h, b in zip(others, outgoing)])
    for j in range(1, len(here)):
        _on(loc, loc.send, mine[j * m:(j + 1) * m], j)
    np.copyto(out, mine[:m])


# -- all_to_all and barrier -------------------------------------------------------

def all_to_all(ep, x: np.ndarray, out: np.ndarray) -> None:
    """Blocks for ranks of other hosts as MPI messages, posted first; those for
    this host's ranks through shared memory meanwhile; then the messages end."""
    loc, n, m = ep.local, ep.size, out.size // ep.size
    x = _a2a._prepare(ep, x, out, whole=True)  # a copy where out is x
    here = ep.members[ep.hosts.host]
    away = [p for p in range(n) if ep.hosts.host_of[p] != ep.hosts.host]
    reqs = [ep.flat.irecv(out[p * m:(p + 1) * m], p) for p in away]
    reqs += [ep.flat.isend(x[p * m:(p + 1) * m], p) for p in away]
    if loc.size > 1:
        lx = np.concatenate([x[p * m:(p + 1) * m] for p in here])
        lout = np.empty_like(lx)
        _local(_a2a, lx.nbytes, loc)(lx, lout)
        for j, p in enumerate(here):
            np.copyto(out[p * m:(p + 1) * m], lout[j * m:(j + 1) * m])
    ep.flat.waitall(reqs)


def barrier(ep) -> None:
    """Within the host, among the leaders, within the host again: no rank
    leaves before every host's leader has seen all its ranks arrive."""
    loc, cr = ep.local, ep.cross
    _local(_barrier, 0, loc)()
    if _leader(ep):
        _cross(_barrier, 0, cr)()
    _local(_barrier, 0, loc)()


def _hier(name: str, run, equal_hosts: bool = False) -> Algorithm:
    """An algorithm that runs on the "hier" transport's parts; ``equal_hosts``:
    every local rank must have a peer on every host."""
    return Algorithm(name, run, needs_hier=True, needs_equal_hosts=equal_hosts)


ALGORITHMS: dict[str, tuple[Algorithm, ...]] = {
    "all_reduce": (_hier("hier_slices", hier_slices, equal_hosts=True),
                   _hier("hier_pipelined", hier_pipelined, equal_hosts=True),
                   _hier("hier_mirror", hier_mirror, equal_hosts=True),
                   _hier("hier_leader", hier_leader)),
    "broadcast": (_hier("hier", broadcast),),
    "reduce": (_hier("hier", reduce),),
    "all_gather": (_hier("hier", all_gather),),
    "reduce_scatter": (_hier("hier", reduce_scatter),),
    "all_to_all": (_hier("hier", all_to_all),),
    "barrier": (_hier("hier", barrier),),
}
