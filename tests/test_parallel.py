"""Pipeline schedules, tensor-parallel layers and the process grid: equal to
the unsplit model, and their traffic, activations and bubbles as the formulas
say."""
from __future__ import annotations

import importlib.util
import json
import math

import pytest

from launch import run_mpi
from trainer import pipeline as pl


@pytest.mark.parametrize("kind", pl.SCHEDULES)
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("m", [4, 8, 16])
def test_schedule_bubble_and_activations(kind, p, m):
    """With a forward of 1 and a backward of 2 per stage (1/v and 2/v per
    chunk), each schedule's idle time over its compute time is exactly the
    formula, and a rank never holds more micro-batches than it says."""
    v = 2 if kind == "interleaved" else 1
    if kind == "interleaved" and m % p:
        with pytest.raises(ValueError, match="multiple"):
            pl.schedule(kind, p, 0, m, v)
        return
    tls = []
    for r in range(p):
        ops = pl.schedule(kind, p, r, m, v)
        assert sorted(o for o in ops if o[0] == "F") == [("F", c, i) for c in range(v) for i in range(m)]
        assert sorted(o for o in ops if o[0] == "B") == [("B", c, i) for c in range(v) for i in range(m)]
        live = peak = 0
        for op, _, _ in ops:
            live += 1 if op == "F" else -1
            peak = max(peak, live)
        assert peak == pl.peak_formula(kind, p, r, m, v)
        if kind != "gpipe":
            assert peak <= (p - r - 1) * 2 + (v - 1) * p + 1 if v > 1 else peak <= p
        tls.append([(op, c, i, 0.0, 0.0, (1.0 if op == "F" else 2.0) / v) for op, c, i in ops])
    rep = pl.replay(tls, p, v, m)
    assert rep["bubble"] == pytest.approx((p - 1) / (v * m))  # (p-1)/m; interleaved (p-1)/(v·m)
    assert pl.bubble_formula(kind, p, m, v) == pytest.approx((p - 1) / (v * m))


@pytest.fixture(scope="module", params=[2, 4])
def checks(request, tmp_path_factory):
    n = request.param
    out = tmp_path_factory.mktemp(f"parallel{n}") / "checks.json"
    p = run_mpi(n, ["tests/parallel_check.py", str(out)], timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return n, json.loads(out.read_text())


def test_equal_to_unsplit_model(checks):
    n, results = checks
    kinds = {json.dumps(c["layout"], sort_keys=True) for c in results}
    assert len(kinds) == len(results) >= 4
    for c in results:
        what = f"{c['layout']} at N={n}"
        assert c["missing"] == 0, what + ": some parameter shard was never reported"
        assert c["grad_rel_diff"] < 1e-5, what + f": gradients differ by {c['grad_rel_diff']}"
        assert c["param_moved"] > 2 * c["lr"], what
        assert c["param_diff"] < 1e-3 * c["param_moved"], what + f": weights differ by {c['param_diff']}"


def pp_bytes(rep: dict, stage: int) -> float:
    """Activation bytes a rank sends per step on its pipeline group: each of
    its v virtual stages sends the replica's rows (B/D × d fp32) forward,
    unless it is the last, and their gradient back, unless it is the first."""
    P, v = rep["pp"], rep["chunks"]
    sends = 2 * v - (stage == 0) - (stage == P - 1)
    return sends * (rep["batch"] // rep["dp"]) * rep["model"]["d"] * 4


def tp_bytes(rep: dict, layer: str) -> dict[str, float]:
    """Bytes a layer sends per step on its tensor group, with ring all-reduces
    (2(T-1)/T·S for S bytes) of the replica's B/D rows: one of the
    activations forward (embedding, blocks) and backward (blocks, head); the
    head's cross-entropy three of one float per row."""
    T, rows, d = rep["tp"], rep["batch"] // rep["dp"], rep["model"]["d"]
    act = 2 * (T - 1) / T * rows * d * 4
    if layer == "embed":
        return {"forward": act, "backward": 0.0}
    if layer == "head":
        return {"forward": 3 * 2 * (T - 1) / T * rows * 4, "backward": act}
    return {"forward": act, "backward": act}


def test_traffic_and_activations(checks):
    n, results = checks
    for c in results:
        rep, lay = c["report"], c["layout"]
        assert [rep[k] for k in ("dp", "tp", "pp")] == [lay.get(k, 1) for k in ("dp", "tp", "pp")]
        for r in rep["per_rank"]:
            what = f"{c['layout']} rank {r['rank']}"
            assert r["peak"] == r["peak_formula"], what
            want = pp_bytes(rep, r["coords"][2])
            assert r["traffic_formula"]["pp"] == pytest.approx(want), what
            assert r["traffic"]["pp"] == pytest.approx(want, abs=64), what
            assert r["traffic"]["dp"] == pytest.approx(r["traffic_formula"]["dp"], abs=64), what
            tp_total = 0.0
            for ly in r["layers"]:
                for d, want in tp_bytes(rep, ly["layer"]).items():
                    got = ly["measured"][d]
                    assert ly["predicted"][d] == pytest.approx(want), f"{what} {ly['layer']} {d}"
                    assert got == pytest.approx(want, rel=0.02, abs=64), f"{what} {ly['layer']} {d}"
                    tp_total += got
            assert r["traffic"]["tp"] == pytest.approx(tp_total, abs=1e-6)
            if rep["tp"] == 1:
                assert r["traffic"]["tp"] == 0


def test_cli_pipeline_json_and_timeline(tmp_path):
    out, png = tmp_path / "pp.json", tmp_path / "tl.png"
    args = ["-m", "trainer", "--strategy", "pipeline", "--schedule", "interleaved",
            "--micro-batches", "4", "--steps", "2", "--d-model", "32", "--ffn", "64",
            "--vocab", "64", "--batch", "64", "--json", str(out)]
    plot = importlib.util.find_spec("matplotlib") is not None
    if plot:
        args += ["--timeline", str(png)]
    p = run_mpi(2, args, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "bubble (idle / busy)" in p.stdout and "(p-1)/(v·m)" in p.stdout
    rep = json.loads(out.read_text())
    assert rep["pp"] == 2 and rep["chunks"] == 2 and len(rep["steps"]) == 2
    assert rep["bubble"]["formula"] == pytest.approx(1 / 8)
    if plot:
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_default_pipeline_run_learns(tmp_path):
    """``--strategy pipeline`` with no other options: no step's loss above the
    first (ln 256, uniform over the vocabulary), and the next-token table
    learnt within the 20 steps."""
    out = tmp_path / "pp.json"
    p = run_mpi(2, ["-m", "trainer", "--strategy", "pipeline", "--quiet", "--json", str(out)],
                timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    losses = [s["loss"] for s in json.loads(out.read_text())["steps"]]
    assert losses[0] == pytest.approx(math.log(256), abs=0.1)
    assert max(losses[1:]) < losses[0] and losses[-1] < 0.1 * losses[0], losses


def test_cli_grid_and_bad_grid():
    p = run_mpi(4, ["-m", "trainer", "--strategy", "tensor", "--dp", "2", "--tp", "2",
                    "--steps", "2", "--d-model", "32", "--ffn", "64", "--vocab", "64",
                    "--batch", "32"], timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "dp 2 × tp 2 × pp 1" in p.stdout and "tensor-parallel bytes" in p.stdout
    p = run_mpi(4, ["-m", "trainer", "--strategy", "pipeline", "--dp", "3", "--steps", "1"],
                timeout=60)
    assert p.returncode != 0 and "but there are 4 ranks" in p.stderr
