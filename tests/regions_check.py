"""Communicator-allocated arrays, run under mpiexec by test_regions.py.

    mpiexec -n N python tests/regions_check.py SCENARIO[,SCENARIO...] TRANSPORT

calls:  every collective, every algorithm offered, with inputs and outputs
        in regions (and in place), against the numpy reference; a non-blocking
        call on a region that an allocation waits for; then the
        input that works through the normal path: arrays of another
        communicator, regions on some ranks only, a slice at an odd offset,
        a non-contiguous view.
alloc:  shapes and dtypes; zeros are zero; on shm a rank's writes are seen
        by every peer through ``mapped``, and an array's mappings (the
        owner's and the peers') go once it and its views are gone; a
        mismatched shape or dtype raises the same error on every rank, and
        the communicator stays usable; an array outlives ``close`` as
        memory of its own process, and nothing of the regions stays mapped
        (it closes the communicator: the last scenario of a job).
kill:   rank 1 SIGKILLs itself while it holds regions; the survivors get
        PeerFailure or CollectiveTimeout.
Every rank prints "ok <rank>" at the end (one write).
"""
from __future__ import annotations

import gc
import os
import signal
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from bench.data import expect, make, reduced, stacked  # noqa: E402

SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 3), (1000,)]


def region_maps() -> int:
    """How many files of ours this process maps (regions and segments)."""
    with open("/proc/self/maps") as f:
        return len({line.split("/dev/shm/", 1)[1].split()[0] for line in f
                    if "/dev/shm/collectives-" in line})


def refused(kind, fn, *words) -> str:
    try:
        fn()
    except kind as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return str(e)
    raise AssertionError(f"accepted, where {kind.__name__} was expected")


def alloc(comm) -> None:
    n, r, t = comm.size, comm.rank, comm._t
    gc.collect()  # what an earlier scenario left
    shared = t.caps.regions and n > 1
    # every dtype, and every shape (a shape per dtype, all of them for one)
    cases = [(dt, SHAPES[i % len(SHAPES)]) for i, dt in enumerate(cc.DTYPES)]
    for dt, shape in cases + [(np.float32, s) for s in SHAPES]:
        z = comm.zeros(shape, dt)
        e = comm.empty(shape, dt)
        for a in (z, e):
            assert type(a) is np.ndarray and a.shape == shape and a.dtype == dt, a
            assert a.flags.c_contiguous and a.flags.writeable
        assert not z.reshape(-1).view(np.uint8).any(), z
        e[...] = make(dt, shape, r)
        expect(e, make(dt, shape, r), f"{dt} {shape}")
    del z, e
    assert comm.zeros(4).dtype == np.float64 and comm.empty([2, 2], "int32").shape == (2, 2)
    # a rank's writes, seen by every peer
    a = comm.zeros((5, 8), np.int64)
    a[...] = r + 1
    if shared:
        addr = a.__array_interface__["data"][0]
        assert t.locate(a) == (addr, 0) and t.locate(a[2]) == (addr, 2 * 64)
        assert t.locate(np.ones(3)) is None and t.locate(a[:, ::2]) is None
    where = comm.all_gather(np.array([a.__array_interface__["data"][0]], np.int64))
    if shared:
        for p in range(n):
            if p != r:
                v = t.mapped(p, int(where[p, 0]) + 8, 16)
                assert v is not None and (v.view(np.int64) == p + 1).all(), v
                del v  # a view of the peer's mapping keeps it
                assert t.mapped(p, int(where[p, 0]) + 8, a.nbytes) is None  # past its end
        comm.barrier()  # every peer has looked at a, and freed what it no longer holds
        t.regions.sweep()
        held = region_maps()  # the segment, a here and a of each peer, what else lives
        view = a[1:3]
        del a
        gc.collect()
        comm.barrier()
        assert region_maps() == held, "a view keeps the owner's mapping"
        for p in range(n):
            if p != r:
                assert t.mapped(p, int(where[p, 0]), 8) is not None, "freed with a view alive"
        comm.barrier()
        del view
        gc.collect()
        comm.barrier()
        for p in range(n):  # freed: the lookups say so, and drop the mappings
            if p != r:
                assert t.mapped(p, int(where[p, 0]), 8) is None, "a freed region is mapped"
        assert region_maps() == held - n, (held, region_maps())  # a's n files are gone
    # mismatched shapes or dtypes, and bad arguments: the same error on every rank
    e1 = refused(ValueError, lambda: comm.empty((3,) if r == n - 1 else (4,), np.float32),
                 "empty", "same shape and dtype", "(4,)") if n > 1 else ""
    e2 = refused(ValueError, lambda: comm.zeros(5, np.float32 if r else np.float64),
                 "zeros", "float32", "float64") if n > 1 else ""
    e3 = refused(ValueError, lambda: comm.empty(-1 if r == 0 else 1), "rank 0", "negative")
    e4 = refused(TypeError, lambda: comm.empty(2, object), "dtype")
    e5 = refused(TypeError, lambda: comm.empty("ab"), "shape")
    said = comm.all_gather(np.frombuffer("|".join((e1, e2, e3, e4, e5)).encode().ljust(2000),
                                         np.uint8))
    assert (said == said[0]).all(), "the ranks raised different errors"
    assert (comm.all_reduce(np.ones(3)) == n).all()  # still usable
    # close: the arrays outlive it, unshared; nothing of the regions stays mapped
    kept = comm.zeros(1000, np.float32)
    kept[...] = r
    comm.close()
    kept += 1
    assert (kept == r + 1).all()
    if shared:
        assert region_maps() == 1, region_maps()  # kept's own mapping only
    del kept
    gc.collect()
    assert region_maps() == 0, region_maps()


CALLS = ["all_reduce", "reduce", "reduce_scatter", "broadcast", "all_gather",
         "all_to_all", "gather", "scatter"]


_pool: dict = {}


def region(comm, role: str, shape: tuple, dt) -> np.ndarray:
    """A region of ``shape`` and ``dt`` for ``role``, allocated once and reused."""
    key = (role, shape, np.dtype(dt))
    if key not in _pool:
        _pool[key] = comm.empty(shape, dt)
    return _pool[key]


def run(comm, call: str, alg: str, dt, m: int, seed: int, place: str) -> None:
    """One call with region (or, ``place`` "plain", ordinary) arrays: "both" x and
    out in regions, "in" only x, "out" only out, "in_place" out=x (or x a
    block of out)."""
    n, r = comm.size, comm.rank
    blocks = call in ("reduce_scatter", "all_to_all", "scatter")
    xshape = (n, m) if blocks else (m,)
    oshape = {"reduce_scatter": (m,), "all_gather": (n, m), "gather": (n, m),
              "scatter": (m,)}.get(call, xshape)
    x, out = region(comm, "x", xshape, dt), region(comm, "out", oshape, dt)
    if place in ("out", "plain"):
        x = np.empty(xshape, dt)
    if place in ("in", "plain"):
        out = np.empty(oshape, dt)
    root = seed % n
    if call != "scatter":
        x[...] = make(dt, xshape, r, seed)
    elif r == root:  # the other ranks' x is not read
        x[...] = make(dt, xshape, root, seed)
    # of the blocked inputs, block r only: elements r*m on (make's offset)
    mine = {"offset": r * m}
    what = f"{call}/{alg} {dt} m={m} {place} n={n}"
    kw = {"algorithm": alg}
    if call == "all_reduce":
        o = x if place == "in_place" else out
        expect(comm.all_reduce(x, out=o, **kw), reduced(n, dt, xshape, seed=seed), what)
    elif call == "reduce":
        got = comm.reduce(x, out=out, root=root, **kw)
        if r == root:
            expect(got, reduced(n, dt, xshape, seed=seed), what)
    elif call == "reduce_scatter":
        expect(comm.reduce_scatter(x, out=out, **kw), reduced(n, dt, m, seed=seed, **mine), what)
    elif call == "broadcast":
        comm.broadcast(x, root=root, **kw)
        expect(x, make(dt, xshape, root, seed), what)
    elif call == "all_gather":
        if place == "in_place":
            out[r] = x
            x = out[r]
        expect(comm.all_gather(x, out=out, **kw), stacked(n, dt, m, seed), what)
    elif call == "all_to_all":
        want = np.stack([make(dt, m, j, seed, **mine) for j in range(n)])
        expect(comm.all_to_all(x, out=x if place == "in_place" else out, **kw), want, what)
    elif call == "gather":
        got = comm.gather(x, out=out if r == root else None, root=root, **kw)
        if r == root:
            expect(got, stacked(n, dt, m, seed), what)
    else:
        got = comm.scatter(x if r == root else None, out, root=root, **kw)
        expect(got, make(dt, m, root, seed, **mine), what)


def calls(comm) -> None:
    n, r = comm.size, comm.rank
    seed = 0
    for call in CALLS:
        places = ["both", "in", "out"] + (["in_place"] if call in (
            "all_reduce", "all_gather", "all_to_all") else [])
        for alg in comm.algorithms(call):
            for dt, m, where in ((np.float32, 1000, places), (np.int32, 37, ["both"]),
                                 (cc.bfloat16, 5, ["both"])):
                for place in where:
                    seed += 1
                    run(comm, call, alg, dt, m, seed, place)
        # several rounds of the staged and one-copy paths (over 1 MiB)
        for alg in [None] + [a for a in comm.algorithms(call) if a in ("one_copy", "one_copy_or_staged")]:
            seed += 1
            run(comm, call, alg, np.float32, 300_000, seed, "both")
    _pool.clear()
    # all_to_all in_place on plain arrays: one copy by process_vm_readv where
    # every rank's out is apart from its x; where one rank's is not (rank 0
    # in place), every rank takes the staged path
    if "one_copy_or_staged" in comm.algorithms("all_to_all"):
        for mixed in (False, True):
            seed += 1
            x = make(np.float32, (n, 1000), r, seed)
            want = np.stack([make(np.float32, (n, 1000), j, seed)[r] for j in range(n)])
            o = x if (mixed and r == 0) else np.empty_like(x)
            expect(comm.all_to_all(x, out=o, algorithm="one_copy_or_staged"), want,
                   f"all_to_all/in_place plain, rank 0 in place: {mixed}, n={n}")
    # a non-blocking call on a region; an allocation waits for it first
    x = comm.zeros(100_000, np.float32)
    x += r + 1
    h = comm.all_reduce(x, out=x, async_op=True)
    comm.empty(3)
    assert h.done() and (h.wait() == n * (n + 1) // 2).all()
    foreign(comm)


def foreign(comm) -> None:
    """Input that works through the normal path."""
    n, r = comm.size, comm.rank
    # arrays of another communicator: a sub-communicator's regions on the parent
    sub = comm.split(r % 2)
    a = sub.empty((n, 100), np.float32)
    a[...] = make(np.float32, (n, 100), r)
    for alg in comm.algorithms("all_gather"):
        expect(comm.all_gather(a[0], algorithm=alg),
               np.stack([make(np.float32, (n, 100), j)[0] for j in range(n)]),
               f"all_gather/{alg} of another communicator's array")
    for alg in comm.algorithms("all_reduce"):
        expect(comm.all_reduce(a, algorithm=alg), reduced(n, np.float32, (n, 100)),
               f"all_reduce/{alg} of another communicator's array")
    sub.close()
    # a region on some ranks, a plain array on the others: every rank takes
    # the same path
    mixed = comm.empty((n, 100), np.float32)  # collective: every rank allocates
    if r % 2:
        mixed = np.empty((n, 100), np.float32)
    mixed[...] = make(np.float32, (n, 100), r)
    for call in ("all_reduce", "reduce_scatter"):
        for alg in comm.algorithms(call):
            want = reduced(n, np.float32, (n, 100))
            got = getattr(comm, call)(mixed, algorithm=alg)
            expect(got, want if call == "all_reduce" else want[r], f"{call}/{alg} mixed")
    # a contiguous slice at an odd byte offset, and a non-contiguous view
    b = comm.zeros(1001, np.uint8)
    odd = b[1:]
    odd[...] = make(np.uint8, 1000, r)
    for alg in comm.algorithms("all_gather"):
        expect(comm.all_gather(odd, algorithm=alg), stacked(n, np.uint8, 1000),
               f"all_gather/{alg} of a slice at an odd offset")
    for alg in comm.algorithms("broadcast"):
        odd[...] = make(np.uint8, 1000, r)
        comm.broadcast(odd, root=n - 1, algorithm=alg)
        expect(odd, make(np.uint8, 1000, n - 1), f"broadcast/{alg} of an odd slice")
    c = comm.zeros((4, 6), np.float64)
    plain = np.zeros((4, 6))
    said = [refused(ValueError, lambda: comm.all_reduce(v), "C-contiguous")
            for v in (c[:, ::2], plain[:, ::2])]
    assert said[0] == said[1], said  # the same error as for any such array


def kill(comm) -> None:
    n, r = comm.size, comm.rank
    # the launcher signals the survivors of a death (as in faults.py): ignore
    # it, so that the library's own detection is what the test sees
    for sig in (signal.SIGUSR1, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    a = comm.zeros(1 << 16, np.float32)
    a += 1
    comm.all_reduce(a, out=a)
    if r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        while True:
            comm.all_reduce(a, out=a)
    except Exception as e:  # noqa: BLE001 (the test checks the kind)
        sys.stdout.write(f"survived {r} {type(e).__name__}\n")
        sys.stdout.flush()
    os._exit(0)  # MPI cannot finalize with a dead peer


def main(scenarios: str, transport: str) -> None:
    comm = cc.init(transport=transport)
    for s in scenarios.split(","):
        {"alloc": alloc, "calls": calls, "kill": kill}[s](comm)
    sys.stdout.write(f"ok {comm.rank}\n")  # one write: lines of ranks do not interleave
    sys.stdout.flush()
    comm.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
