"""Real hosts on this machine (tests/cluster.py, cluster/cluster): the
conformance suite over "hier" and flat "mpi" on 2 x 2 and 2 + 1 + 1 hosts,
MPICH moving the bytes between hosts over TCP; the library's inter-host byte
counts against the kernel's counters of each host's link; a rank killed on
another host, a link cut and a link down for less than the timeout.

Run by ``make test-cluster`` (CLUSTER_TESTS=1, as root); skipped otherwise,
and where network namespaces cannot be made, with the reason.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import pytest

import cluster as hosts
from conformance import FAMILIES
from conftest import check_family
from launch import drop_mpi_files, launch_failed, mpi_files, shm_files

if not hosts.ENABLED:
    pytest.skip("make test-cluster runs these (CLUSTER_TESTS=1)", allow_module_level=True)
_why = hosts.unavailable()
if _why:
    pytest.skip(f"no cluster here: {_why}", allow_module_level=True)

# wire bytes over the library's payload, at most: a header on every packet
# of the link (its own counter: data segments, coalesced or not, and
# acknowledgements), of 66 bytes (Ethernet 14, IPv4 20, TCP 20 with 12 of
# timestamps) where nothing was lost, else up to 94 (TCP's 60: SACK blocks
# in the acknowledgements); a full segment's payload (MSS = MTU 1500 - 52:
# 1448) again for every segment retransmitted on any host (a segment lost
# in a receiver's backlog on a loaded machine); and a few KiB of MPI's own
# messages (barriers, acknowledgements) per call (SLACK)
HEADER, HEADER_LOSS, MSS, SLACK = 66, 94, 1448, 16 << 10
TIMEOUT = 3.0  # tests/faults.py's


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """The hosts, up for the module; at its end nothing of theirs is left:
    processes, namespaces, our segments.  The MPI library's own files of
    ranks that left without MPI_Finalize (the fault tests') are removed, as
    test_faults.py's dev_shm does."""
    hosts.up()
    ours, mpich = shm_files(), mpi_files()
    yield
    left = hosts.processes()
    hosts.down()
    drop_mpi_files(mpich)
    assert not left, f"processes left in the hosts: {left}"
    assert not hosts.leftovers(), hosts.leftovers()
    assert not shm_files() - ours, f"left in /dev/shm: {shm_files() - ours}"


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("transport", ["hier", "mpi"])
@pytest.mark.parametrize("layout", list(hosts.LAYOUTS))
def test_conformance(conformance, layout, transport, family):
    spec = hosts.LAYOUTS[layout]
    check_family(conformance(len(hosts.ranks_of(spec)), transport, cluster=spec), family)


@pytest.mark.parametrize("transport", ["hier", "mpi"])
@pytest.mark.parametrize("layout", list(hosts.LAYOUTS))
def test_traffic_against_the_links(layout, transport):
    """Per collective and host: the bytes the library says the host's ranks
    sent to (received from) other hosts are at most the bytes the host's
    link sent (received), and no fewer than those less a header on each of
    the link's packets, the payload of any segment retransmitted and SLACK
    (HEADER ...)."""
    spec = hosts.LAYOUTS[layout]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "traffic.json")
        p = hosts.run(spec, ["tests/cluster_traffic.py", transport, out], timeout=300)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    assert res["transport"] == transport
    bad = []
    for call, per_host in res["results"].items():
        assert len(per_host) == len(set(hosts.ranks_of(spec))), per_host
        lost = sum(c["retrans"] for c in per_host.values())
        header = HEADER_LOSS if lost else HEADER
        for h, c in per_host.items():
            for lib, wire in (("sent", "tx"), ("recv", "rx")):
                packets = c[f"{wire}_packets"]
                if not c[lib] <= c[wire] <= c[lib] + packets * header + lost * MSS + SLACK:
                    bad.append(f"{call} host {h}: library {lib} {c[lib]}, link {wire} {c[wire]} "
                               f"in {packets} packets, {lost} segments retransmitted")
    moved = sum(c["sent"] for per_host in res["results"].values() for c in per_host.values())
    assert moved > 0, res
    assert not bad, "\n".join(bad)


def _reports(d: str, n: int, wait: float, until=lambda s: s not in ("started", "running"),
             skip: int | None = None) -> dict:
    """Each rank's report (tests/faults.py), waiting up to ``wait`` s for every
    one but ``skip`` to satisfy ``until``."""
    end = time.monotonic() + wait
    out: dict = {}
    while time.monotonic() < end:
        for r in range(n):
            try:
                with open(os.path.join(d, f"rank{r}.json")) as f:
                    out[r] = json.load(f)
            except (OSError, ValueError):
                pass
        if len(out) == n and all(until(v["state"]) for r, v in out.items() if r != skip):
            break
        time.sleep(0.1)
    return out


def _start(spec: str, argv: list[str], d: str, n: int, until):
    """Start a job that is left to run (``hosts.start``, no cleanup) and wait
    up to 60 s until each of its n ranks' reports satisfies ``until``; the job
    and the reports.  A launch that ended before any rank started
    (``launch.launch_failed``: Open MPI's launcher, started right after a
    test that cut a link, now and then says that its daemon on another host
    "failed to report back", about one start in ten here; Hydra's proxy on
    another host, once, that it was "unable to connect") is tried once more."""
    p = hosts.start(spec, argv, cleanup=False)
    started = _reports(d, n, wait=60, until=until)
    if not started and p.poll() is not None and launch_failed(hosts.said(p)):
        hosts.stop_jobs()
        p = hosts.start(spec, argv, cleanup=False)
        started = _reports(d, n, wait=60, until=until)
    return p, started


def _gone(pids: list[int], wait: float) -> list[int]:
    """Those of ``pids`` still alive after ``wait`` s."""
    from test_faults import alive
    end = time.monotonic() + wait
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def _settled(wait: float) -> list[str]:
    """The processes still in the hosts ``wait`` s after a job's launcher
    returned: the launcher's processes on another host can end a moment
    after the launcher itself (seen under Open MPI on a loaded machine)."""
    end = time.monotonic() + wait
    while (left := hosts.processes()) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def _survivors(spec: str, argv: list[str], victim: int) -> dict:
    """Run a job whose rank ``victim`` dies (tests/faults.py ``argv``), left to
    end by itself: the survivors' reports, each an error within the timeout
    (+ the time to see it) of PeerFailure or CollectiveTimeout; the job must
    end, leave no process in the hosts and nothing in /dev/shm."""
    n, ours = len(hosts.ranks_of(spec)), shm_files()
    with tempfile.TemporaryDirectory() as d:
        p = hosts.start(spec, argv[:3] + [d] + argv[3:], cleanup=False,
                        FAULT_VICTIM=str(victim))
        try:
            res = _reports(d, n, wait=TIMEOUT + 60, skip=victim)
            try:
                p.wait(timeout=4 * TIMEOUT + 30)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the job did not end: reports {_states(res)}; "
                                     f"{hosts.describe()}; it printed: {hosts.said(p)}")
        finally:
            if p.poll() is None:
                p.kill()
                hosts.stop_jobs()
        # what a rank that did not report an error left: its fatal signal's
        # stack (faulthandler), and what the job printed
        odd = {r: _crash(d, r) for r in range(n)
               if r != victim and res.get(r, {}).get("state") != "error"}
        printed = hosts.said(p)
    try:
        survivors = {r: v for r, v in res.items() if r != victim}
        # messages as text: pytest cuts the repr of any other object short
        assert set(survivors) == set(range(n)) - {victim}, \
            f"reports {_states(res)}\nodd: {odd}\nprinted: {printed}"
        # every survivor's report where one is off: a rank's error can be
        # the word of another that found something else
        off = {r for r, v in survivors.items()
               if v["state"] != "error" or v["error"] not in ("PeerFailure", "CollectiveTimeout")
               or v["seconds"] >= TIMEOUT + 15}
        assert not off, (f"ranks {sorted(off)} are off: {json.dumps(survivors, indent=1)}"
                         f"\nodd: {odd}\nprinted: {printed}")
        assert not _settled(wait=10), str(hosts.describe())
        assert not shm_files() - ours, shm_files() - ours
        return survivors
    finally:  # a failed test leaves no process to the next one
        if hosts.processes():
            hosts.stop_jobs()


def _crash(d: str, rank: int) -> str:
    try:
        with open(os.path.join(d, f"crash{rank}.txt")) as f:
            return f.read()[-3000:]
    except OSError:
        return ""


def _states(res: dict) -> dict:
    """Each rank's report in a line: its state, error and seconds (a hung
    rank's stacks, cut to their last lines, after)."""
    return {r: (v.get("state"), v.get("error"), round(v.get("seconds", -1), 2),
                v.get("stacks", "")[-1500:]) for r, v in sorted(res.items())}


def test_rank_killed_on_another_host():
    """2 x 2 on hier, rank 2 (on h1) SIGKILLs itself inside a stream of
    collectives: every other rank, on both hosts, raises PeerFailure or
    CollectiveTimeout within the timeout (+ the time to see it), at least
    one names rank 2, the job ends by itself and leaves nothing in /dev/shm.
    (On flat mpi, Hydra's proxy on h1 ends rank 3 before it has reported,
    -disable-auto-cleanup or not: docs/hosts.md.)"""
    victim = 2
    survivors = _survivors(hosts.LAYOUTS["2x2"], [
        "tests/faults.py", "kill", "hier",
        "all_reduce,broadcast,all_gather,reduce_scatter,barrier"], victim)
    assert any(victim in v["ranks"] for v in survivors.values()), survivors


@pytest.mark.parametrize("transport", ["hier", "mpi"])
def test_sends_to_a_dead_rank_on_another_host(transport):
    """2 + 1 + 1, rank 2 (alone on h1) SIGKILLs itself after a barrier; a
    second later every other rank sends it four messages of 1 MiB and waits
    for them.  MPICH's ofi netmod refuses such a send for good once
    progress has seen the connection go, and without a bound on its retries
    (transports/_bounded.py) the second MPI_Isend spins forever: each
    survivor must raise PeerFailure or CollectiveTimeout naming rank 2
    within the timeout, and the job end by itself."""
    victim = 2
    survivors = _survivors(hosts.LAYOUTS["2+1+1"], ["tests/faults.py", "dead", transport],
                           victim)
    for r, v in survivors.items():
        assert victim in v["ranks"], (r, v)


def test_link_cut():
    """2 x 2 on hier, host h1's link cut inside a stream of all-reduces: every
    rank raises within the timeout + 15 s of the cut; those on h0 name ranks
    of h1 (2, 3) and never a rank of h0, those on h1 ranks of h0; the ranks
    on h1 end by themselves."""
    spec, n = hosts.LAYOUTS["2x2"], 4
    where = hosts.ranks_of(spec)
    with tempfile.TemporaryDirectory() as d:
        p, started = _start(spec, ["tests/faults.py", "cut", "hier", d], d, n,
                            until=lambda s: s == "running")
        try:
            assert len(started) == n, (started, hosts.said(p))
            hosts.link("h1", "down")
            cut = time.monotonic()
            res = _reports(d, n, wait=TIMEOUT + 30)
            took = time.monotonic() - cut
            left = _gone([v["pid"] for r, v in res.items() if where[r] == "h1"], wait=15)
        finally:
            hosts.link("h1", "up")
            p.kill()
            hosts.stop_jobs()
    assert set(res) == set(range(n)), res
    for r, v in res.items():
        assert v["state"] == "error", (r, v)
        others = [q for q in range(n) if where[q] != where[r]]
        assert v["ranks"] and set(v["ranks"]) <= set(others), (r, v)
        other = "h1" if where[r] == "h0" else "h0"
        assert f"host {other}" in v["message"], (r, v)
    assert took < TIMEOUT + 15, took  # a host's part waits at most min(timeout, 10 s) longer
    assert not left, f"ranks of h1 still running: {left}"


def test_link_down_then_up():
    """2 x 2 on hier, timeout 10 s: h1's link down for 2 s inside a stream of
    all-reduces of 1 MB: TCP resends, every call completes, every result right."""
    spec, n = hosts.LAYOUTS["2x2"], 4
    with tempfile.TemporaryDirectory() as d:
        p, started = _start(spec, ["tests/faults.py", "flap", "hier", d], d, n,
                            until=lambda s: s != "started")
        try:
            assert len(started) == n and \
                all(v["state"] == "running" for v in started.values()), \
                (started, hosts.describe(), hosts.said(p))
            hosts.link("h1", "down")
            time.sleep(2.0)
            hosts.link("h1", "up")
            res = _reports(d, n, wait=120)
        finally:  # (whether Hydra's mpiexec then ends is not this test's question)
            if p.poll() is None:
                p.kill()
                hosts.stop_jobs()
    assert set(res) == set(range(n)), res
    for r, v in res.items():
        assert v["state"] == "no error" and v["wrong"] == 0, (r, v)


@pytest.mark.parametrize("strategy", ["ddp", "zero2"])
def test_trainer_across_hosts(strategy):
    """``python -m trainer`` on 2 x 2 real hosts, hierarchical algorithms: the
    bytes each rank moves to other hosts per step equal the formula
    (trainer/claims.py, inter_traffic), and the hosts' links carry them."""
    from test_trainer_hosts import SMALL
    spec = hosts.LAYOUTS["2x2"]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        p = hosts.run(spec, ["-m", "trainer", "--strategy", strategy, "--algorithm", "auto",
                             "--json", out, *SMALL], timeout=300, COLLECTIVES_ADAPT="0")
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            ih = json.load(f)["inter_host"]
    assert ih["host_of_rank"] == [0, 0, 1, 1]
    assert ih["algorithms"] == "hierarchical"
    pred, got = ih["predicted_bytes_per_rank"], ih["measured_bytes_per_rank"]
    assert None not in pred and sum(pred) > 0
    assert got == pytest.approx(pred, rel=2e-3, abs=64), (got, pred)


def test_down_after_a_killed_job():
    """A job whose launcher is SIGKILLed (a killed test): `cluster down` ends
    its ranks and proxies and removes every namespace, link, /etc/netns
    entry and its state; a second `down` finds nothing and succeeds; `up`
    then works again."""
    import signal
    spec, n = hosts.LAYOUTS["2x2"], 4
    with tempfile.TemporaryDirectory() as d:
        p, started = _start(spec, ["tests/faults.py", "cut", "hier", d], d, n,
                            until=lambda s: s == "running")
        assert len(started) == n, (started, hosts.said(p))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert hosts.processes(), "the ranks should outlive their launcher's kill"
        hosts.down()
        pids = [v["pid"] for v in started.values()]
        assert not _gone(pids, wait=5), "ranks left after down"
    assert not hosts.leftovers(), hosts.leftovers()
    assert hosts.cluster("down").returncode == 0
    assert not hosts.leftovers(), hosts.leftovers()
    hosts.up()  # for the tests after this one
