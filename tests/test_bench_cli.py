"""The benchmark command line end to end: tiny runs under mpiexec, checked through --json."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")
ROW_KEYS = {"bytes", "count", "time_us", "algbw", "busbw", "wrong", "mpi_time_us",
            "mpi_busbw", "ratio"}
TOP_KEYS = {"collective", "n", "transport", "dtype", "memcpy_gbps", "rows"}

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec at {MPIEXEC}")


def _bench(n: int, *args: str, timeout: float = 60, module: str = "bench"
           ) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("COLLECTIVES_TIMEOUT", "30")
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, "-m", module, *args]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


def _check_result(res: dict, collective: str, n: int) -> None:
    assert TOP_KEYS <= res.keys()
    assert res["collective"] == collective and res["n"] == n
    assert res["dtype"] == "float32" and res["memcpy_gbps"] > 0
    assert res["rows"], f"{collective}: no rows"
    for row in res["rows"]:
        assert ROW_KEYS <= row.keys()
        assert row["wrong"] == 0, f"{collective}: {row}"
        assert row["time_us"] > 0 and row["busbw"] >= 0


def test_all_reduce_checked_rows(tmp_path):
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "--check",
               "--json", str(out))
    res = json.loads(out.read_text())
    _check_result(res, "all_reduce", 2)
    assert [r["bytes"] for r in res["rows"]] == [8, 64, 512, 4096, 32768]
    for r in res["rows"]:  # all_reduce: busbw = algbw * 2(n-1)/n = algbw at n=2
        assert r["busbw"] == pytest.approx(r["algbw"])
        assert r["mpi_busbw"] is not None and r["ratio"] is not None
    assert "Avg bus bandwidth" in p.stdout and "memcpy" in p.stdout


def test_all_collectives_three_ranks(tmp_path):
    out = tmp_path / "all.json"
    _bench(3, "all", "-b", "1K", "-e", "16K", "-f", "16", "-n", "3", "-w", "1",
           "--check", "--json", str(out))
    results = json.loads(out.read_text())
    names = [r["collective"] for r in results]
    assert names == ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                     "all_to_all", "gather", "scatter", "barrier"]
    for res in results:
        _check_result(res, res["collective"], 3)
    sizes = {r["collective"]: [row["bytes"] for row in r["rows"]] for r in results}
    assert sizes["all_gather"] == [1020, 16380]  # n whole blocks of float32
    assert sizes["barrier"] == [0]


def test_probes_print_their_figures():
    """The measurements that docs/performance.md quotes run and print numbers."""
    p = _bench(2, "ab", "all_reduce", "direct,two_shot", "4K,64K", "--reps", "1",
               module="bench.probe")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("N=2 all_reduce")]
    assert len(lines) == 2 and all("two_shot" in ln and "MPI" in ln for ln in lines), p.stdout
    p = _bench(2, "latency", module="bench.probe")
    assert "MPI_Allreduce" in p.stdout and "ep.exchange" in p.stdout, p.stdout
    p = _bench(2, "coherence", module="bench.probe")
    assert p.stdout.count("GB/s") == 2, p.stdout
