"""Mismatched calls without debug mode never return a wrong result
(tests/mismatch_check.py), and every rank of a failed call learns of it
within about a second (tests/fastfail_check.py).

The matrix runs N = 2, 3, 4, 8 here and every N from 2 to 8 with
``MISMATCH_ALL_N=1`` (``make test-mismatch``).
"""
import json
import os
import tempfile

import pytest

from conftest import TRANSPORTS
from launch import run_mpi

SIZES = list(range(2, 9)) if os.environ.get("MISMATCH_ALL_N") else [2, 3, 4, 8]
# small slots and exchange buffers: messages of a few KiB span several of each
SMALL = {"COLLECTIVES_SHM_XCHG_BYTES": "4096", "COLLECTIVES_SHM_SLOT_BYTES": "4096",
         "COLLECTIVES_TIMEOUT": "5"}
RAISES = ("CollectiveError", "CollectiveTimeout", "PeerFailure", "ValueError", "TypeError")


def must_raise(call: str, odd: int, rank: int) -> bool:
    """Whether ``rank`` receives data from a call whose size differs from its
    own, with rank ``odd`` the one off and root 0: broadcast and scatter
    ranks receive root's data only (root keeps its own), gather and reduce
    deliver to root alone; the other calls bring every rank's data to every
    rank."""
    if call in ("broadcast", "scatter"):
        return rank != 0 and (odd == 0 or rank == odd)
    if call in ("gather", "reduce"):
        return rank == 0
    return True


def wrong(case: str, recs: list) -> list[str]:
    """What is wrong with one case's records (one per rank)."""
    call, odd = case.split()[0], int(case.rsplit("=", 1)[1])
    bad = []
    for rank, rec in enumerate(recs):
        if rec[0] == "raised":
            if rec[1] not in RAISES:
                bad.append(f"rank {rank} raised {rec[1]}")
        elif must_raise(call, odd, rank):
            bad.append(f"rank {rank} returned a result")
        elif call in ("gather", "reduce") and rank != 0 and not rec[1]:
            bad.append(f"non-root rank {rank} returned something other than None")
    return bad


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("n", SIZES)
def test_mismatched_calls_return_no_result(n, transport):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_mpi(n, ["tests/mismatch_check.py", transport, out], timeout=300, **SMALL)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    cases = res["cases"]
    assert len(cases) >= 60, sorted(cases)
    bad = {case: w for case, recs in cases.items() if (w := wrong(case, recs))}
    assert not bad, f"{len(bad)} of {len(cases)} cases:\n" + "\n".join(
        f"{c}: {w}" for c, w in list(bad.items())[:20])


def test_the_rules_of_the_matrix():
    assert must_raise("all_reduce", 1, 0) and must_raise("broadcast", 1, 1)
    assert not must_raise("broadcast", 1, 2) and not must_raise("broadcast", 0, 0)
    assert must_raise("scatter", 0, 2) and must_raise("gather", 1, 0)
    assert not must_raise("reduce", 1, 1)
    assert wrong("gather linear one odd=1", [["raised", "CollectiveError", 0.1],
                                             ["returned", False]])
    assert not wrong("gather linear one odd=1", [["raised", "CollectiveError", 0.1],
                                                 ["returned", True]])
    assert wrong("all_to_all direct many odd=1", [["returned", False], ["raised", "X", 0]])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("n", [3, 5])
def test_every_rank_learns_of_a_failure_fast(n, transport):
    """With a 30 s timeout, every rank raises within 1.5 s of its call, naming
    the rank that detected the error, and nothing else breaks."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_mpi(n, ["tests/fastfail_check.py", transport, out], timeout=120,
                    COLLECTIVES_TIMEOUT="30")
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    assert res["after"] == [True] * n, "a later call or another communicator broke"
    for case, recs in res["cases"].items():
        for r, rec in enumerate(recs):
            where = f"{case}, rank {r}: {rec}"
            assert rec["seconds"] < 1.5, where
            if case == "local error" and r == 1:
                assert rec["error"] == "InjectedFault", where
                continue
            assert rec["error"] == "CollectiveError", where
            msg = rec["message"]
            if "detected an error" not in msg:  # this rank found it itself
                assert case.startswith("mismatch") and "mismatched collectives" in msg, where
                continue
            told = int(msg.split("rank ", 1)[1].split()[0])
            assert f"rank {told} detected an error in all_reduce #2: " in msg, where
            assert "detected an error" not in recs[told].get("message", ""), \
                f"{where}: rank {told} did not detect it itself"
