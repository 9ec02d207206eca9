"""Bad local input: each call raises ValueError/TypeError naming the argument,
before any byte moves (traffic unchanged), and the communicator still works.

Run in-process (a world of one) by test_errors.py, and under mpiexec as
``python tests/bad_input.py TRANSPORT`` (exit status 1 on a failure).
"""
from __future__ import annotations

import sys

import numpy as np

import collectives as cc


def cases(comm):
    """(description, call, expected exception, words the message must contain)."""
    n = comm.size
    x = np.ones(6)
    ro = np.ones(6)
    ro.flags.writeable = False
    strided = np.ones(12)[::2]
    blocks = np.ones((n, 2))
    yield "x is a list", lambda: comm.all_reduce([1.0, 2.0]), TypeError, ["x", "ndarray"]
    yield "bool dtype", lambda: comm.all_reduce(np.ones(3, bool)), TypeError, ["dtype", "bool"]
    yield "object dtype", lambda: comm.broadcast(np.array([None])), TypeError, ["buf", "dtype"]
    yield "strided x", lambda: comm.all_reduce(strided), ValueError, ["x", "C-contiguous"]
    yield "out shape", lambda: comm.all_reduce(x, out=np.ones(5)), ValueError, ["out", "shape"]
    yield "out dtype", lambda: comm.all_reduce(x, out=np.ones(6, np.float32)), TypeError, ["out", "dtype"]
    yield "out read-only", lambda: comm.all_reduce(x, out=ro), ValueError, ["out", "read-only"]
    yield "out strided", lambda: comm.all_reduce(x, out=np.ones(12)[::2]), ValueError, ["out", "contiguous"]
    ov = np.ones(8)
    yield "partial overlap", lambda: comm.all_reduce(ov[:6], out=ov[2:]), ValueError, ["overlaps"]
    yield "bad op", lambda: comm.all_reduce(x, op="median"), ValueError, ["op", "median"]
    yield "avg on ints", lambda: comm.all_reduce(np.ones(3, np.int32), op="avg"), TypeError, ["avg", "int32"]
    yield "max on complex", lambda: comm.all_reduce(np.ones(3, complex), op=cc.MAX), TypeError, ["max", "complex"]
    yield "bad algorithm", lambda: comm.all_reduce(x, algorithm="magic"), ValueError, ["algorithm", "magic", "ring"]
    if comm.transport != "shm":  # built for shared-memory exchange buffers: not offered
        yield ("two_shot without shared memory", lambda: comm.all_reduce(x, algorithm="two_shot"),
               ValueError, ["two_shot", "shared memory", "'ring', 'recursive_doubling'"])
    yield "root too big", lambda: comm.broadcast(x, root=n), ValueError, ["root", str(n)]
    yield "root negative", lambda: comm.reduce(x, root=-1), ValueError, ["root"]
    yield "root float", lambda: comm.gather(x, root=0.5), TypeError, ["root", "int"]
    yield "root bool", lambda: comm.scatter(None, x, root=True), TypeError, ["root"]
    yield "broadcast read-only", lambda: comm.broadcast(ro), ValueError, ["buf", "read-only"]
    yield "reduce_scatter leading dim", lambda: comm.reduce_scatter(np.ones((n + 1, 2))), ValueError, ["x", "size"]
    yield "reduce_scatter scalar", lambda: comm.reduce_scatter(np.float64(1.0)), TypeError, ["x"]
    yield "reduce_scatter 0-d", lambda: comm.reduce_scatter(np.array(1.0)), ValueError, ["x", "shape"]
    yield "reduce_scatter out", lambda: comm.reduce_scatter(blocks, out=np.ones(3)), ValueError, ["out", "shape"]
    yield "all_to_all leading dim", lambda: comm.all_to_all(np.ones(n + 1)), ValueError, ["x", "size"]
    yield "all_gather out shape", lambda: comm.all_gather(x, out=np.ones((n, 5))), ValueError, ["out", "shape"]
    yield "all_gather out is x", lambda: comm.all_gather(x, out=x), ValueError, ["out"]
    ag = np.ones((n + 1, 2))  # overlaps that are not this rank's block: not in place
    skew = ag.reshape(-1)[1:3]
    yield "all_gather skewed overlap", lambda: comm.all_gather(skew, out=ag[:n]), ValueError, ["overlap", "block"]
    yield "reduce_scatter skewed overlap", lambda: comm.reduce_scatter(ag[:n], out=skew), ValueError, ["overlap", "block"]
    if n > 1:
        other = 1 + (comm.rank + 1) % n
        yield "all_gather wrong block", lambda: comm.all_gather(ag[other], out=ag[1:]), ValueError, ["overlap", "block"]
        yield "reduce_scatter wrong block", lambda: comm.reduce_scatter(ag[1:], out=ag[other]), ValueError, ["overlap", "block"]
    yield "scatter without out", lambda: comm.scatter(blocks, None), TypeError, ["out"]
    yield "send to self", lambda: comm.send(x, comm.rank), ValueError, ["dst", "this rank"]
    yield "send out of range", lambda: comm.send(x, n), ValueError, ["dst"]
    yield "recv from negative", lambda: comm.recv(np.ones(3), -1), ValueError, ["src"]
    if n > 1:
        peer = (comm.rank + 1) % n
        yield "tag negative", lambda: comm.isend(x, peer, tag=-1), ValueError, ["tag"]
        yield "tag too big", lambda: comm.irecv(np.ones(3), peer, tag=1 << 20), ValueError, ["tag"]
        yield "recv read-only", lambda: comm.recv(ro, peer), ValueError, ["out", "read-only"]
    yield "split color float", lambda: comm.split(0.5), TypeError, ["color"]
    yield "unknown collective", lambda: comm.algorithms("allreduce"), ValueError, ["algorithms: unknown collective 'allreduce'"]
    yield ("choose_algorithm of an unknown collective", lambda: comm.choose_algorithm("allreduce", 8),
           ValueError, ["choose_algorithm: unknown collective 'allreduce'"])
    yield ("choose_algorithm of negative bytes", lambda: comm.choose_algorithm("all_reduce", -1),
           ValueError, ["choose_algorithm: nbytes"])
    yield ("choose_algorithm of a float", lambda: comm.choose_algorithm("all_reduce", 1.5),
           TypeError, ["choose_algorithm", "nbytes"])
    yield "init transport", lambda: cc.init(transport="tcp"), ValueError, ["transport", "tcp"]
    yield "init timeout", lambda: cc.init(timeout=-1), ValueError, ["timeout"]
    if comm.rank == 0:  # checks that only the root makes: the others are not called
        yield "gather out shape", lambda: comm.gather(x, out=np.ones((n, 5))), ValueError, ["out"]
        yield "scatter x shape", lambda: comm.scatter(np.ones((n + 1, 6)), x), ValueError, ["x", "shape"]
        yield "reduce out dtype", lambda: comm.reduce(x, out=np.ones(6, np.int8)), TypeError, ["out", "dtype"]


def check_all(comm) -> list[str]:
    fails = []
    before = comm.traffic
    for desc, call, exc, words in cases(comm):
        try:
            call()
        except exc as e:
            msg = str(e)
            missing = [w for w in words if w not in msg]
            if missing:
                fails.append(f"{desc}: message {msg!r} lacks {missing}")
        except Exception as e:  # the wrong kind of error
            fails.append(f"{desc}: raised {type(e).__name__}: {e}, expected {exc.__name__}")
        else:
            fails.append(f"{desc}: no error, expected {exc.__name__}")
    if comm.traffic != before:
        fails.append(f"bytes moved during bad calls: {comm.traffic - before}")
    got = comm.all_reduce(np.full(4, comm.rank + 1.0))
    if not np.array_equal(got, np.full(4, comm.size * (comm.size + 1) / 2)):
        fails.append(f"the communicator is broken after bad calls: {got}")
    comm.close()
    try:
        comm.all_reduce(np.ones(2))
        fails.append("a closed communicator accepted a call")
    except ValueError as e:
        if "closed" not in str(e):
            fails.append(f"closed communicator: {e}")
    return fails


if __name__ == "__main__":
    fails = check_all(cc.init(transport=sys.argv[1]))
    for f in fails:
        print("FAIL", f)
    sys.exit(1 if fails else 0)
