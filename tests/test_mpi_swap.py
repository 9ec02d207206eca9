"""The mpi transport's compiled send-receive (``mpi_swap`` in
transports/_native.c, ``MpiEndpoint.sendrecv``; transports/_swap.py).

Under mpiexec, on flat ``mpi`` and on ``hier`` over emulated hosts: the
algorithms made of send-receive rounds (recursive doubling, halving-doubling,
Bruck, recursive halving, the ring) give numpy's result and the same bits
and byte counts (inter-host ones too) with the compiled call and with
Python's posts, and take the compiled call; a peer that is late past its
polls hands the requests to Python's wait; a message of the wrong size
raises the error Python's path raises; ``COLLECTIVES_MPI_NATIVE=0`` turns
it off."""
from __future__ import annotations

import json

import pytest

from emulate import run_layout
from launch import run_mpi
from transports import _native

pytestmark = pytest.mark.skipif(not hasattr(_native, "mpi_swap"),
                                reason="transports._native not built, or without mpi_swap")

SCRIPT = r"""
import json, sys, time
import numpy as np
import collectives as cc
from transports import _swap

out_path, transport = sys.argv[1], sys.argv[2]
comm = cc.init(transport)
r, n = comm.rank, comm.size
bound = _swap.swap(np.zeros(1), np.zeros(1))
calls = {"swap": 0, "late": 0}
if bound is not None:
    def counted(*a):
        calls["swap"] += 1
        res = bound(*a)
        if res is not None and res[0] == _swap.LATE:
            calls["late"] += 1
        return res
    _swap._state[0] = counted
CASES = [("all_reduce", "recursive_doubling"), ("all_reduce", "halving_doubling"),
         ("all_reduce", "ring"), ("all_gather", "bruck"), ("all_gather", "ring"),
         ("reduce_scatter", "recursive_halving"), ("reduce_scatter", "ring")]
bad, took = [], []
for call, alg in CASES:
    before = calls["swap"]
    for dtype in ("float32", "float64", "int32", "float16"):
        for count in (1, 3, 1000, 70000):
            for late in (False, True):
                rng = np.random.default_rng(1000 * r + count)
                x = (rng.random(count * n) * 10).astype(dtype)
                every = [(np.random.default_rng(1000 * p + count).random(count * n) * 10)
                         .astype(dtype) for p in range(n)]
                got = {}
                for mode in ("native", "python"):
                    _swap._state[0] = counted if mode == "native" and bound else None
                    if late and r == n - 1:
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
_swap._state[0] = counted if bound else None
# a message of the wrong size: the error Python's path gives
ep = comm._t.coll
words = []
for mode in ("native", "python"):
    _swap._state[0] = counted if mode == "native" and bound else None
    ep.tag += 1
    try:
        ep.sendrecv(np.zeros(2), r ^ 1, np.zeros(4), r ^ 1)
        words.append("no error")
    except Exception as e:
        words.append(f"{type(e).__name__}: {e}")
comm.barrier()
_swap._state[0] = counted if bound else None
out = comm.all_gather(np.array([calls["swap"], calls["late"], len(bad), min(took)]))
if r == 0:
    json.dump({"bound": bound is not None, "calls": out.tolist(), "bad": bad, "took": took,
               "words": words}, open(out_path, "w"))
comm.close()
"""


def _run(tmp_path, layout=None, n=4, transport="mpi", **env):
    out = tmp_path / "out.json"
    argv = ["-c", SCRIPT, str(out), transport]
    p = (run_layout(layout, argv, timeout=600, **env) if layout
         else run_mpi(n, argv, timeout=600, **env))
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("n", [2, 4])
def test_compiled_sendrecv_matches_python_on_mpi(tmp_path, n):
    res = _run(tmp_path, n=n)
    assert res["bound"]
    assert res["bad"] == []
    # every rank took the compiled call, and found a late peer at least once
    for swaps, late, bad, fewest in res["calls"]:
        assert fewest > 0 and bad == 0, res["calls"]  # each algorithm took it
    assert sum(late for _, late, _, _ in res["calls"]) > 0, res["calls"]
    native, python = res["words"]
    assert native == python and "sent 16 bytes where rank 0 expects 32" in native


def test_compiled_sendrecv_on_hier(tmp_path):
    """hier's messages between ranks go through its flat mpi part, compiled too;
    inter-host bytes counted as Python's posts count them."""
    res = _run(tmp_path, layout="abab", transport="hier")
    assert res["bound"] and res["bad"] == []
    for _, _, _, fewest in res["calls"]:
        assert fewest > 0, res["calls"]


def test_native_off(tmp_path):
    res = _run(tmp_path, n=2, COLLECTIVES_MPI_NATIVE="0")
    assert not res["bound"] and res["bad"] == []
    assert res["calls"] == [[0, 0, 0, 0], [0, 0, 0, 0]]
