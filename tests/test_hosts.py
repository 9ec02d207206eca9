"""Many hosts, emulated on one machine (tests/emulate.py): every layout's
hosts, traffic formulas, refusals and bad input (tests/hosts_check.py), and
the conformance suite on the "hier" transport.

The default run (40 s on 2 idle cores, 75 s on busy ones) checks every
layout's hosts and traffic, and runs the whole conformance suite on 2x2 and
its lite plan (tests/conformance.py: every algorithm, a sample of dtypes,
ops, roots and counts) on 2+1+1 and the non-contiguous layout;
``HOSTS_ALL=1`` (make test-hosts) runs the whole suite on every layout, 2x3
and 4x2 included, and the mismatch matrix (tests/mismatch_check.py) on "hier".
"""
import json
import os
import tempfile

import pytest

from conformance import FAMILIES, LITE_ENV
from conftest import check_family
from emulate import LAYOUTS, run_layout

ALL = os.environ.get("HOSTS_ALL", "") not in ("", "0")
FULL = ("2x2",)  # the whole suite in the default run
SAMPLED = ("2+1+1", "interleaved")  # the lite plan in the default run


@pytest.mark.parametrize("name", list(LAYOUTS) + ["1 host"])
def test_hosts_traffic_refusals(name):
    layout = LAYOUTS.get(name, "aaaa")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "hosts.json")
        p = run_layout(layout, ["tests/hosts_check.py", out], timeout=300)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        with open(out) as f:
            res = json.load(f)
    assert res["checked"] > 0
    assert not res["failures"], "\n".join(res["failures"][:30])


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_conformance(conformance, name, family):
    if not (ALL or name in FULL + SAMPLED):
        pytest.skip("make test-hosts (HOSTS_ALL=1) runs this layout")
    layout = LAYOUTS[name]
    lite = {} if ALL or name in FULL else {LITE_ENV: "1"}
    check_family(conformance(len(layout), "hier", layout, **lite), family)


@pytest.mark.skipif(not ALL, reason="make test-hosts (HOSTS_ALL=1) runs it")
@pytest.mark.parametrize("name", ["2+1+1", "2x2"])
def test_mismatched_calls_on_hier(name):
    """tests/mismatch_check.py's matrix on "hier": a rank whose call differs
    in size is caught in every part (shared memory, leaders, flat MPI)."""
    from test_mismatch import SMALL, wrong
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_layout(LAYOUTS[name], ["tests/mismatch_check.py", "hier", out], timeout=300,
                       **SMALL)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            cases = json.load(f)["cases"]
    bad = {case: w for case, recs in cases.items() if (w := wrong(case, recs))}
    assert cases and not bad, "\n".join(f"{c}: {w}" for c, w in list(bad.items())[:20])


def test_layout_arithmetic_and_choice():
    """In process: host numbering, a rank's view of its host, and which
    algorithms a layout offers and picks."""
    from collectives.families import offered
    from collectives.selection import Where, row
    from emulate import command, host_of
    from transports.base import Capabilities
    from transports.hosts import Hosts, number
    hier, shm = Capabilities(hier=True), Capabilities(shared_exchange=True, one_copy=True)
    assert number(["b", "a", "b", "c"]) == (0, 1, 0, 2) == tuple(host_of("baba"[:3] + "c"))
    h = Hosts(2, number(list("abab")), (0,) * 4, (True,) * 4)
    assert (h.hosts, h.host, h.local_rank, h.local_size, h.equal) == (2, 0, 1, 2, True)
    assert h.remote == [False, True, False, True] and h.members(1) == [1, 3]
    odd = Hosts(3, number(list("aabc")), (0,) * 4, (True,) * 4)
    assert (odd.hosts, odd.host, odd.local_rank, odd.local_size, odd.equal) == (3, 2, 0, 1, False)
    for alg in ("hier_slices", "hier_pipelined", "hier_mirror"):  # equal hosts only
        assert alg not in offered(hier, hosts=odd)["all_reduce"]
        assert alg in offered(hier, hosts=h)["all_reduce"]
    assert not any(a.startswith("hier") for a in offered(shm)["all_reduce"])
    assert not any(a.startswith("hier") for a in offered(shm, hosts=h)["all_reduce"])
    def choose(call, nbytes, hosts):
        where = Where(4, hier=True, equal_hosts=hosts.equal, per_host=hosts.local_size)
        return row(call, nbytes, where).algorithm
    assert choose("all_reduce", 1 << 20, h) == "hier_slices"
    assert choose("all_reduce", 4 << 20, h) == choose("all_reduce", 64 << 20, h) == "hier_pipelined"
    assert choose("all_reduce", 16 << 20, odd) == "hier_leader"
    assert choose("all_reduce", 1 << 20, odd) == "hier_leader"
    assert choose("all_reduce", 8, h) == "recursive_doubling"
    assert choose("all_reduce", 8 << 10, h) == "hier_mirror"
    assert choose("all_reduce", 8, odd) == "hier_leader"
    one = Hosts(1, number(list("abcd")), (0,) * 4, (True,) * 4)  # one rank a host
    assert choose("all_reduce", 8, one) == "hier_leader"
    assert choose("broadcast", 8, h) == "hier"
    assert choose("gather", 8, h) == "binomial"
    cmd = command("aabc", ["p.py"])
    assert cmd.count(":") == 2
    assert sum(w.startswith("COLLECTIVES_HOST") for w in cmd) == 3


def test_debug_mode_on_hier():
    """tests/debug_check.py on "hier" over 2+1+1: mismatched calls raise
    CollectiveMismatch on every rank of every host, and the communicator goes on."""
    p = run_layout(LAYOUTS["2+1+1"], ["tests/debug_check.py", "hier"], timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert len(lines) == 7 * 4 and all(ln.startswith("ok") for ln in lines), lines
