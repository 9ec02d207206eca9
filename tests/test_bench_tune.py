"""``python -m bench tune``: the rules from the measurements, and one short run
under mpiexec checked through the file it writes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import launch
from bench import tune
from bench.cases import COLLECTIVES

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(launch.MPIEXEC)
K = 1024

needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec at {MPIEXEC}")


# -- the rules -------------------------------------------------------------------------
def test_one_size_is_one_unbounded_rule():
    assert tune.rules({4 * K: {"ring": 2.0, "direct": 1.0}}) == [[None, "direct"]]


def test_boundaries_are_the_geometric_means_rounded_down():
    measured = {K: {"a": 1.0, "b": 2.0}, 16 * K: {"a": 2.0, "b": 1.0},
                256 * K: {"a": 1.0, "b": 2.0}}
    assert tune.rules(measured) == [[4 * K, "a"], [64 * K, "b"], [None, "a"]]
    # sizes that are no powers of 4 apart: int(sqrt(a * b)), exactly
    odd = {1000: {"a": 1.0, "b": 2.0}, 3000: {"a": 2.0, "b": 1.0}}
    assert tune.rules(odd) == [[int(math.sqrt(1000 * 3000)), "a"], [None, "b"]]
    assert tune.boundary(1000, 3000) == 1732
    big = (16 << 20, 64 << 20)
    assert tune.boundary(*big) == 32 << 20


def test_rules_are_sorted_by_size_and_merged():
    """The measurements in any order; adjacent sizes with the same best
    algorithm give one rule, up to the last boundary of the run; the last
    rule has no bound."""
    measured = {16 << 20: {"ring": 1.0, "direct": 3.0},
                K: {"ring": 2.0, "direct": 1.0},
                256 * K: {"ring": 2.0, "direct": 1.0},
                16 * K: {"ring": 2.0, "direct": 1.0},
                1 << 20: {"ring": 1.0, "direct": 2.0},
                4 << 20: {"ring": 1.0, "direct": 2.0}}
    assert tune.rules(measured) == [[tune.boundary(256 * K, 1 << 20), "direct"],
                                    [None, "ring"]]
    everywhere = {s: {"ring": 1.0, "direct": 2.0} for s in (K, 16 * K, 1 << 20)}
    assert tune.rules(everywhere) == [[None, "ring"]]


def test_equal_times_go_to_the_first_algorithm_offered():
    assert tune.rules({K: {"b": 1.0, "a": 1.0}}) == [[None, "b"]]


def test_no_measurements_is_an_error():
    with pytest.raises(ValueError):
        tune.rules({})


def test_document_format():
    measured = {"all_reduce": {"plain": {16 * K: {"ring": 2e-5, "direct": 1e-5},
                                         K: {"ring": 2e-6, "direct": 1e-6}}},
                "barrier": {"plain": {0: {"direct": 1e-6, "dissemination": 2e-6}}}}
    doc = tune.document(measured, 4, [2, 2], "hier", adapt=False)
    assert doc["format"] == "collectives-tuning" and doc["version"] == 1
    assert doc["ranks"] == 4 and doc["ranks_per_host"] == [2, 2]
    assert doc["transport"] == "hier" and doc["adapt"] is False
    assert set(doc["machine"]) == {"cpu", "cores", "hostname"}
    assert doc["rules"] == {"all_reduce": {"plain": [[None, "direct"]]},
                            "barrier": {"plain": [[None, "direct"]]}}
    # JSON keys: sizes as strings, in size order
    assert list(doc["measured"]["all_reduce"]["plain"]) == ["1024", "16384"]
    assert doc["created"].endswith("+00:00")
    json.dumps(doc, allow_nan=False)


def _tuned(cells: dict, created: str) -> dict:
    """A tuning document of all_reduce on plain arrays at N = 2 measuring ``cells``."""
    doc = tune.document({"all_reduce": {"plain": cells}}, 2, [2], "shm", adapt=True)
    doc["created"] = created
    return json.loads(json.dumps(doc))  # as read back from a file: sizes as strings


def test_merge_takes_the_least_worst_regret():
    """Two files of two states: in the first ``direct`` is fastest, ``ring``
    5 % behind; in the second ``direct`` is 1.8 times ``ring``.  Each file
    alone picks its state's fastest; merged, ``ring`` (worst regret 1.05)
    beats ``direct`` (1.8) and ``two_shot`` (1.3).  At 16 KiB, where every
    file agrees, the merged rule is theirs; a size that one file lacks is
    left out."""
    fast = _tuned({K: {"direct": 1.0, "ring": 2.0, "two_shot": 3.0},
                   1 << 20: {"direct": 1.0, "ring": 1.05, "two_shot": 1.3},
                   4 << 20: {"direct": 1.0, "ring": 2.0, "two_shot": 3.0}}, "t1")
    slow = _tuned({K: {"direct": 1.0, "ring": 2.0, "two_shot": 3.0},
                   1 << 20: {"direct": 3.6, "ring": 2.0, "two_shot": 2.0}}, "t2")
    assert fast["rules"]["all_reduce"]["plain"] == [[None, "direct"]]
    assert slow["rules"]["all_reduce"]["plain"][-1] == [None, "ring"]  # the first of equal ones
    doc = tune.merge([fast, slow], ["a.json", "b.json"], adapt=False)
    assert doc["rules"]["all_reduce"]["plain"] == [[tune.boundary(K, 1 << 20), "direct"],
                                                  [None, "ring"]]
    assert set(doc["measured"]["all_reduce"]["plain"]) == {str(K), str(1 << 20)}
    assert doc["measured"]["all_reduce"]["plain"][str(1 << 20)]["direct"] == 2.3  # median
    assert doc["merged"] == [{"file": "a.json", "created": "t1"},
                             {"file": "b.json", "created": "t2"}]
    assert doc["adapt"] is False and tune.validate(doc) is None
    # worst regrets alike to 1 %: the least geometric mean decides
    r = tune.regrets([{"a": 1.0, "b": 1.004}, {"a": 1.004, "b": 1.0}, {"a": 1.0, "b": 1.003}])
    assert r["a"][0] == r["b"][0] and tune.best(r) == "a"


def test_merge_refuses_files_of_other_job_shapes(tmp_path):
    one = _tuned({K: {"direct": 1.0}}, "t1")
    other = dict(one, ranks=4, ranks_per_host=[4])
    with pytest.raises(ValueError, match="'ranks' is 4"):
        tune.merge([one, other], ["a.json", "b.json"], adapt=True)
    files = []
    for i, d in enumerate((one, other)):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(d))
    out = tmp_path / "m.json"
    assert tune.main(["--merge", *map(str, files), "-o", str(out)]) == 1 and not out.exists()
    assert tune.main(["--merge", str(files[0]), str(files[0]), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["rules"] == {"all_reduce": {"plain": [[None, "direct"]]}}


def test_kinds_of_array_by_transport():
    assert tune.kinds_for("shm") == ["plain", "allocated"]
    assert tune.kinds_for("mpi") == ["plain"] and tune.kinds_for("hier") == ["plain"]
    assert tune.kinds_for("cuda") == ["device"]


@pytest.mark.parametrize("argv", [["--sizes", "4K"], ["-o", "f", "--sizes", "x"],
                                  ["-o", "f", "--sizes", "0"], ["-o", "f", "--repeat", "0"],
                                  ["-o", "f", "--budget", "0"]])
def test_bad_arguments_exit_with_status_2(argv):
    with pytest.raises(SystemExit) as e:
        tune.parse_args(argv, rank=1)
    assert e.value.code == 2


# -- one run -----------------------------------------------------------------------------
OFFERED = """
import json, sys
import collectives as cc
from bench.cases import COLLECTIVES
with cc.init() as comm:
    if comm.rank == 0:
        json.dump({c: comm.algorithms(c) for c in COLLECTIVES}, open(sys.argv[1], "w"))
"""


def _mpi(n: int, *argv: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    e.setdefault("COLLECTIVES_TIMEOUT", "30")
    e.update(env)
    cmd = launch.LAUNCH(n, [sys.executable, *argv])
    p = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


@needs_mpiexec
def test_a_short_tuning_run(tmp_path):
    """Every collective in the file, for each kind of array of the shm
    transport (the barrier once), every offered algorithm measured at every
    size, and the rules made of them; a tuning file in the environment is
    not loaded (it does not exist)."""
    out, offered_json = tmp_path / "tuning.json", tmp_path / "offered.json"
    p = _mpi(2, "-m", "bench", "tune", "-o", str(out), "--sizes", "4K,64K", "--repeat", "1",
             "--budget", "0.05", "--no-adapt", "--transport", "shm",
             COLLECTIVES_TUNING=str(tmp_path / "missing.json"))
    _mpi(2, "-c", OFFERED, str(offered_json))
    offered = json.loads(offered_json.read_text())
    doc = json.loads(out.read_text())
    assert doc["format"] == "collectives-tuning" and doc["version"] == 1
    assert doc["ranks"] == 2 and doc["ranks_per_host"] == [2]
    assert doc["transport"] == "shm" and doc["adapt"] is False
    assert doc["machine"]["cores"] == os.cpu_count()
    import collectives
    assert doc["library"] == collectives.__version__
    assert tune.validate(doc) is None
    assert list(doc["rules"]) == list(COLLECTIVES) == list(doc["measured"])
    for call in COLLECTIVES:
        kinds = ["plain"] if call == "barrier" else ["plain", "allocated"]
        assert list(doc["rules"][call]) == kinds == list(doc["measured"][call]), call
        for kind in kinds:
            measured = doc["measured"][call][kind]
            if call == "barrier":
                assert list(measured) == ["0"]
            elif call in ("all_gather", "gather", "scatter"):  # one block of two
                assert list(measured) == ["2048", "32768"], call
            else:
                assert list(measured) == ["4096", "65536"], call
            for times in measured.values():
                assert list(times) == offered[call] and all(t > 0 for t in times.values())
            rules = doc["rules"][call][kind]
            assert rules[-1][0] is None and all(r[0] is not None for r in rules[:-1])
            assert all(alg in offered[call] for _, alg in rules), (call, kind, rules)
            assert rules == tune.rules({int(s): t for s, t in measured.items()})
    progress = [ln for ln in p.stdout.splitlines() if " sizes, " in ln]
    assert len(progress) == 2 * len(COLLECTIVES) - 1, p.stdout
    assert progress[0].startswith("all_reduce plain: 2/2 sizes, "), p.stdout
    assert f"# wrote {out} in " in p.stdout
    # the library takes the file: the benchmark's default rows say so (the
    # file turns adaptation off, so the choice stays the file's)
    bench_json = tmp_path / "bench.json"
    _mpi(2, "-m", "bench", "all_reduce", "-b", "64K", "-e", "64K", "-n", "3", "-w", "1",
         "--repeat", "1", "--json", str(bench_json), COLLECTIVES_TUNING=str(out))
    row, = json.loads(bench_json.read_text())["rows"]
    assert row["auto"] and row["source"] == "tuning", row
    assert row["algorithm"] == doc["rules"]["all_reduce"]["plain"][-1][1], row


def test_the_library_check_runs_before_writing():
    """validate: None for a good document, the library's complaint otherwise."""
    doc = tune.document({"barrier": {"plain": {0: {"direct": 1e-6}}}}, 2, [2], "shm", True)
    assert tune.validate(doc) is None
    doc["rules"]["barrier"]["plain"] = [[None, "no_such_algorithm"]]
    assert "no_such_algorithm" in tune.validate(doc)


@needs_mpiexec
def test_device_arrays_on_the_cuda_stand_in(tmp_path):
    """On the cuda transport (here over tests/standin, a host stand-in for
    CuPy) the one kind measured is "device"; the barrier, which takes no
    array, "plain"."""
    out = tmp_path / "tuning.json"
    standin = os.pathsep.join([str(ROOT / "tests" / "standin"), str(ROOT)])
    _mpi(2, "-m", "bench", "tune", "-o", str(out), "--sizes", "4K", "--repeat", "1",
         "--budget", "0.02", "--transport", "cuda", PYTHONPATH=standin)
    doc = json.loads(out.read_text())
    assert doc["transport"] == "cuda" and doc["adapt"] is True
    assert all(list(kinds) == (["plain"] if call == "barrier" else ["device"])
               for call, kinds in doc["rules"].items()), doc["rules"]
    assert tune.validate(doc) is None
