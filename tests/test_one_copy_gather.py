"""The compiled one-copy gather (one_copy_gather in transports/_native.c,
through transports/shm/one_copy.py's ``OneCopy.gather``) against the
protocol of ``OneCopy.expose``, ``Remote.read`` and ``Remote.finish``.

In process: rank 0's publications run on a segment in a numpy buffer laid
out as the shm transport lays it out, and the test plays the peers, writing
their words as their ``expose`` and ``finish`` would; their sources are
arrays of this process (process_vm_readv reads its own process as any
other).  Then, under mpiexec, that all_gather's, all_to_all's and
scatter's ``one_copy`` take the compiled call, and that what they give is
numpy's."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from launch import run_mpi
from transports import _native
from transports.base import Liveness
from transports.copy import address
from transports.errors import CollectiveError
from transports.shm import one_copy
from transports.shm.one_copy import OneCopy
from transports.shm.segment import D_ADDR, D_BYTES, D_CALL, D_DONE, D_KEY, D_POSTED, Layout
from transports.shm.segment import Segment as ShmSegment

pytestmark = pytest.mark.skipif(not hasattr(_native, "one_copy_gather"),
                                reason="no compiled one_copy_gather (extensions not built)")


class Endpoint:
    """What OneCopy.gather asks of the coll endpoint: a call's tag and size,
    the wait (``block``: here the test's, called with the step), the byte
    counts."""

    def __init__(self, tag: int, key: int, block=None):
        self.tag, self.call_bytes, self.what = tag, key, "all_gather"
        self.sent_bytes = self.recv_bytes = 0
        self.waits = []
        self._block = block

    def block(self, step, peers, late):
        self.waits.append(late())
        if self._block is None:
            raise AssertionError(f"waited for {late()}")
        self._block(step, late)


class Segment:
    """Rank 0's view of an N-rank segment in a numpy buffer, and the peers."""

    def __init__(self, n: int, pids=None):
        lay = Layout(n, 1, 64, 4096)
        self.mem = np.zeros(lay.total, np.uint8)
        self.lay, self.n = lay, n
        self.t = ShmSegment(self.mem, lay, 0)
        pids = pids or [os.getpid()] * n
        self.oc = OneCopy(self.t, list(range(1, n)), Liveness(pids, [True] * n))

    def words(self, r: int) -> tuple:
        q, b = self.t.q64, self.lay.one_copy(r)
        return tuple(int(q[b + f]) for f in (D_POSTED, D_ADDR, D_BYTES, D_CALL, D_KEY, D_DONE))

    def post(self, p: int, k: int, src: np.ndarray, tag: int, key: int,
             nb: int | None = None) -> None:
        """Peer p's publication k of ``src``, as its expose writes it."""
        q, b = self.t.q64, self.lay.one_copy(p)
        q[b + D_ADDR], q[b + D_BYTES] = address(src), src.nbytes if nb is None else nb
        q[b + D_CALL], q[b + D_KEY] = tag, key
        q[b + D_POSTED] = k

    def done(self, p: int, k: int) -> None:
        self.t.q64[self.lay.one_copy(p) + D_DONE] = k

    def bell(self, r: int) -> int:
        return self.t.u32[self.t.bells[r]]


def sources(n: int, nbytes: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n * 7 + nbytes)
    return [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(n)]


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("own", [0, 1, 2])
def test_all_gather_and_all_to_all_blocks(n, own):
    """Peers ahead: block p of out is bytes [off, off + nb) of peer p's source
    (off 0: all_gather; rank * nb: all_to_all), this rank's own block copied
    plainly or streamed (or left alone: own 0), rank 0's words published,
    every peer rung twice (posted, done), both byte counts moved."""
    seg = Segment(n)
    k = 0
    for nb, gather in ((1, True), (4096 + 3, True), (3 * 4096, False), (1 << 20, False)):
        k += 1
        tag, key = 40 + k, nb * n
        srcs = sources(n, nb if gather else nb * n)
        for p in range(1, n):
            seg.post(p, k, srcs[p], tag, key)
            seg.done(p, k)
        out = np.full(nb * n, 0xAB, np.uint8)
        bells = [seg.bell(p) for p in range(n)]
        ep = Endpoint(tag, key)
        assert seg.oc.gather(ep, srcs[0], out, nb, 0, 0, own)
        for p in range(n):
            want = srcs[p][:nb]  # all_to_all: block 0 (rank 0's) of each source
            if p == 0 and not own:
                assert (out[:nb] == 0xAB).all()
                continue
            assert out[p * nb:(p + 1) * nb].tobytes() == want.tobytes(), (p, nb)
        assert seg.words(0) == (k, address(srcs[0]), srcs[0].nbytes, tag, key, k)
        assert [seg.bell(p) - bells[p] for p in range(n)] == [0] + [2] * (n - 1)
        assert ep.sent_bytes == ep.recv_bytes == (n - 1) * nb and not ep.waits
        assert seg.oc.seq == k


def test_offsets_read_the_right_bytes():
    """off and own_off apart from 0 (all_to_all at rank r reads block r of
    each peer): the bytes at those offsets, not the first ones."""
    seg = Segment(3)
    nb = 1000
    srcs = sources(3, 3 * nb)
    for p in (1, 2):
        seg.post(p, 1, srcs[p], 9, 3 * nb)
        seg.done(p, 1)
    out = np.zeros(3 * nb, np.uint8)
    assert seg.oc.gather(Endpoint(9, 3 * nb), srcs[0], out, nb, 2 * nb, nb, 1)
    assert out[:nb].tobytes() == srcs[0][nb:2 * nb].tobytes()
    for p in (1, 2):
        assert out[p * nb:(p + 1) * nb].tobytes() == srcs[p][2 * nb:].tobytes()


@pytest.mark.parametrize("root", [0, 1])
def test_scatter_reads_roots_block_alone(root):
    """``only`` (a scatter's root): a non-root reads its block of root's
    source into out and nothing of the others' (which publish nothing);
    root reads nothing and copies its own block into out; both count what
    moved."""
    seg = Segment(3)
    nb = 5000
    srcs = sources(3, 3 * nb)
    for p in (1, 2):
        seg.post(p, 1, srcs[p] if p == root else srcs[p][:0], 9, nb)
        seg.done(p, 1)
    out = np.zeros(nb, np.uint8)
    ep = Endpoint(9, nb)
    x = srcs[0] if root == 0 else None
    assert seg.oc.gather(ep, x, out, nb, 0, 0, int(root == 0), root)
    assert out.tobytes() == srcs[root][:nb].tobytes()
    assert seg.words(0)[1:3] == ((address(srcs[0]), 3 * nb) if root == 0 else (0, 0))
    assert (ep.sent_bytes, ep.recv_bytes) == ((2 * nb, 0) if root == 0 else (0, nb))


def test_late_peers_are_left_to_pythons_wait():
    """A peer that has not posted: the call returns after a bounded look, its
    own words published; Python's wait sees the peer post and the call goes
    on; a peer that has not said done is waited for the same way, and the
    call returns only once it has."""
    seg = Segment(3)
    srcs = sources(3, 64)
    seg.post(1, 1, srcs[1], 7, 64)
    seg.done(1, 1)  # rank 2 is late for both

    def block(step, late):
        assert step()[0] is False and late() == [2]
        if seg.words(0)[5] == 0:  # waiting for the posts: rank 0 has read nothing yet
            assert (out == 0).all() and seg.words(0)[:1] == (1,)
            seg.post(2, 1, srcs[2], 7, 64)
        else:  # waiting for the done words: every read is made
            assert out[128:].tobytes() == srcs[2].tobytes()
            seg.done(2, 1)
        assert step()[0] is True

    out = np.zeros(3 * 64, np.uint8)
    ep = Endpoint(7, 64, block)
    assert seg.oc.gather(ep, srcs[0], out, 64, 0, 0, 1)
    assert ep.waits == [[2], [2]]
    assert out.tobytes() == b"".join(s.tobytes() for s in srcs)


def test_mismatches_raise_as_expose_does():
    """Another call size, another call, a short source: expose's and read's
    errors, naming the peer, after rank 0 has published and before it
    reads or says done."""
    x = np.arange(16, dtype=np.uint8)
    seg = Segment(2)
    seg.post(1, 1, x, 5, 32)
    with pytest.raises(CollectiveError, match="moves 32 bytes where rank 0's moves 16"):
        seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    assert seg.words(0)[0] == 1 and seg.words(0)[5] == 0
    seg = Segment(2)
    seg.post(1, 1, x, 6, 16)
    with pytest.raises(CollectiveError, match="rank 1 is in call #6 where rank 0 is in call #5"):
        seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    seg = Segment(2)
    seg.post(1, 1, x[:8], 5, 16)
    with pytest.raises(CollectiveError, match="rank 1 published 8 bytes where rank 0 reads "
                                              "bytes 0 to 16") as e:
        seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    assert e.value.ranks == [1] and seg.words(0)[5] == 0


def test_a_failed_read_names_the_peer():
    """A read that fails (here: an address the peer does not map) raises the
    error that names the rank, and says nothing done."""
    seg = Segment(2)
    x = np.arange(16, dtype=np.uint8)
    seg.post(1, 1, x, 5, 16)
    seg.t.q64[seg.lay.one_copy(1) + D_ADDR] = 8  # the first page: never mapped
    with pytest.raises(CollectiveError, match="reading rank 1's memory failed: .*Bad address") as e:
        seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    assert e.value.ranks == [1] and seg.words(0)[5] == 0


def test_refuses_what_would_overrun():
    """Arguments the call refuses raise before anything is published."""
    seg = Segment(2)
    x = np.zeros(16, np.uint8)
    plan = seg.oc.plan
    a, o = address(x), address(np.zeros(32, np.uint8))
    for args in ((plan[:5], 0, 1, 5, 16, a, 16, o, 16, 0, 0, 1, -1),  # not a plan
                 (plan, 0, 0, 5, 16, a, 16, o, 16, 0, 0, 1, -1),  # k < 1
                 (plan, 0, 1, 5, 16, a, 16, o, 16, 0, 8, 1, -1),  # own block past x
                 (plan, 0, 1, 5, 16, a, 16, o, -1, 0, 0, 1, -1),  # negative block
                 (plan, 0, 1, 5, 16, a, 16, o, 16, 0, 0, 1, 2)):  # no rank 2
        with pytest.raises(ValueError):
            _native.one_copy_gather(*args)
    assert seg.words(0) == (0, 0, 0, 0, 0, 0)


def test_not_taken_where_this_rank_maps_peers_regions(monkeypatch):
    """Where this rank maps a peer's communicator-allocated arrays (read
    through the mapping, not process_vm_readv) or the extension is not
    built, gather does nothing and says so."""
    seg = Segment(2)
    x = np.zeros(16, np.uint8)

    class Regions:
        peers = [[], ["a region"]]
    seg.oc.regions = Regions()
    assert not seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    seg.oc.regions = None
    monkeypatch.setattr(one_copy, "_gather", None)
    assert not seg.oc.gather(Endpoint(5, 16), x, np.empty(32, np.uint8), 16, 0, 0, 1)
    assert seg.words(0)[0] == 0 and seg.oc.seq == 0


# under mpiexec: count the compiled calls and check what they give
COUNT = """
import json
import numpy as np
from transports.shm import one_copy
real, codes = one_copy._gather, []
def counted(*a):
    codes.append(real(*a))
    return codes[-1]
one_copy._gather = counted
import collectives as cc
with cc.init("shm") as comm:
    r, n = comm.rank, comm.size
    ok = True
    for count in (1, 1000, 300000):
        x = (np.arange(n * count, dtype=np.float64) + 1000 * r).reshape(n, count)
        g = comm.all_gather(x[r], algorithm="one_copy")
        ok &= all(np.array_equal(g[p], np.arange(count) + p * count + 1000 * p) for p in range(n))
        t = comm.all_to_all(x, algorithm="one_copy")
        ok &= all(np.array_equal(t[p], x[r] - 1000 * r + 1000 * p) for p in range(n))
        y = x.copy()
        comm.all_to_all(y, y, algorithm="one_copy")  # in place
        ok &= np.array_equal(y, t)
        for root in range(n):
            s = np.empty(count)
            comm.scatter(x + root if r == root else None, s, root=root, algorithm="one_copy")
            ok &= np.array_equal(s, x[r] - 1000 * r + 1000 * root + root)
    every = comm.all_gather(np.array([r, ok, len([c for c in codes if c != 1])]))
    if r == 0:
        print(json.dumps([dict(zip(("rank", "ok", "calls"), map(int, e))) for e in every]))
"""


@pytest.mark.parametrize("n", [2, 3])
def test_one_copy_takes_the_compiled_call(n):
    """all_gather, all_to_all (in place too) and scatter's one_copy (every
    root) on plain arrays:
    numpy's blocks, each call one compiled gather (two where a peer was
    late: phase 0's answer 1 is not counted)."""
    p = run_mpi(n, ["-c", COUNT], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(rows) == n
    for row in rows:
        assert row["ok"], row
        assert row["calls"] == 3 * (3 + n), row  # three sizes: 3 calls and n scatters
