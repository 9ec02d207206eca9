"""The mpi transport's compiled send-receive (``mpi_swap`` in
transports/_native.c, ``MpiEndpoint.sendrecv``; transports/_swap.py) and
its compiled schedules (``mpi_steps``, ``MpiEndpoint.steps``: recursive
doubling's whole all-reduce, its folds at N = 3 included).

Under mpiexec, on flat ``mpi`` and on ``hier`` over emulated hosts: the
algorithms made of send-receive rounds (recursive doubling, halving-doubling,
Bruck, recursive halving, the ring) give numpy's result and the same bits
and byte counts (inter-host ones too) with the compiled calls and with
Python's posts, and take a compiled call; a peer that is late past its
polls hands the requests to Python's wait; a message of the wrong size
raises the error Python's path raises, in either call;
``COLLECTIVES_MPI_NATIVE=0`` turns them off."""
from __future__ import annotations


import pytest

from emulate import run_script
from transports import _native

pytestmark = pytest.mark.skipif(not hasattr(_native, "mpi_swap"),
                                reason="transports._native not built, or without mpi_swap")

SCRIPT = r"""
import json, sys, time
import numpy as np
import collectives as cc
from transports import _swap, schedule

out_path, transport = sys.argv[1], sys.argv[2]
comm = cc.init(transport)
r, n = comm.rank, comm.size
bound = _swap.swap(np.zeros(1), np.zeros(1))
bound_steps = _swap._bound()[1]
calls = {"swap": 0, "late": 0}
# fn (mpi_swap or mpi_steps), its calls and late peers counted; state_at:
# where its unfinished tuple has the state
def counting(fn, state_at):
    def counted(*a):
        calls["swap"] += 1
        res = fn(*a)
        if res is not None and res[state_at] == _swap.LATE:
            calls["late"] += 1
        return res
    return counted
if bound is not None:
    counted, counted_steps = counting(bound, 0), counting(bound_steps, 1)
    _swap._state[:] = [counted, counted_steps]
def native(on):
    _swap._state[:] = [counted, counted_steps] if on and bound else [None, None]
CASES = [("all_reduce", "recursive_doubling"), ("all_reduce", "halving_doubling"),
         ("all_reduce", "ring"), ("all_gather", "bruck"), ("all_gather", "ring"),
         ("reduce_scatter", "recursive_halving"), ("reduce_scatter", "ring"),
         ("all_gather", "recursive_doubling"), ("reduce_scatter", "recursive_doubling")]
bad, took = [], []
for call, alg in CASES:
    before = calls["swap"]
    for dtype in ("float32", "float64", "int32", "float16"):
        for count in (1, 3, 1000, 70000):
            # a late peer (past the compiled call's polls) in float32's cases
            for late in (False, True) if dtype == "float32" else (False,):
                rng = np.random.default_rng(1000 * r + count)
                x = (rng.random(count * n) * 10).astype(dtype)
                every = [(np.random.default_rng(1000 * p + count).random(count * n) * 10)
                         .astype(dtype) for p in range(n)]
                got = {}
                for mode in ("native", "python"):
                    native(mode == "native")
                    if late and mode == "native" and r == n - 1:
                        time.sleep(0.05)
                    t0 = comm.traffic
                    if call == "all_reduce":
                        res = comm.all_reduce(x, algorithm=alg)
                    elif call == "all_gather":
                        res = comm.all_gather(x[:count], algorithm=alg)
                    else:
                        res = comm.reduce_scatter(x.reshape(n, count), algorithm=alg)
                    got[mode] = (res.copy(), comm.traffic - t0)
                if call == "all_reduce":
                    want = sum(every[1:], every[0].copy())
                elif call == "all_gather":
                    want = np.stack([e[:count] for e in every])
                else:
                    want = sum(every[1:], every[0].copy())[r * count:(r + 1) * count]
                (a, ta), (b, tb) = got["native"], got["python"]
                tol = 1e-2 if dtype == "float16" else 1e-5
                if (a.tobytes() != b.tobytes() or ta != tb
                        or not np.allclose(a.astype(float).reshape(-1),
                                           np.asarray(want, float).reshape(-1), rtol=tol)):
                    bad.append([call, alg, dtype, count, late, str(ta), str(tb)])
    took.append(calls["swap"] - before)
native(True)
# the small calls' shortest way (Communicator._planned with a plan): the
# default, many times over, taken as a plan for each call, right every time
lanes = {"all_reduce": 0, "all_gather": 0, "reduce_scatter": 0}
real_lane = comm._planned
def lane(call, *a, **k):
    lanes[call] += len(a) > 6 and a[6] is not None
    return real_lane(call, *a, **k)
comm._planned = lane
for i in range(400):
    for dtype, op in (("float32", "sum"), ("int32", "max"), ("float64", "avg")):
        m = 1 + i % 5
        x = (np.arange(m * n) % 7 + r + i % 3).astype(dtype)
        every = [(np.arange(m * n) % 7 + p + i % 3).astype(dtype) for p in range(n)]
        red = {"sum": lambda a: sum(a[1:], a[0].copy()), "max": lambda a: np.maximum.reduce(a),
               "avg": lambda a: sum(a[1:], a[0].copy()) / n}[op]
        got = comm.all_reduce(x, op=op)
        if not np.allclose(got, red(every)):
            bad.append(["lane all_reduce", dtype, op, m])
        got = comm.reduce_scatter(x.reshape(n, m), op=op)
        if not np.allclose(got, red(every)[r * m:(r + 1) * m]):
            bad.append(["lane reduce_scatter", dtype, op, m])
        got = comm.all_gather(x[:m])
        if not np.array_equal(got, np.stack([e[:m] for e in every])):
            bad.append(["lane all_gather", dtype, m])
comm._planned = real_lane
native(True)
# a message of the wrong size: the error Python's path gives, in a
# send-receive and in a schedule (rank 1 sends 16 bytes, rank 0 expects 32)
ep = comm._t.coll
words = []
for form in ("sendrecv", "steps"):
    for mode in ("native", "python"):
        native(mode == "native")
        ep.tag += 1
        try:
            if form == "sendrecv" and r ^ 1 < n:
                ep.sendrecv(np.zeros(2), r ^ 1, np.zeros(4), r ^ 1)
            elif form == "steps" and r < 2:
                plan = schedule.Plan([(schedule.RECV, 1, 1, 0, 0, 0, 1)] if r == 0
                                  else [(schedule.SEND, 0, 0, 0, 1, 0, 0)])
                buf = np.zeros(4 if r == 0 else 2)
                if mode == "python" or not ep.steps(plan, buf, buf, None, None):
                    if r == 0:
                        ep.recv(buf, 1)
                    else:
                        ep.send(buf, 0)
            words.append("no error")
        except Exception as e:
            words.append(f"{type(e).__name__}: {e}")
        comm.barrier()
native(True)
out = comm.all_gather(np.array([calls["swap"], calls["late"], len(bad), min(took)]))
lanes_all = comm.all_gather(np.array(list(lanes.values())))
if r == 0:
    json.dump({"bound": bound is not None, "calls": out.tolist(), "bad": bad, "took": took,
               "lanes": lanes_all.tolist(),
               "words": words}, open(out_path, "w"))
comm.close()
"""


def _run(tmp_path, layout=None, n=4, transport="mpi", **env):
    return run_script(tmp_path, SCRIPT, transport, layout, n, **env)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_compiled_sendrecv_matches_python_on_mpi(tmp_path, n):
    res = _run(tmp_path, n=n)
    assert res["bound"]
    assert res["bad"] == []
    # every rank took the compiled call, and found a late peer at least once
    for rank, (swaps, late, bad, fewest) in enumerate(res["calls"]):
        assert bad == 0 and swaps > 0, res["calls"]
        # each algorithm took it (at N = 3, rank 0 only sends and receives
        # in halving's folds: the compiled call is for its send-receives)
        assert fewest > 0 or (n == 3 and rank == 0), res["calls"]
    assert sum(late for _, late, _, _ in res["calls"]) > 0, res["calls"]
    words = res["words"]
    assert len(words) == 4 and words[0] == words[1] and words[2] == words[3], words
    assert all("sent 16 bytes where rank 0 expects 32" in w for w in words), words


def test_compiled_sendrecv_on_hier(tmp_path):
    """hier's messages between ranks go through its flat mpi part, compiled too;
    inter-host bytes counted as Python's posts count them."""
    res = _run(tmp_path, layout="abab", transport="hier")
    assert res["bound"] and res["bad"] == []
    for _, _, _, fewest in res["calls"]:
        assert fewest > 0, res["calls"]
    # the small calls' defaults on hier (recursive doubling, halving) took
    # the shortest way, every call right (all_reduce, all_gather, reduce_scatter)
    for counts in res["lanes"]:
        assert min(counts) > 0, res["lanes"]


def test_native_off(tmp_path):
    res = _run(tmp_path, n=2, COLLECTIVES_MPI_NATIVE="0")
    assert not res["bound"] and res["bad"] == []
    assert res["calls"] == [[0, 0, 0, 0], [0, 0, 0, 0]]
