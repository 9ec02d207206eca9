"""The variable-count calls, scan and exscan, the object calls and foreign
arrays against numpy (tests/variable_check.py) at N = 1 to 8 on shm and mpi,
and on emulated hosts over hier; ranks that disagree on a dtype, op or root
(tests/disagree_check.py)."""
import json
import os
import tempfile

import pytest

from conftest import TRANSPORTS, WORLD_SIZES
from emulate import LAYOUTS, run_layout
from launch import run_mpi


def _run(argv_tail, n=None, layout=None, **env):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        argv = [argv_tail[0], *argv_tail[1:], out]
        p = run_layout(layout, argv, **env) if layout else run_mpi(n, argv, **env)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            return json.load(f)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_variable_calls_against_numpy(n, transport):
    res = _run(["tests/variable_check.py", transport], n)
    assert res["cases"] > 400 * n and res["failures"] == [], res["failures"][:5]


def test_variable_calls_with_rendezvous_messages():
    """On shm with every message of 4 KiB and more by rendezvous and 4 KiB
    exchange buffers (conftest.CMA_ENV): blocks of gather_v without counts
    that come by rendezvous below the size at which their senders write
    them into root's out are received as any message."""
    from conftest import CMA_ENV
    res = _run(["tests/variable_check.py", "shm"], 3, **CMA_ENV)
    assert res["cases"] > 400 * 3 and res["failures"] == [], res["failures"][:5]


@pytest.mark.parametrize("layout", ["2x2", "2+1+1"])
def test_variable_calls_on_hosts(layout):
    res = _run(["tests/variable_check.py", "hier"], layout=LAYOUTS[layout])
    assert res["cases"] > 400 * len(LAYOUTS[layout]) and res["failures"] == [], \
        res["failures"][:5]


FIELD = {"dtype": "dtype", "op": "op", "root": "root", "counts": ""}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("n", [2, 3])
def test_disagreeing_ranks_raise(n, transport):
    """Debug mode off: a rank that passes another dtype, op, root or counts
    than its peers (the default after 40 agreeing calls, and every algorithm; 8 B to
    1 MiB). Every rank raises CollectiveError naming the field within a
    second, in the call or, where its part in the call was only to send (or
    to exchange with ranks that agree with it), at its next call; none hangs
    but rank 0 of a root disagreement at N = 3 on mpi that waits for a block
    sent to a rank that has left (docs/reliability.md)."""
    res = _run(["tests/disagree_check.py", transport], n, COLLECTIVES_TIMEOUT="5")
    bad = []

    def wrong(rec, field) -> str:
        # the field, or (a message of an earlier call found later) that the calls differ
        named = f"{FIELD[field]} differ" in rec[3] or "calls differ between ranks" in rec[3] \
            or (field == "counts" and ("differ" in rec[3] or "expects" in rec[3]))
        if rec[1] != "CollectiveError" or rec[2] > 1.0 or not named:
            return f"{rec[1]} after {rec[2]} s: {rec[3][:300]}"
        return ""

    for case, recs in res.items():
        field = case.split()[0]
        for rank, rec in enumerate(recs):
            if rec[0] == "returned":
                if rec[1][0] != "raised":
                    bad.append(f"{case}: rank {rank} returned, and its next call too")
                elif rec[1][1] != "CollectiveError":
                    bad.append(f"{case}: rank {rank} returned, then {rec[1][1]}")
                continue
            if rec[1] == "CollectiveTimeout" and transport == "mpi" and n == 3 \
                    and field == "root" and rank == 0:
                continue  # waits for a block that rank 1 sent rank 2 (reliability.md)
            why = wrong(rec, field)
            if why:
                bad.append(f"{case}: rank {rank} {why}")
    assert not bad, "\n".join(bad[:20])
    assert len(res) > 100


def _api_examples(tmp_path) -> str:
    """docs/api.md's examples of "More calls", as one script."""
    from launch import ROOT
    doc = (ROOT / "docs" / "api.md").read_text()
    part = doc[doc.index("## More calls"):doc.index("## Ops and dtypes")]
    blocks = [b.split("```", 1)[0] for b in part.split("```python\n")[1:]]
    assert len(blocks) >= 4
    script = tmp_path / "examples.py"
    script.write_text("import sys\nimport numpy as np\nimport collectives as cc\n"
                      "comm = cc.init(transport=sys.argv[1])\n" + "\n".join(blocks) +
                      "\nprint('examples ran on', comm.size)\ncomm.close()\n")
    return str(script)


@pytest.mark.parametrize("transport,n", [("shm", 1), ("shm", 3), ("mpi", 2)])
def test_api_examples_of_more_calls_run(tmp_path, transport, n):
    p = run_mpi(n, [_api_examples(tmp_path), transport], timeout=120)
    assert p.returncode == 0 and f"examples ran on {n}" in p.stdout, p.stdout[-2000:] + \
        p.stderr[-3000:]


def test_torch_tensors_where_torch_is_installed(tmp_path):
    """torch CPU tensors in and out through __dlpack__, written in place."""
    pytest.importorskip("torch", reason="torch is not installed here; the __dlpack__ path "
                                        "is tested with a stand-in (variable_check.py)")
    script = tmp_path / "t.py"
    script.write_text("import sys, torch, collectives as cc\n"
                      "comm = cc.init(transport='shm')\n"
                      "t = torch.full((4,), float(comm.rank))\n"
                      "comm.all_reduce(t, out=t)\n"
                      "assert t.tolist() == [float(sum(range(comm.size)))] * 4, t\n"
                      "print('torch ok')\ncomm.close()\n")
    p = run_mpi(2, [str(script)], timeout=120)
    assert p.returncode == 0 and "torch ok" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
