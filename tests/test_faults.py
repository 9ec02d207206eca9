"""A rank that never arrives, and a rank killed mid-stream: every survivor ends
with an error within the timeout (a dead peer on this host named as such),
no process is left, /dev/shm stays clean; a transfer that keeps moving does
not time out."""
import json
import os
import sys
import tempfile
import time

import pytest

from launch import (SURVIVE, drop_mpi_files, launch_failed, mapped, mpi_files, run_mpi,
                    shm_files, start_mpi)

TIMEOUT = 3.0  # faults.TIMEOUT
SLOW_TIMEOUT = 1.0  # faults.SLOW_TIMEOUT


@pytest.fixture(autouse=True)
def dev_shm():
    """Asserts that our segments do not outlive a job, and removes the files
    that the MPI library itself leaves behind when its processes end
    without MPI_Finalize (they are MPICH's or Open MPI's, see README)."""
    ours, mpich = shm_files(), mpi_files()
    yield
    left = shm_files() - ours
    drop_mpi_files(mpich)
    assert not left, f"left in /dev/shm: {left}"


def results(d: str, n: int, wait: float, victim: int, failed=lambda: False) -> dict:
    """Each rank's report, waiting up to ``wait`` s for survivors to write
    theirs (not past ``failed()``, where none has: the launcher started none;
    a launcher may end before its ranks have reported)."""
    end = time.monotonic() + wait
    out = {}
    while time.monotonic() < end:
        if not out and failed():
            break
        for r in range(n):
            p = os.path.join(d, f"rank{r}.json")
            if os.path.exists(p):
                with open(p) as f:
                    out[r] = json.load(f)
        if len(out) == n and all(v["state"] != "started" or not alive(v["pid"])
                                 for r, v in out.items() if r != victim):
            break
        time.sleep(0.1)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int, wait: float = 10.0) -> bool:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def fault_job(n: int, scenario: str, transport: str, extra: list, victim: int = 1) -> dict:
    """``_fault_job`` once more where a survivor died without a report (of a
    signal: faults.py's faulthandler output is attached and printed), which a
    rare, unexplained crash of a survivor on shm does (docs/testing.md), or
    where the launcher started no rank (``launch.launch_failed``); a second
    such run fails the test with that output."""
    res = _fault_job(n, scenario, transport, extra, victim)
    if any("crash" in v for r, v in res.items() if r != victim) or \
            res.get("launcher", {}).get("failed"):
        print(f"a survivor died without a report, or no rank started; run again: {res}",
              file=sys.stderr)
        res = _fault_job(n, scenario, transport, extra, victim)
    return res


def _said(log: str) -> str:
    with open(log, errors="replace") as f:
        return f.read()


def _fault_job(n: int, scenario: str, transport: str, extra: list, victim: int = 1) -> dict:
    """Run a fault scenario under SURVIVE (survivors run on); return the reports once every
    survivor has written its own (the launcher lingers for seconds after a
    rank dies, so it is stopped then; the ranks' exit is checked by pid)."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "launcher.log")
        p = start_mpi(n, ["tests/faults.py", scenario, transport, d, *extra], launcher=SURVIVE,
                      log=log)
        try:
            res = results(d, n, wait=TIMEOUT + 20, victim=victim,
                          failed=lambda: p.poll() is not None and launch_failed(_said(log)))
            for info in res.values():  # survivors linger on the reports in d
                gone(info["pid"])
            for r, info in res.items():  # a survivor that died of a signal
                if r != victim and info["state"] == "started" and not alive(info["pid"]):
                    info["crash"] = "".join(
                        open(os.path.join(d, f)).read()[-3000:] for f in os.listdir(d)
                        if f.startswith("crash")) or "(no faulthandler output)"
            if not res:  # no rank reported: what the launcher said
                said = _said(log)
                res["launcher"] = {"said": said[-3000:], "failed": launch_failed(said),
                                   "returncode": p.poll()}
        finally:
            p.kill()
            p.wait()
    return res


@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("n", [3, 5])
def test_late_rank_times_out(transport, n):
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        p = run_mpi(n, ["tests/faults.py", "late", transport, d], timeout=60)
        res = results(d, n, wait=5, victim=n - 1)
        assert time.monotonic() - t0 < TIMEOUT + 30
    assert set(res) == set(range(n)), (p.returncode, p.stderr[-3000:])
    for r in range(n - 1):
        info = res[r]
        assert info["state"] == "error", info
        assert info["error"] == "CollectiveTimeout" and info["timeout_error"], info
        assert info["call"] == "all_reduce" and "all_reduce" in info["message"], info
        # after the timeout, not long after (a deadline of twice the timeout fails)
        assert TIMEOUT <= info["seconds"] < TIMEOUT + 1.5, info
        assert info["ranks"], info
    if transport == "shm":  # the arrival board names exactly the late rank
        assert all(res[r]["ranks"] == [n - 1] for r in range(n - 1)), res


@pytest.mark.parametrize("calls", ["all_reduce", "p2p",
                                   "broadcast,reduce,all_gather,reduce_scatter,all_to_all,barrier"])
@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("n", [2, 5])
def test_killed_rank(transport, n, calls):
    _survivors_fail(fault_job(n, "kill", transport, [calls]), n, transport, calls)


def test_killed_rank_relayed():
    """On mpi at N = 5, rank 1 SIGKILLed inside a stream of ring all-reduces:
    ranks 3 and 4 never wait on rank 1 (their neighbours in the ring are
    alive), so they learn of its death only from a survivor's notice, and
    raise PeerFailure naming it as every survivor does."""
    calls = "all_reduce:ring"
    _survivors_fail(fault_job(5, "kill", "mpi", [calls]), 5, "mpi", calls)


FAMILIES = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
            "gather", "scatter", "barrier", "p2p", "gather_v", "all_to_all_v", "all_gather_v"]


@pytest.mark.parametrize("n", [2, 4])
def test_killed_rank_in_a_one_copy_read(n):
    """Rank 1 is SIGKILLed inside a stream of one-copy calls on 8 MB arrays,
    which spend most of their time reading peers' memory or writing into it
    (process_vm_readv, process_vm_writev: broadcast's root and gather's
    non-roots write): the survivors raise PeerFailure naming it, as in any
    other call; and in gather_v without counts, whose senders of large
    blocks write them into root's out once root has told them where."""
    calls = ("all_gather:one_copy,all_to_all:one_copy,broadcast:one_copy,all_reduce:one_copy,"
             "gather:one_copy,scatter:one_copy,gather_v")
    _survivors_fail(fault_job(n, "kill", "shm", [calls]), n, "shm", calls)


def _survivors_fail(res: dict, n: int, transport: str, calls: str, victim: int = 1,
                    told: bool = False) -> None:
    """Every survivor raised PeerFailure or CollectiveTimeout in time, and
    every process is gone.  The victim ran on this host, so its death is
    seen (docs/api.md: PeerFailure within about 50 ms): a survivor that
    waits on it raises PeerFailure naming it, and there is always one.  In
    collectives every survivor does: on shm the collective endpoint watches
    every peer; on MPI, which watches the peers of its pending requests, the
    survivor that finds the death tells the others (a notice they raise as
    PeerFailure naming the dead rank).  In send/recv, on emulated hosts
    (hier), and where the victim raised, a survivor waiting on another
    survivor that has given up may time out instead.  ``told``: the
    victim raised inside the call before it left, and tells the others, who
    may raise its CollectiveError (naming it) instead of PeerFailure."""
    assert set(res) == set(range(n)), f"ranks without a report: {set(range(n)) - set(res)}"
    naming = ("PeerFailure", "CollectiveError") if told else ("PeerFailure",)
    allowed = ("PeerFailure", "CollectiveTimeout") + (("CollectiveError",) if told else ())
    survivors = {r: info for r, info in res.items() if r != victim}
    for r, info in survivors.items():
        assert info["state"] == "error", (r, info)
        assert info["error"] in allowed, (r, info)
        assert info["seconds"] < TIMEOUT + 15, (r, info)
    named = {r for r, info in survivors.items() if info["error"] in naming
             and info["ranks"] == [victim]
             and (f"[{victim}]" in info["message"] or f"rank {victim} " in info["message"])}
    assert named, f"no survivor raised PeerFailure naming rank {victim}: {survivors}"
    if calls != "p2p" and (transport == "shm" or transport == "mpi" and not told):
        assert named == set(survivors), \
            f"survivors without PeerFailure naming rank {victim}: {survivors}"
    for info in res.values():
        assert gone(info["pid"]), f"process {info['pid']} is still running"


@pytest.mark.parametrize("transport", ["shm", "mpi"])
@pytest.mark.parametrize("mode", ["kill", "raise"])
@pytest.mark.parametrize("i,family", list(enumerate(FAMILIES)))
def test_fault_inside_each_collective(i, family, mode, transport):
    """Rank 1 is SIGKILLed at a random moment, or its transport raises at a
    random message, inside a stream of one collective; N runs over 2..8."""
    n = 2 + (i + (mode == "raise") * 3 + (transport == "mpi") * 5) % 7
    res = fault_job(n, mode, transport, [family])
    if mode == "raise":
        assert res.get(1, {}).get("state") == "raised", res.get(1)
    _survivors_fail(res, n, transport, family, told=mode == "raise")


@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_killed_rank_before_split(transport):
    """Rank 1 is SIGKILLed as the others call split: they raise PeerFailure
    (split starts with a barrier of ours; MPI_Comm_split alone would wait
    for the dead rank forever)."""
    _survivors_fail(fault_job(3, "split", transport, []), 3, transport, "split")


@pytest.mark.parametrize("strategy,transport", [("ddp", "shm"), ("zero3", "mpi")])
def test_fault_inside_a_trainer_step(strategy, transport):
    _survivors_fail(fault_job(3, "trainer", transport, [strategy]), 3, transport, strategy)


@pytest.fixture(scope="module", params=["shm", "mpi"])
def interrupted(request):
    """Rank 1 interrupted (KeyboardInterrupt) inside a broadcast from it, its
    buffer's memory gone before rank 0 reads it (faults.py): rank 0's report."""
    res = fault_job(2, "interrupt", request.param, [])
    assert res.get(1, {}).get("state") == "interrupted", res.get(1)
    info = res.get(0, {})
    assert info.get("state") == "error", info
    return info


def test_interrupted_rank_is_named(interrupted):
    """Rank 0 raises the library's error naming rank 1 and its
    KeyboardInterrupt, not MPI's error stack (on mpi, rank 0's read of the
    gone memory fails before it looks for rank 1's notice)."""
    info = interrupted
    assert info["error"] in ("CollectiveError", "PeerFailure") and info["ranks"] == [1], info
    msg = info["message"]
    assert msg.startswith("broadcast: rank 1 detected an error in broadcast #"), info
    assert "KeyboardInterrupt" in msg and "MPI" not in msg, info


def test_interrupted_rank_error_text(interrupted):
    """The notice says "KeyboardInterrupt", with no empty ": " after it, and
    rank 0's next call, refused, names itself first and then the call that
    broke the communicator."""
    info = interrupted
    msg = info["message"]
    assert msg.endswith("KeyboardInterrupt"), info
    assert info["next_message"] == "barrier: the communicator is unusable after an earlier " \
        "error in " + msg, info


def test_uncaught_exception_aborts_the_job():
    """Without the excepthook the other ranks would wait in their barrier
    for the 60 s timeout; with it mpiexec ends the job at once, and the
    MPI library's files in /dev/shm go with it (MPI_Abort skips the
    unlinking that MPI_Finalize does: runtime.drop_mpi_files)."""
    before = mpi_files()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        p = run_mpi(3, ["tests/faults.py", "uncaught", "shm", d], timeout=60)
        took = time.monotonic() - t0
        states = [json.load(open(os.path.join(d, f)))["state"] for f in os.listdir(d)
                  if f.startswith("rank") and f.endswith(".json")]
    end = time.monotonic() + 5  # the job's processes may still be going (they map the files)
    while (mpi_files() - before) & mapped() and time.monotonic() < end:
        time.sleep(0.05)
    left = mpi_files() - before
    assert p.returncode != 0
    assert took < 20, took
    assert "no error" not in states, states  # the others were ended inside their barrier
    # (what rank 1 printed may be cut short: hydra tears the job down at once)
    assert not left, f"the aborted job left {sorted(left)} in /dev/shm"


def test_drop_mpi_files_takes_the_jobs_own(tmp_path, monkeypatch):
    """Before MPI_Abort: the MPICH file this process maps, and every rank's
    Open MPI file of its job, never another job's or anything else."""
    from collectives import runtime
    names = ["mpich_shm_1a2b_0", "mpich_shm_ffff_0", "sm_segment.h.0.77.0",
             "sm_segment.h.0.77.1", "sm_segment.h.0.78.0", "collectives-x", "other"]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    maps = tmp_path / "maps"
    maps.write_text("".join(f"7f00-7f01 rw-s 0 00:1a 5 {tmp_path}/{n}\n"
                            for n in ("mpich_shm_1a2b_0", "sm_segment.h.0.77.1",
                                      "collectives-x")) + "7f02-7f03 r-xp 0 0 0 /usr/lib/x.so\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k:
                        real_open(maps if f == "/proc/self/maps" else f, *a, **k))
    gone = runtime.drop_mpi_files(str(tmp_path))
    assert gone == ["mpich_shm_1a2b_0", "sm_segment.h.0.77.0", "sm_segment.h.0.77.1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["collectives-x", "maps", "mpich_shm_ffff_0", "other", "sm_segment.h.0.78.0"]


def test_drop_session_dirs_takes_ended_launchers_only(tmp_path, monkeypatch):
    """The session fixture's cleanup of Open MPI's session directories: those
    that appeared during the session and whose launcher or daemon has ended,
    never a live one's, one from before, or anything else."""
    import subprocess
    from launch import _running, drop_session_dirs, session_dirs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = next(p for p in range(4194303, 1, -1) if not os.path.exists(f"/proc/{p}"))
    zombie = subprocess.Popen(["true"])  # ended, not waited for yet
    for _ in range(100):
        if not _running(zombie.pid):
            break
        time.sleep(0.01)
    (tmp_path / f"prted.{dead}").mkdir()  # from before the session
    before = session_dirs()
    for d in (f"ompi.{dead}", f"ompi.{zombie.pid}", f"prted.{os.getpid()}", "ompi.vm.0",
              f"other.{dead}"):
        (tmp_path / d / "0").mkdir(parents=True)
    drop_session_dirs(before)
    zombie.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        sorted(["ompi.vm.0", f"other.{dead}", f"prted.{dead}", f"prted.{os.getpid()}"])


def test_a_transfer_that_keeps_moving_does_not_time_out():
    """The timeout counts time without progress, not the length of a call: a
    message through one 4 KiB slot that its sender, then its receiver,
    trickles out a slot at a time for over twice the timeout (1 s) arrives,
    and the peer's blocking call, which sees progress every few ms, does
    not time out."""
    with tempfile.TemporaryDirectory() as d:
        p = run_mpi(2, ["tests/faults.py", "slow", "shm", d], timeout=60,
                    COLLECTIVES_SHM_SLOT_BYTES="4096", COLLECTIVES_SHM_SLOTS="1")
        res = results(d, 2, wait=5, victim=-1)
    assert set(res) == {0, 1}, (p.returncode, p.stderr[-3000:])
    for r, info in res.items():
        assert info["state"] == "no error", (r, info)
        assert len(info["took"]) == 2, (r, info)
        for phase, took in info["took"].items():
            assert not isinstance(took, str), (r, phase, took)  # "wrong data", "stuck"
            assert took > 2 * SLOW_TIMEOUT, (r, phase, took)  # longer than the timeout


@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_stall_is_reported_once(transport):
    n = 3
    with tempfile.TemporaryDirectory() as d:
        p = run_mpi(n, ["tests/faults.py", "stall", transport, d], timeout=60,
                    COLLECTIVES_STALL_WARN="1")
        res = results(d, n, wait=10, victim=-1)
    assert all(res[r]["state"] == "no error" for r in range(n)), res
    lines = [ln for ln in p.stderr.splitlines() if "has waited" in ln]
    assert lines, p.stderr[-2000:]
    for ln in lines:
        assert "in all_reduce for rank(s) [2]" in ln, ln
    # once per waiting rank and wait, not once per check
    assert len(lines) <= 2 * (n - 1), lines
