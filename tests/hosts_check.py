"""Hosts, the "hier" transport's traffic and its refusals, under an emulated layout.

    mpiexec -n 2 -env COLLECTIVES_HOST a python tests/hosts_check.py OUT.json : \\
            -n 2 -env COLLECTIVES_HOST b python tests/hosts_check.py OUT.json

Run by test_hosts.py (tests/emulate.py builds the launch).  Checks
``hosts``/``host``/``local_rank``/``local_size`` against every rank's
$COLLECTIVES_HOST, what ``"auto"``, ``"shm"`` and ``"cuda"`` do across hosts,
every hierarchical algorithm's inter-host bytes against
tests/expected_hosts.py (docs/algorithms.md), the inter-host counters of
point-to-point messages, sub-communicators' hosts, a failure's notice
reaching every host, and bad input.  Rank 0
writes ``{"checked": k, "failures": [...]}``.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collectives as cc  # noqa: E402
from bad_input import check_all  # noqa: E402
from emulate import host_of as number  # noqa: E402
from expected_hosts import expected_inter  # noqa: E402
from traffic import COUNT, run_call  # noqa: E402

FLAT = {"ring", "recursive_doubling", "halving_doubling", "direct", "two_shot", "binomial",
        "scatter_allgather", "chain", "reduce_scatter_gather", "bruck", "recursive_halving",
        "pairwise", "linear", "dissemination"}


class Checks:
    def __init__(self):
        self.checked, self.failures = 0, []

    def expect(self, ok: bool, what: str) -> None:
        self.checked += 1
        if not ok:
            self.failures.append(what)


def layout_of(comm, world_hosts: list[str], ranks: list[int]) -> list[int]:
    """Host indices of the ranks ``ranks`` (world ranks, in comm's order)."""
    return number([world_hosts[g] for g in ranks])


def check_facts(c: Checks, comm, host_of: list[int], where: str) -> None:
    r = comm.rank
    mine = [p for p in range(len(host_of)) if host_of[p] == host_of[r]]
    got = (comm.hosts, comm.host, comm.local_rank, comm.local_size)
    want = (max(host_of) + 1, host_of[r], mine.index(r), len(mine))
    c.expect(got == want, f"{where} rank {r}: (hosts, host, local_rank, local_size) "
                          f"{got}, expected {want}")


def check_traffic(c: Checks, comm, host_of: list[int]) -> None:
    """Every hierarchical algorithm (and the default) moves exactly the
    documented inter-host bytes; inter-host bytes are part of all bytes."""
    n, r = comm.size, comm.rank
    for name in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                 "all_to_all", "barrier"):
        algs = [a for a in comm.algorithms(name) if a not in FLAT]
        c.expect(bool(algs), f"no hierarchical {name} offered")
        for alg in algs + [None]:
            for root in (range(n) if name in ("broadcast", "reduce") else [0]):
                before = comm.traffic
                comm._choose.history = []  # what the default runs (it may try others)
                S = run_call(comm, name, alg, root)
                d = comm.traffic - before
                used = alg or comm._choose.history[-1][1]
                if used in FLAT:  # a default that adapted: checked by test_traffic.py
                    c.expect(d.sent_bytes >= d.inter_sent_bytes, f"{name} {used}: {d}")
                    continue
                want = expected_inter(name, used, host_of, r, S, root)
                got = (d.inter_sent_bytes, d.inter_recv_bytes)
                c.expect(got == tuple(want) and d.sent_bytes >= got[0] and
                         d.recv_bytes >= got[1],
                         f"{name} alg={used} root={root} rank {r}: inter-host (sent, recv) "
                         f"{got}, expected {tuple(float(w) for w in want)}; all {d}")


def check_p2p(c: Checks, comm, host_of: list[int], where: str) -> None:
    """A message to a rank of another host counts as inter-host, one to this host's not."""
    n, r = comm.size, comm.rank
    x = np.ones(100, np.int32)
    for p in range(n):
        if p == r:
            continue
        before = comm.traffic
        hs = [comm.isend(x, p, tag=5), comm.irecv(np.empty_like(x), p, tag=5)]
        for h in hs:
            h.wait()
        d = comm.traffic - before
        k = x.nbytes if host_of[p] != host_of[r] else 0
        c.expect((d.sent_bytes, d.recv_bytes, d.inter_sent_bytes, d.inter_recv_bytes) ==
                 (x.nbytes, x.nbytes, k, k), f"{where} p2p rank {r} <-> {p}: {d}")


def check_refusals(c: Checks, hosts: int) -> None:
    """Across hosts "shm" and "cuda" are refused, before CuPy is looked for;
    on one host "shm" works."""
    for kind in ("shm", "cuda") if hosts > 1 else ("shm",):
        try:
            comm = cc.init(transport=kind)
        except ValueError as e:
            c.expect(hosts > 1 and "hosts" in str(e) and kind in str(e),
                     f"transport={kind!r} refused with {e!r}")
        else:
            c.expect(hosts == 1, f"transport={kind!r} accepted on {hosts} hosts")
            comm.close()


def check_notice(c: Checks, host_of: list[int]) -> None:
    """An error on the last host's leader in the middle of the leaders'
    all-reduce reaches every rank of every host well before the timeout,
    whatever part it waits in (its own host's segment, the leaders' MPI
    communicator, another host's segment)."""
    with cc.init(transport="hier", timeout=30) as comm:
        victim = host_of.index(max(host_of))
        if comm.rank == victim:
            def boom(*a, **k):
                raise RuntimeError("injected fault")
            ep = comm._t.coll.cross
            ep.isend = ep.irecv = ep.irecv_reduce = ep.sendrecv = ep.sendrecv_reduce = boom
            ep.steps = boom
        t0 = time.monotonic()
        try:
            comm.all_reduce(np.ones(COUNT), algorithm="hier_leader")
            got = "returned"
        except cc.CollectiveError as e:
            got = "CollectiveError" if "injected fault" in str(e) else f"other: {e}"
        except RuntimeError as e:
            got = "RuntimeError" if "injected fault" in str(e) else f"other: {e}"
        took = time.monotonic() - t0
        want = "RuntimeError" if comm.rank == victim else "CollectiveError"
        c.expect(got == want and took < 5, f"failure notice: rank {comm.rank} got {got} "
                                           f"after {took:.1f} s, expected {want}")


def main(out: str) -> None:
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    hosts_env = world.allgather(os.environ.get("COLLECTIVES_HOST") or "")
    host_of = number(hosts_env)
    hosts = max(host_of) + 1
    c = Checks()
    check_refusals(c, hosts)
    with cc.init() as comm:
        c.expect(comm.transport == ("hier" if hosts > 1 else "shm"),
                 f"auto on {hosts} hosts gave {comm.transport!r}")
        check_facts(c, comm, host_of, "auto")
        t = comm.traffic
        if hosts == 1:
            comm.all_reduce(np.ones(COUNT))
            d = comm.traffic - t
            c.expect(d.inter_sent_bytes == d.inter_recv_bytes == 0 < d.sent_bytes,
                     f"one host: inter-host bytes {d}")
    for kind in ("hier", "mpi"):
        with cc.init(transport=kind) as comm:
            check_facts(c, comm, host_of, kind)
            check_p2p(c, comm, host_of, kind)
            hier_algs = [a for a in comm.algorithms("all_reduce") if a.startswith("hier")]
            if kind == "mpi":
                c.expect(not hier_algs, f"mpi offers {hier_algs}")
                try:
                    comm.all_reduce(np.ones(3), algorithm="hier_leader")
                    c.expect(False, "hier_leader accepted on mpi")
                except ValueError as e:
                    c.expect("hier" in str(e), f"hier_leader on mpi: {e}")
                continue
            equal = len({host_of.count(h) for h in range(hosts)}) == 1
            c.expect(("hier_slices" in hier_algs) == equal == ("hier_mirror" in hier_algs)
                     == ("hier_pipelined" in hier_algs) and "hier_leader" in hier_algs,
                     f"hier all_reduce algorithms {hier_algs} on {hosts_env}")
            check_traffic(c, comm, host_of)
            for color, key in ((comm.rank % 2, -comm.rank), (comm.host, comm.rank)):
                sub = comm.split(color, key)
                members = world.allgather((color, key, comm.rank))
                mine = sorted((k, g) for col, k, g in members if col == color)
                ranks = [g for _, g in mine]
                try:
                    c.expect(sub.transport == "hier", f"split of hier gave {sub.transport}")
                    check_facts(c, sub, layout_of(sub, hosts_env, ranks), f"split({color})")
                    got = sub.all_reduce(np.full(COUNT, comm.rank, np.int64))
                    c.expect(bool((got == sum(ranks)).all()), f"split({color}) all_reduce")
                    for alg in sub.algorithms("all_gather"):
                        g = sub.all_gather(np.array([comm.rank]), algorithm=alg)
                        c.expect(g.ravel().tolist() == ranks, f"split all_gather {alg}: {g}")
                finally:
                    sub.close()
    if hosts > 1:
        check_notice(c, host_of)
    fails = check_all(cc.init(transport="hier"))
    c.failures += [f"bad input on hier: {f}" for f in fails]
    c.checked += 1
    rows = world.gather((c.checked, c.failures))
    if world.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"checked": sum(k for k, _ in rows),
                       "failures": [x for _, fs in rows for x in fs]}, f)


if __name__ == "__main__":
    main(sys.argv[1])
