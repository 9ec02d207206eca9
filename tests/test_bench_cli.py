"""The benchmark command line end to end: tiny runs under mpiexec, checked through --json."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import launch
from bench import summary

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(launch.MPIEXEC)
INPLACE_KEYS = {"inplace_iters", "inplace_time_us", "inplace_algbw", "inplace_busbw",
                "inplace_wrong"}
# each round's figures, and what the rounds give
ROUND_KEYS = {"times_us", "inplace_times_us", "mpi_times_us", "ratios", "copy_times_us"}
ROW_KEYS = {"bytes", "count", "time_us", "algbw", "busbw", "wrong", "inplace", "mpi_time_us",
            "mpi_busbw", "ratio", "repeat", "copy_gbps", "pct_copy"} | INPLACE_KEYS | ROUND_KEYS
# the in-place form of each call (bench/cases.py): its own call, the same call, none
INPLACE = {"all_reduce": "own", "all_gather": "own", "reduce_scatter": "own",
           "broadcast": "same", "reduce": "own", "all_to_all": "own", "gather": "none",
           "scatter": "none", "barrier": "none"}
TOP_KEYS = {"collective", "n", "transport", "dtype", "memcpy_gbps", "repeat", "rows"}

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec at {MPIEXEC}")


# python -c: the benchmark on a broken library or a broken baseline
RUN = """
from bench.__main__ import _run
sys.exit(_run())
"""
# a library whose in-place all_reduce leaves x as it was
BROKEN_IN_PLACE = """
import sys
import collectives
real = collectives.Communicator.all_reduce
def all_reduce(self, x, out=None, *args, **kw):
    if out is x:
        real(self, x, None, *args, **kw)
        return x
    return real(self, x, out, *args, **kw)
collectives.Communicator.all_reduce = all_reduce
""" + RUN
# a library whose out-of-place all_reduce writes a given out on its first call
# only, and later returns it as it is (a stale result): every rank skips the
# same calls, so the job stays in step
BROKEN_OUT_OF_PLACE = """
import sys
import collectives
real = collectives.Communicator.all_reduce
written = {}  # id -> out, kept alive so that no id is reused
def all_reduce(self, x, out=None, *args, **kw):
    if out is None or out is x:
        return real(self, x, out, *args, **kw)
    if id(out) in written:
        return out
    written[id(out)] = out
    return real(self, x, out, *args, **kw)
collectives.Communicator.all_reduce = all_reduce
""" + RUN
# MPI's all-reduce (the baseline) leaves a wrong result in its output
BROKEN_BASELINE = """
import sys
from bench import cases
real = cases.AllReduce.mpi
def mpi(self):
    call = real(self)
    def wrong():
        call()
        self.mout[...] = -self.mout - 1
    return wrong
cases.AllReduce.mpi = mpi
""" + RUN


def _bench(n: int, *args: str, timeout: float = 60, module: str = "bench",
           code: str = "", status: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("COLLECTIVES_TIMEOUT", "30")
    run = ["-c", code] if code else ["-m", module]
    cmd = launch.LAUNCH(n, [sys.executable, *run, *args])
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == status, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


def factor(collective: str, n: int) -> float:
    """busbw / algbw (bench/__init__.py's table)."""
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(
        collective, (n - 1) / n)


def _check_result(res: dict, collective: str, n: int, dtype: str = "float32") -> None:
    assert TOP_KEYS <= res.keys()
    assert res["collective"] == collective and res["n"] == n
    assert res["dtype"] == dtype and res["memcpy_gbps"] > 0
    assert res["rows"], f"{collective}: no rows"
    for row in res["rows"]:
        assert ROW_KEYS <= row.keys()
        assert row["wrong"] == 0, f"{collective}: {row}"
        assert row["time_us"] > 0 and row["busbw"] >= 0
        assert row["inplace"] == ("none" if row.get("twin") else INPLACE[collective]), row
        if row["inplace"] == "none":
            assert all(row[k] is None for k in INPLACE_KEYS), f"{collective}: {row}"
        else:
            assert row["inplace_wrong"] == 0, f"{collective}: {row}"
            assert row["inplace_time_us"] > 0 and row["inplace_iters"] > 0
            factor = row["busbw"] / row["algbw"]  # the call's, in place as out of place
            assert row["inplace_busbw"] == pytest.approx(row["inplace_algbw"] * factor)
        if row["inplace"] == "same":  # broadcast: its one call is in place
            assert row["inplace_time_us"] == row["time_us"], f"{collective}: {row}"
        _check_rounds(res, row)


def _check_rounds(res: dict, row: dict) -> None:
    """One figure per round of each call; the medians and ratios from them."""
    rounds, what = res["repeat"], f"{res['collective']}: {row}"
    assert row["repeat"] == rounds
    lists = [row[k] for k in ROUND_KEYS if row[k] is not None]
    assert all(len(v) == rounds for v in lists), what
    assert row["time_us"] == pytest.approx(statistics.median(row["times_us"])), what
    if row["inplace"] != "none":
        assert row["inplace_time_us"] == pytest.approx(
            statistics.median(row["inplace_times_us"])), what
    if row["mpi_time_us"] is not None:
        assert row["mpi_time_us"] == pytest.approx(statistics.median(row["mpi_times_us"]))
        assert row["ratios"] == pytest.approx(
            [m / t for m, t in zip(row["mpi_times_us"], row["times_us"])]), what
        assert row["ratio"] == pytest.approx(statistics.median(row["ratios"])), what
    if res["collective"] == "barrier":  # no bytes: no copy to compare with
        assert row["copy_times_us"] is None and row["pct_copy"] is None, what
        return
    # busbw / copy bandwidth, round by round: factor * copy time / our time
    factor = row["busbw"] / row["algbw"]
    pcts = [100 * factor * c / t for c, t in zip(row["copy_times_us"], row["times_us"])]
    assert row["pct_copy"] == pytest.approx(statistics.median(pcts)), what
    assert row["copy_gbps"] == pytest.approx(
        row["bytes"] / statistics.median(row["copy_times_us"]) / 1e3), what
    # one local copy beats a collective between processes (at most by a little
    # more the other way where a rank moves only part of S); where every rank
    # may move only its block of S, all at once (gather, scatter: one_copy's
    # blocks copied in place; reduce-scatter) the collective's time approaches
    # a copy of S/n, and %cpy 100 * factor * n = 100 (n - 1), with some room
    # for the copy's noise
    ceiling = 200.0
    if res["collective"] in ("gather", "scatter", "reduce_scatter"):
        ceiling = max(ceiling, 150 * factor * res["n"])
    assert 0 < row["pct_copy"] < ceiling, what


def test_all_reduce_checked_rows(tmp_path):
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "--check",
               "--json", str(out))
    res = json.loads(out.read_text())
    _check_result(res, "all_reduce", 2)
    assert res["repeat"] == 3 and res["alloc"] == "numpy"  # the defaults
    assert [r["bytes"] for r in res["rows"]] == [8, 64, 512, 4096, 32768]
    for r in res["rows"]:  # all_reduce: busbw = algbw * 2(n-1)/n = algbw at n=2
        assert r["busbw"] == pytest.approx(r["algbw"])
        assert r["inplace_busbw"] == pytest.approx(r["inplace_algbw"])
        assert r["mpi_busbw"] is not None and r["ratio"] is not None
    assert "Avg bus bandwidth" in p.stdout and "memcpy" in p.stdout
    assert "in place:" in p.stdout  # the closing line's in-place average
    heads = [ln for ln in p.stdout.splitlines() if "out-of-place" in ln]
    assert len(heads) == 1 and "in-place" in heads[0], p.stdout
    names = p.stdout.splitlines()[p.stdout.splitlines().index(heads[0]) + 1].split()
    assert names.count("time") == 2 and names.count("#wrong") == 2, names
    assert names[-2:] == ["ratio", "%cpy"], names
    assert "median over rounds" in p.stdout, p.stdout
    md = summary.table([res], None)
    assert "in-place time (us)" in md and md.count("\n| all_reduce |") == 5, md


def test_summary_across_jobs():
    """--across: per (N, transport, alloc) table, each cell the median of the
    jobs' ratios with the lowest and highest; sizes filter; rows without a
    ratio are left out."""
    def job(ratios, alloc="numpy", n=2):
        rows = [{"bytes": b, "ratio": r, "algorithm": "auto:direct"} for b, r in ratios]
        return [{"collective": "all_gather", "n": n, "transport": "shm", "alloc": alloc,
                 "rows": rows}]
    jobs = [job([(1 << 20, 0.9), (4 << 20, 2.0)]), job([(1 << 20, 1.2), (4 << 20, None)]),
            job([(1 << 20, 1.1)]), job([(1 << 20, 3.0)], alloc="comm"),
            [{"collective": "all_gather", "n": 4, "transport": "shm", "rows": [
                {"bytes": 1 << 20, "ratio": 0.5, "algorithm": "ring"}]}]]  # no alloc: numpy
    md = summary.across(jobs, None)
    tables = md.split("N = ")[1:]
    assert [t.splitlines()[0].split(":")[0] for t in tables] == [
        "2, transport shm, comm arrays", "2, transport shm, numpy arrays",
        "4, transport shm, numpy arrays"], md
    assert "| all_gather | 3.00 (3.00-3.00, 1) `direct` |" in tables[0], md
    assert "| 1 MiB | 4 MiB |" in tables[1], md
    assert "| all_gather | 1.10 (0.90-1.20, 3) `direct` | 2.00 (2.00-2.00, 1) `direct` |" \
        in tables[1], md
    assert "0.50 (0.50-0.50, 1) `ring`" in tables[2], md
    only = summary.across(jobs, {4 << 20})
    assert "| 4 MiB |" in only and "1 MiB" not in only and "comm arrays" not in only, only


def test_all_collectives_three_ranks(tmp_path):
    out = tmp_path / "all.json"
    _bench(3, "all", "-b", "1K", "-e", "16K", "-f", "16", "-n", "3", "-w", "1",
           "--repeat", "1", "--check", "--json", str(out))
    results = json.loads(out.read_text())
    assert {r["repeat"] for r in results} == {1}
    names = [r["collective"] for r in results]
    assert names == ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                     "all_to_all", "gather", "scatter", "barrier"]
    for res in results:
        _check_result(res, res["collective"], 3)
        for row in res["rows"]:
            if res["collective"] != "barrier":
                assert row["busbw"] == pytest.approx(row["algbw"] * factor(res["collective"], 3))
    sizes = {r["collective"]: [row["bytes"] for row in r["rows"]] for r in results}
    assert sizes["all_gather"] == [1020, 16380]  # n whole blocks of float32
    assert sizes["barrier"] == [0]
    md = summary.table(results, None)
    gather = [ln for ln in md.splitlines() if ln.startswith("| gather |")]
    assert len(gather) == 2 and all("| n/a | n/a |" in ln for ln in gather), md


def test_two_rounds_and_two_algorithms(tmp_path):
    """--repeat 2 with --algorithm all: per size the default's row first, then
    one per algorithm; two figures of each call a row, one MPI series timed
    in the same rounds for every row, the ratio the mean of the two rounds'
    ratios (the median of two); ÷best each round's time over the fastest
    named algorithm's in that round, the median of those.  With --twin, a
    last row per size, twin:X, times a second copy of the named algorithm X
    of lowest median time in the same rounds, its ÷best against the same
    fastest-of-the-round (not against itself)."""
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "4K", "-e", "64K", "-f", "16", "-n", "5", "-w", "1",
               "--repeat", "2", "--algorithm", "all", "--check", "--twin", "--json", str(out))
    res = json.loads(out.read_text())
    _check_result(res, "all_reduce", 2)
    assert res["repeat"] == 2
    by_size: dict = {}
    for r in res["rows"]:
        assert r["iters"] == 5 and len(r["ratios"]) == 2, r
        assert r["ratio"] == pytest.approx(sum(r["ratios"]) / 2), r
        by_size.setdefault(r["bytes"], []).append(r)
    for rows in by_size.values():
        assert len(rows) > 2 and len({tuple(r["mpi_times_us"]) for r in rows}) == 1, rows
        assert len({tuple(r["copy_times_us"]) for r in rows}) == 1, rows
        default, named, twin = rows[0], rows[1:-1], rows[-1]
        assert twin["twin"] and not any(r["twin"] for r in rows[:-1]), rows
        x = min(named, key=lambda r: sorted(r["times_us"])[0] + sorted(r["times_us"])[1])
        assert twin["algorithm"] == f"twin:{x['algorithm']}", rows
        assert twin["inplace"] == "none" and twin["wrong"] == 0, twin
        assert default["auto"] and not any(r["auto"] for r in named), rows
        assert default["algorithm"] in [r["algorithm"] for r in named], rows
        assert default["source"] in (None, "table", "tuning", "adapted"), default
        assert all(r["source"] is None for r in named), rows
        fastest = [min(ts) for ts in zip(*(r["times_us"] for r in named))]
        for r in rows:
            want = [t / b for t, b in zip(r["times_us"], fastest)]
            assert r["over_best_ratios"] == pytest.approx(want), r
            assert r["over_best"] == pytest.approx(sum(want) / 2), r
        # a named algorithm is never faster than the fastest of its round
        assert all(x >= 1 for r in named for x in r["over_best_ratios"]), rows
        assert min(x for r in named for x in r["over_best_ratios"]) == 1, rows
    lines = p.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if "out-of-place" in ln)
    assert lines[head + 1].split()[-3:] == ["ratio", "%cpy", "\u00f7best"], lines[head + 1]
    assert any(ln.startswith("# \u00f7best: median over rounds") for ln in lines), p.stdout
    autos = [ln.split()[5] for ln in lines[head + 3:] if ln.split()[5:6] and
             ln.split()[5].startswith("auto:")]
    assert len(autos) == len(by_size), p.stdout
    for label, rows in zip(autos, by_size.values()):
        source = rows[0]["source"]
        assert label == f"auto:{rows[0]['algorithm']}" + (f"({source})" if source else "")
    assert sum(ln.split()[5].startswith("twin:") for ln in lines[head + 3:]
               if ln.split()[5:6]) == len(by_size), p.stdout
    md = summary.defaults([[res]], None)
    assert md.count("\n| all_reduce |") == len(by_size), md
    assert "| twin \u00f7 best |" in md, md
    for b, rows in by_size.items():
        size_rows = [ln for ln in md.splitlines() if ln.startswith("| all_reduce |")]
        assert all(ln.rstrip(" |").split("|")[-1].strip() != "-" for ln in size_rows), md


def test_summary_defaults():
    """--defaults: per (N, transport, alloc), per collective and size, the
    default's algorithm and source, the median over the jobs of its ÷best
    and ratio, the fastest named algorithm (lowest median time) and its
    ratio; sizes without a default row or without named rows are left out."""
    def row(b, alg, time_us, ratio, auto=False, over_best=None, source=None):
        return {"bytes": b, "algorithm": alg, "auto": auto, "time_us": time_us,
                "ratio": ratio, "over_best": over_best, "source": source}

    def job(over_best, ratio, alloc="numpy"):
        return [{"collective": "all_reduce", "n": 2, "transport": "shm", "alloc": alloc,
                 "baseline": "MPI", "rows": [
                     row(1 << 20, "direct", 9.0, ratio, True, over_best, "table"),
                     row(1 << 20, "ring", 20.0, 0.5), row(1 << 20, "direct", 10.0, 1.0),
                     row(1 << 20, "two_shot", 8.0, 1.25),
                     row(4 << 20, "ring", 1.0, 1.0),                  # no default
                     row(16 << 20, "ring", 1.0, 1.0, True, 1.0)]}]    # nothing named
    md = summary.defaults([job(1.1, 1.0), job(1.3, 2.0), job(0.9, 3.0, alloc="comm")], None)
    tables = md.split("N = ")[1:]
    assert [t.splitlines()[0].split(":")[0] for t in tables] == [
        "2, transport shm, comm arrays", "2, transport shm, numpy arrays"], md
    assert "ratio = MPI time / ours" in tables[0], md
    assert "| all_reduce | 1 MiB | direct (table) | 0.90 | 3.00 | two_shot | 1.25 | 1 |" \
        in tables[0], md
    assert "| all_reduce | 1 MiB | direct (table) | 1.20 | 1.50 | two_shot | 1.25 | 2 |" \
        in tables[1], md
    assert "4 MiB" not in md and "16 MiB" not in md, md
    # the closing line: the cells within the bound (1.15 at N = 2), and where
    # one of ours beats MPI and the default does not
    assert "within 1.15: 1 of 1; one of ours beats MPI and the default does not: 0" \
        in tables[0], md
    assert "median 1.20, max 1.20; within 1.15: 0 of 1 (not: all_reduce 1 MiB)" in tables[1], md
    slow = summary.defaults([job(1.1, 0.9)], None)
    assert "within 1.15: 1 of 1; one of ours beats MPI and the default does not: 1 " \
        "(all_reduce 1 MiB)" in slow, slow
    assert "no size" in summary.defaults([[{**job(1, 1)[0], "rows": [
        row(1 << 20, "ring", 1.0, 1.0)]}]], None)


def test_communicator_allocated_buffers(tmp_path):
    """--alloc comm: every collective on comm.empty buffers, checked, at sizes
    where the defaults and every algorithm (in_place and one_copy among
    them) read the peers' arrays from their mappings."""
    out = tmp_path / "comm.json"
    p = _bench(3, "all", "-b", "4K", "-e", "12M", "-f", "48", "-n", "2", "-w", "1",
               "--repeat", "1", "--check", "--alloc", "comm", "--json", str(out))
    assert "communicator-allocated (comm.empty)" in p.stdout
    for res in json.loads(out.read_text()):
        _check_result(res, res["collective"], 3)


def test_repeat_must_be_positive():
    from bench import cli
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["all_reduce", "--repeat", "0"], 1, 2)
    assert e.value.code == 2


def test_bfloat16_checked_against_a_user_defined_mpi_op(tmp_path):
    """bfloat16 (-d bfloat16): checked against float32 arithmetic rounded to
    bfloat16; MPI has no bfloat16, so its reducing calls are labelled MPI-op
    (a user-defined op on 16-bit words) and its other calls move bytes."""
    out = tmp_path / "bf16.json"
    p = _bench(3, "all", "-b", "1K", "-e", "16K", "-f", "16", "-n", "3", "-w", "1",
               "-d", "bfloat16", "-o", "sum", "--check", "--json", str(out))
    results = json.loads(out.read_text())
    for res in results:
        _check_result(res, res["collective"], 3, "bfloat16")
        reducing = res["collective"] in ("all_reduce", "reduce", "reduce_scatter")
        assert res["baseline"] == ("MPI-op" if reducing else "MPI"), res
        if reducing:
            assert all(r["mpi_time_us"] > 0 for r in res["rows"]), res
    assert "user-defined op" in p.stdout and "mpi-op_time" in p.stdout, p.stdout


def test_in_place_checks_catch_a_wrong_result(tmp_path):
    """#wrong counts the in-place call's own mismatches: a library whose in-place
    all-reduce leaves x as it was is caught there and only there."""
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "4K", "-e", "4K", "-n", "2", "-w", "1", "--check",
               "--json", str(out), code=BROKEN_IN_PLACE, status=1)
    row = json.loads(out.read_text())["rows"][0]
    assert row["wrong"] == 0 and row["inplace_wrong"] > 100, row
    assert "WRONG RESULTS" in p.stdout


def test_out_of_place_checks_catch_a_stale_result(tmp_path):
    """#wrong counts our out-of-place result, not MPI's (which is right here),
    on an output poisoned before the checked call: a library that leaves a
    given out as its first call wrote it shows every element wrong (2 ranks
    of 1024) out of place, none in place, and the job fails."""
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "4K", "-e", "4K", "-n", "2", "-w", "1", "--check",
               "--json", str(out), code=BROKEN_OUT_OF_PLACE, status=1)
    row = json.loads(out.read_text())["rows"][0]
    assert row["count"] == 1024 and row["mpi_time_us"] is not None, row
    assert row["wrong"] == 2 * 1024 and row["inplace_wrong"] == 0, row
    assert "WRONG RESULTS" in p.stdout


def test_a_wrong_baseline_is_not_counted_as_ours(tmp_path):
    """MPI's output is not what #wrong checks: a baseline that leaves a wrong
    result changes nothing in our columns, and the job succeeds."""
    out = tmp_path / "ar.json"
    p = _bench(2, "all_reduce", "-b", "4K", "-e", "64K", "-f", "16", "-n", "2", "-w", "1",
               "--check", "--json", str(out), code=BROKEN_BASELINE)
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2
    for row in rows:
        assert row["wrong"] == 0 and row["inplace_wrong"] == 0, row
        assert row["mpi_time_us"] is not None, row
    assert "WRONG RESULTS" not in p.stdout


def test_probes_print_their_figures():
    """The measurements that docs/performance.md quotes run and print numbers."""
    p = _bench(2, "ab", "all_reduce", "direct,two_shot,two_shot:plain", "4K,64K", "--reps", "1",
               "--huge-pages", "off", module="bench.probe")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("N=2 all_reduce")]
    assert len(lines) == 2 and all("two_shot:plain" in ln and "MPI" in ln for ln in lines), \
        p.stdout
    assert all(re.search(r"input on huge pages: \d\.\d\d/\d\.\d\d\)$", ln) for ln in lines), \
        p.stdout
    p = _bench(2, "huge", "--size", "4M", "--reps", "1", module="bench.probe")
    assert p.stdout.count("process_vm_readv of 2048 KiB") == 4, p.stdout
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("all_to_all 4 MiB")]
    assert len(rows) == 3 and all("one_copy_or_staged" in ln and "MPI" in ln for ln in rows), p.stdout
    p = _bench(2, "latency", module="bench.probe")
    assert "MPI_Allreduce" in p.stdout and "ep.exchange" in p.stdout, p.stdout
    p = _bench(2, "latency", "--transport", "mpi", module="bench.probe")
    assert re.search(r"^ +[\d.]+ us  recursive doubling on mpi4py alone, 8 B$", p.stdout, re.M) \
        and "8 B (mpi)" in p.stdout and "through messages" in p.stdout, p.stdout
    p = _bench(2, "small", "8", "--reps", "1", "--iters", "100", module="bench.probe")
    assert "N=2 all_reduce     8 B" in p.stdout and "python" in p.stdout, p.stdout
    p = _bench(2, "coherence", module="bench.probe")
    assert p.stdout.count("GB/s") == 2, p.stdout
    p = _bench(2, "dtypes", "64K", "--reps", "1", module="bench.probe")
    assert "N=2 all_reduce     65536 B" in p.stdout and "bfloat16" in p.stdout, p.stdout
    p = _bench(2, "parts", "64K", "--reps", "1", module="bench.probe")
    assert "all_to_all, N = 2, 65536 B" in p.stdout and \
        len(re.findall(r"^ +[\d.]+ us  (MPI|np|one_copy|direct)", p.stdout, re.M)) == 6, p.stdout
    p = _bench(2, "alias", "--reps", "1", module="bench.probe")
    assert re.search(r"^-48: [\d.]+ .*\+256: [\d.]+$", p.stdout, re.M), p.stdout


def test_sustained_runs_count_every_default_call():
    """bench.sustained: per collective, the default's time over the best
    named algorithm's and the algorithm its calls ran, counted over every
    default call of every round."""
    p = _bench(3, "gather,all_reduce", "-b", "64K", "--calls", "40", "--rounds", "2",
               module="bench.sustained", timeout=120)
    lines = {ln.split()[0]: ln for ln in p.stdout.splitlines() if " B: default " in ln}
    assert set(lines) == {"gather", "all_reduce"}, p.stdout
    for name, ln in lines.items():
        m = re.search(r"÷best ([\d.]+) \(best (\w+)\); default ran (\w+) in (\d+) of (\d+) "
                      r"calls; named \(us\): (.*)$", ln)
        assert m, ln
        named = dict(zip(m[6].split()[::2], map(float, m[6].split()[1::2])))
        assert m[2] in named and m[3] in named and float(m[1]) > 0, ln
        assert int(m[5]) == 40 * 2 and 0 < int(m[4]) <= 80, ln  # every default call, no named one
    with pytest.raises(SystemExit):
        from bench import sustained
        sustained.parse(["barrier"])


def test_sustained_cost_pairs_the_default_with_its_settled_algorithm():
    """bench.sustained --cost: the default against the algorithm it ran
    most, named, in pairs of runs; the ratio is of the two medians' kind."""
    p = _bench(2, "broadcast", "-b", "64K", "--cost", "--calls", "30", "--rounds", "3",
               module="bench.sustained", timeout=120)
    m = re.search(r"^broadcast 65536 B: default ([\d.]+) us, (\w+) named ([\d.]+) us; "
                  r"default ÷ named, paired: median ([\d.]+), quartiles ([\d.]+)-([\d.]+) "
                  r"\(3 pairs of 30 calls\)$", p.stdout, re.M)
    assert m, p.stdout
    from collectives.families import FAMILIES
    assert m[2] in FAMILIES["broadcast"].names()
    assert float(m[1]) > 0 and float(m[3]) > 0 and float(m[5]) <= float(m[4]) <= float(m[6])
