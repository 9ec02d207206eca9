"""The compiled small all-reduce (exchange_reduce in transports/_native.c,
through transports/shm/exchange.py's ``Exchange.fused``, reducing with the
kernels' capsules: ``kernels.exchange_reducer``) against the protocol of
``Exchange.run`` and the bits of ``ops.in_rank_order``.

In process: rank 0's exchange runs on a segment in a numpy buffer laid out
as the shm transport lays it out, and the test plays the peers, writing
their words and buffers as their ``Exchange.run`` would.  Then, under
mpiexec, that the small all_reduce takes the compiled call where the
module has it, and Python's round where the kernels are off."""
from __future__ import annotations

import json

import numpy as np
import pytest

from collectives import kernels
from collectives.ops import REDUCERS, Op, in_rank_order
from launch import run_mpi
from transports import _native
from transports.errors import CollectiveError
from transports.shm.exchange import Exchange
from transports.shm.segment import EXCHANGED, Layout
from transports.shm.segment import Segment as ShmSegment

pytestmark = pytest.mark.skipif(
    kernels.exchange_reducer(np.dtype("float32"), "sum") is None
    or not hasattr(_native, "exchange_reduce"),
    reason="no compiled exchange_reduce (extensions not built, or kernels off)")

XCHG = 4096


class Segment:
    """Rank ``me``'s view of an N-rank segment in a numpy buffer, and the peers."""

    def __init__(self, n: int, me: int = 0):
        lay = Layout(n, 1, 64, XCHG)
        self.mem = np.zeros(lay.total, np.uint8)
        self.lay, self.n, self.me = lay, n, me
        self.t = ShmSegment(self.mem, lay, me)
        self.xc = Exchange(self.t, [p for p in range(n) if p != me], XCHG)

    def publish(self, p: int, k: int, data: np.ndarray, tag: int, key: int,
                nb: int | None = None) -> None:
        """Peer p's exchange k, as its Exchange.run writes it."""
        at = self.lay.xchg(p, k & 1)
        self.mem[at:at + data.nbytes] = data.reshape(-1).view(np.uint8)
        q, w = self.t.q64, self.lay.xmeta(p, k & 1)
        q[w], q[w + 1], q[w + 2] = data.nbytes if nb is None else nb, tag, key
        q[self.lay.i64(p, EXCHANGED)] = k

    def words(self, r: int, k: int) -> tuple:
        q, w = self.t.q64, self.lay.xmeta(r, k & 1)
        return q[self.lay.i64(r, EXCHANGED)], q[w], q[w + 1], q[w + 2]

    def bell(self, r: int) -> int:
        return self.t.u32[self.t.bells[r]]


def inputs(dt: np.dtype, n: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(count * 31 + n)
    if dt.kind in "iu":
        return [rng.integers(0, 256, count * dt.itemsize, dtype=np.uint8).view(dt)
                for _ in range(n)]
    parts = rng.uniform(-2, 2, (n, count * (2 if dt.kind == "c" else 1)))
    if dt.kind == "c":
        return [p.view(np.complex128).astype(dt) for p in parts]
    return [p.astype(np.float32).astype(dt) for p in parts]


def cases():
    for dt in kernels.DTYPES:
        for op in ("sum", "prod", "max", "min"):
            if dt.kind == "c" and op != "sum":
                continue  # complex max/min are refused; complex prod stays with numpy
            yield pytest.param(dt, op, id=f"{dt}-{op}")


@pytest.mark.parametrize("dt,op", list(cases()))
@pytest.mark.parametrize("n", [2, 5])
def test_the_bits_of_in_rank_order(n, dt, op):
    """Every dtype and op the kernels take, 1 element to a full 4 KiB buffer,
    in place too: the same bits as in_rank_order on the N buffers, and rank
    0's words published as Exchange.run publishes them."""
    dt = np.dtype(dt)
    seg = Segment(n)
    fused = kernels.exchange_reducer(dt, op)
    uf = REDUCERS[Op(op)]
    k = 0
    for count in (1, 7, XCHG // dt.itemsize):
        for in_place in (False, True):
            k += 1
            tag, key = 100 + k, count * dt.itemsize
            xs = inputs(dt, n, count)
            for p in range(1, n):
                seg.publish(p, k, xs[p], tag, key)
            x = xs[0].copy()
            out = x if in_place else np.empty_like(x)
            bells = [seg.bell(p) for p in range(n)]
            assert seg.xc.fused(fused, x, out, tag, key, None) is None
            want = np.empty_like(x)
            in_rank_order(xs, uf, want)
            assert out.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), (count, k)
            assert seg.words(0, k) == (k, key, tag, key)
            at = seg.lay.xchg(0, k & 1)
            assert seg.mem[at:at + key].tobytes() == xs[0].view(np.uint8).tobytes()
            assert [seg.bell(p) - bells[p] for p in range(n)] == [0] + [1] * (n - 1)
            assert seg.xc.seq == k


@pytest.mark.parametrize("n", [64, 65, 130])
def test_any_number_of_ranks(n):
    """The compiled exchange takes a plan of any N (it once refused more than
    64 ranks, after the exchange's number had moved): the bits of
    in_rank_order, every peer rung, the number moved once."""
    seg = Segment(n)
    for dt, op in ((np.dtype("float32"), "sum"), (np.dtype("int64"), "max")):
        red = kernels.exchange_reducer(dt, op)
        k = seg.xc.seq + 1
        xs = inputs(dt, n, 5)
        for p in range(1, n):
            seg.publish(p, k, xs[p], 9, xs[p].nbytes)
        out = np.empty_like(xs[0])
        bells = [seg.bell(p) for p in range(n)]
        assert seg.xc.fused(red, xs[0], out, 9, xs[0].nbytes, None) is None
        want = np.empty_like(xs[0])
        in_rank_order(xs, REDUCERS[Op(op)], want)
        assert out.tobytes() == want.tobytes()
        assert [seg.bell(p) - bells[p] for p in range(n)] == [0] + [1] * (n - 1)
        assert seg.xc.seq == k and seg.words(0, k)[0] == k


def test_a_late_peer_is_left_to_pythons_wait():
    """A peer that has not published: the call returns after a bounded look,
    its own words published; Python's wait then sees the peer and the caller
    reduces the views it gets back."""
    seg = Segment(3)
    fused = kernels.exchange_reducer(np.dtype("float32"), "sum")
    xs = inputs(np.dtype("float32"), 3, 10)
    seg.publish(1, 1, xs[1], 7, 40)  # rank 2 is late
    waited = []

    def block(step, peers, late):
        assert step() == (False, False) and late() == [2]
        seg.publish(2, 1, xs[2], 7, 40)  # it arrives while rank 0 waits
        waited.append(True)
        assert step() == (True, False)

    out = np.full(10, np.nan, np.float32)
    views = seg.xc.fused(fused, xs[0], out, 7, 40, block)
    assert waited and views is not None and len(views) == 3
    assert seg.words(0, 1) == (1, 40, 7, 40)
    assert np.isnan(out).all()  # not reduced in C
    want = np.empty(10, np.float32)
    in_rank_order(xs, np.add, want)
    in_rank_order(views, np.add, out)
    assert np.array_equal(out, want)


def test_mismatches_raise_as_the_python_round_does():
    """Another call size: the error that names both sizes; another call: the
    one that names both calls; both after rank 0 has published."""
    fused = kernels.exchange_reducer(np.dtype("int32"), "sum")
    x = np.arange(4, dtype=np.int32)
    seg = Segment(2)
    seg.publish(1, 1, np.arange(8, dtype=np.int32), 5, 32)
    with pytest.raises(CollectiveError, match="call #5 moves 32 bytes where rank 0's moves 16"):
        seg.xc.fused(fused, x, np.empty_like(x), 5, 16, None)
    assert seg.words(0, 1) == (1, 16, 5, 16)
    seg = Segment(2)
    seg.publish(1, 1, x, 6, 16)
    with pytest.raises(CollectiveError, match="to call #6 where rank 0 expects 16 bytes in call #5"):
        seg.xc.fused(fused, x, np.empty_like(x), 5, 16, None)


def test_refuses_what_would_overrun():
    red = kernels.exchange_reducer(np.dtype("float32"), "sum")

    def fused(*a):
        return _native.exchange_reduce(red, *a)
    seg = Segment(2)
    big = np.zeros(XCHG // 4 + 1, np.float32)
    with pytest.raises(ValueError):
        fused(seg.xc.plan, big, np.empty_like(big), 1, 1, big.nbytes)
    with pytest.raises(ValueError):
        fused(seg.xc.plan[:5], big[:4], np.empty(4, np.float32), 1, 1, 16)
    with pytest.raises(ValueError):
        fused(seg.xc.plan, big[:4], np.empty(3, np.float32), 1, 1, 16)
    with pytest.raises(ValueError):  # 6 bytes: not a whole number of float32
        fused(seg.xc.plan, big[:4].view(np.uint8)[:6], np.empty(6, np.uint8), 1, 1, 6)
    with pytest.raises(ValueError):  # not a reducer capsule
        _native.exchange_reduce(object(), seg.xc.plan, big[:4], np.empty(4, np.float32), 1, 1, 16)
    assert seg.words(0, 1) == (0, 0, 0, 0)  # nothing published
    with pytest.raises(ValueError):  # through the exchange: nothing moves, not even its number
        seg.xc.fused(red, big, np.empty_like(big), 1, big.nbytes, None)
    assert seg.xc.seq == 0 and seg.words(0, 1) == (0, 0, 0, 0)


def test_without_the_extension_fused_is_the_python_exchange(monkeypatch):
    """Where transports._native is not built, Exchange.fused runs run():
    the words published the same way, the N views back for the caller."""
    from transports.shm import exchange
    monkeypatch.setattr(exchange, "_native", None)
    seg = Segment(3)
    xs = inputs(np.dtype("float32"), 3, 10)
    for p in (1, 2):
        seg.publish(p, 1, xs[p], 7, 40)
    red = kernels.exchange_reducer(np.dtype("float32"), "sum")
    views = seg.xc.fused(red, xs[0], np.empty_like(xs[0]), 7, 40, None)
    assert views is not None and [v.tobytes() for v in views] == [x.tobytes() for x in xs]
    assert seg.words(0, 1) == (1, 40, 7, 40) and seg.xc.seq == 1


def test_no_compiled_round_on_the_numpy_path():
    before = kernels.isa()
    try:
        kernels.use("numpy")
        assert kernels.exchange_reducer(np.dtype("float32"), "sum") is None
    finally:
        kernels.use(before)
    assert kernels.exchange_reducer(np.dtype("complex64"), "prod") is None


# under mpiexec: count the compiled calls of small all-reduces and their answers
COUNT = """
import json, sys
import numpy as np
import transports._native as native
real, codes = native.exchange_reduce, []
def counted(*a):
    codes.append(real(*a))
    return codes[-1]
native.exchange_reduce = counted
import collectives as cc
with cc.init("shm") as comm:
    r, n = comm.rank, comm.size
    for dt in (np.float32, cc.bfloat16, np.int64):
        x = np.arange(1, 9).astype(np.float32).astype(dt) * (r + 1)
        for _ in range(50):
            y = comm.all_reduce(x, op="sum")
        assert np.array_equal(y.astype(np.float64), np.arange(1, 9) * n * (n + 1) / 2), y
    y = comm.all_reduce(np.full(3, 2.0 * r), op="avg")
    assert np.array_equal(y, np.full(3, n - 1.0)), y
    from mpi4py import MPI
    every = MPI.COMM_WORLD.gather(codes)
    if r == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(every, f)
"""


@pytest.mark.parametrize("kernels_on", [True, False])
def test_small_all_reduce_takes_the_compiled_call(tmp_path, kernels_on):
    """Each small all_reduce but the first of an (op, dtype) (the general
    path's) is one compiled call where the kernels are on (finished in C,
    code 0, on whichever rank comes second, at least), and none where they
    are off."""
    out = tmp_path / "codes.json"
    env = {} if kernels_on else {"COLLECTIVES_KERNELS": "0"}
    p = run_mpi(2, ["-c", COUNT, str(out)], timeout=120, **env)
    assert p.returncode == 0, p.stdout + p.stderr
    every = json.loads(out.read_text())
    if not kernels_on:
        assert every == [[], []]
        return
    for codes in every:
        assert len(codes) == 3 * 49 and set(codes) <= {0, 1}, every
    # of two ranks in step, the later one finds the other there
    assert sum(c.count(0) for c in every) >= 3 * 49, every
