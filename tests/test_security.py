"""Shared-memory segments are private and exclusive, a corrupt or hostile peer's
slot headers give a clean error, and nothing received is unpickled or run."""
from __future__ import annotations

import ast
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from launch import ROOT, run_mpi
from security_checks import CASES

_jobs: dict = {}


def job(scenario: str, **env: str) -> dict:
    """{rank: what tests/security_checks.py SCENARIO reported}, one job per scenario."""
    if scenario not in _jobs:
        with tempfile.TemporaryDirectory() as d:
            p = run_mpi(2, ["tests/security_checks.py", scenario, d], timeout=120, **env)
            ranks = {}
            for r in range(2):
                path = os.path.join(d, f"rank{r}.json")
                assert os.path.exists(path), (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
                with open(path) as f:
                    ranks[r] = json.load(f)
        _jobs[scenario] = ranks
    return _jobs[scenario]


def test_segment_is_private_exclusive_and_unguessable():
    res = job("segment")
    names = res[0]["names"]
    assert res[1]["names"] == names and len(set(names)) == 2, names
    for r, info in res.items():
        assert len(info["setup"]) == 2, info
        for seen in info["setup"]:  # the file of a communicator being set up (umask 0)
            assert seen["regular"], seen
            assert seen["mode"] == "0o600", seen
            assert seen["uid"] == seen["my_uid"], seen
            assert seen["excl_create"] == "FileExistsError", seen
            assert seen["unlinked_after_setup"], seen
    alone = res[0]["alone"]
    assert alone["count"] == alone["distinct"] == 64, alone
    assert alone["well_formed"], alone  # collectives- and 32 hex digits
    assert alone["varying_bits"] == 128, alone  # every bit of the name varies: random, not a counter
    for kind in ("planted_file", "planted_symlink"):
        planted = alone[kind]
        assert planted["outcome"].startswith("CollectiveError") and "File exists" in planted[
            "outcome"], planted
        assert planted["untouched"], planted
    assert alone["planted_symlink"]["still_a_link"], alone


def test_other_user_cannot_attach():
    """A process of another user (uid 65534, 'nobody': a child that drops
    root's privileges) cannot open the segment, while it opens a control
    file of mode 0666 beside it.  Only root can start a process as another
    user, so this SKIPS when the suite does not run as root (CI runs it as
    root); the segment's mode is checked as any user."""
    if os.getuid() != 0:
        pytest.skip("not root: no process can be started as another user (uid 65534) "
                    "to try the segment; its 0600 mode is checked by "
                    "test_segment_is_private_exclusive_and_unguessable")
    for seen in job("segment")[1]["setup"]:
        assert seen["other_user"] == "denied", seen
        # the control shows that uid 65534 could open the segment if its mode allowed it
        assert seen["other_user_control"] == "opened read-write", seen


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_slot_header(case):
    res = job("corrupt", COLLECTIVES_SHM_SLOT_BYTES="4096")[1][case]
    assert res["outcome"] == "CollectiveError", res  # not a timeout, not another exception
    assert res["ranks"] == [0] and "rank 0" in res["message"], res
    assert res["seconds"] < 2, res
    assert res["guards_intact"], res


# -- nothing received is unpickled or evaluated -----------------------------------------

# mpi4py's lowercase methods pickle their objects; the uppercase ones move buffers
PICKLING = {"send", "recv", "isend", "irecv", "bsend", "ssend", "ibsend", "issend", "sendrecv",
            "mrecv", "bcast", "gather", "scatter", "allgather", "alltoall", "reduce",
            "allreduce", "scan", "exscan", "ibcast", "igather", "iscatter", "iallgather",
            "ialltoall", "ireduce", "iallreduce"}
MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
BUILTINS = {"eval", "exec", "compile", "__import__"}
MPI_LIKE = re.compile(r"comm|mpi|world", re.I)
# Start-up exchanges (host names, pids, settings, the segment's name, yes/no
# answers) go through transports/_wire.py as JSON in buffer calls, so nothing
# may be allowed here.
ALLOWED: set = set()
# the object calls (broadcast_object ...) pickle by definition: this module
# alone, which the array calls never use (docs/reliability.md, "Security")
OBJECTS = "collectives/objects.py"


def _receiver(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def unsafe_uses(path: Path) -> set[tuple[str, str, str]]:
    """(file, enclosing function, what) for every import of a pickling module,
    eval/exec-like builtin, allow_pickle=True, or pickling mpi4py method."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = set()

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Import):
            found.update((rel, func, a.name) for a in node.names
                         if a.name.split(".")[0] in MODULES)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in MODULES:
            found.add((rel, func, node.module))
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in BUILTINS:
                found.add((rel, func, f.id))
            if isinstance(f, ast.Attribute) and f.attr in PICKLING and MPI_LIKE.search(
                    _receiver(f.value)):
                found.add((rel, func, f.attr))
            for k in node.keywords:
                if k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant)
                                                    and k.value.value is False):
                    found.add((rel, func, "allow_pickle"))
        elif isinstance(node, ast.Name) and node.id in MODULES:
            found.add((rel, func, node.id))
        for child in ast.iter_child_nodes(node):
            visit(child, func)
    visit(ast.parse(path.read_text(), str(path)), "<module>")
    return found


def test_nothing_received_is_unpickled_or_evaluated():
    files = sorted(p for d in ("collectives", "transports") for p in (ROOT / d).rglob("*.py")
                   if p != ROOT / OBJECTS)
    assert len(files) > 10
    found = set().union(*(unsafe_uses(p) for p in files))
    assert found - ALLOWED == set(), "pickling or evaluation outside start-up: " + ", ".join(
        ":".join(x) for x in sorted(found - ALLOWED))


def test_the_source_scan_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import pickle\nfrom mpi4py import MPI\n\ndef f(mpicomm, ep, s):\n"
                   "    ep.send(s, 1)\n    x = mpicomm.bcast(s)\n    eval(s)\n"
                   "    return MPI.COMM_WORLD.recv(), pickle.loads(x)\n")
    got = {what for _, _, what in unsafe_uses(bad)}
    assert got == {"pickle", "bcast", "eval", "recv"}, got
