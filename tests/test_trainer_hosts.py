"""``python -m trainer`` on emulated layouts (tests/emulate.py): the bytes each
rank moves to other hosts per step equal the formula of trainer/claims.py
(inter_traffic, docs/hosts.md): the flat ring, the hierarchical algorithms
on hosts of equal sizes, and the parameter server's messages."""
import json
import os
import tempfile

import pytest

from emulate import host_of, run_layout

SMALL = ["--steps", "2", "--width", "256", "--layers", "2", "--d-in", "64", "--d-out", "64",
         "--batch", "16", "--quiet"]


@pytest.mark.parametrize("layout,strategy,algorithm", [
    ("aabb", "ddp", "auto"), ("aabb", "zero3", "auto"), ("aabc", "zero2", "ring"),
    ("abab", "ps", "ring")])
def test_inter_host_bytes_per_step(layout, strategy, algorithm):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        p = run_layout(layout, ["-m", "trainer", "--strategy", strategy, "--algorithm",
                                algorithm, "--json", out, *SMALL], timeout=300,
                      COLLECTIVES_ADAPT="0")  # auto: the hierarchical algorithms' formula
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            ih = json.load(f)["inter_host"]
    assert "to and from other hosts per step" in p.stdout
    assert ih["host_of_rank"] == host_of(layout)
    assert ih["algorithms"] == ("hierarchical" if algorithm == "auto" else algorithm)
    pred, got = ih["predicted_bytes_per_rank"], ih["measured_bytes_per_rank"]
    assert None not in pred and sum(pred) > 0
    # the buffers here are padded by at most N - 1 elements per group
    assert got == pytest.approx(pred, rel=2e-3, abs=64), (got, pred)
