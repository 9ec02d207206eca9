"""Many hosts: the "hier" transport beside the flat "mpi" transport on the same
layout, with the bytes each call moves within and between hosts.

Where the ranks span several hosts (real ones, or emulated with
$COLLECTIVES_HOST, docs/hosts.md), ``python -m bench`` adds to each
collective's table a comparison (``--hosts only``: the comparison alone).
Per size it times, in ``ROUNDS`` interleaved rounds, three calls of the same
size on the same ranks: the library's call on a "hier" communicator, the same
call on a flat "mpi" communicator, and MPI's own collective (one round times
each once, in that order, so that all three see the same drift of a shared
machine), and prints their medians.  One more call of each transport,
between ``comm.traffic`` snapshots, gives the bytes it moves (checked
against numpy with ``--check``):

* ``inter/rank``: the most inter-host bytes any one rank sends per call;
* ``inter``: inter-host bytes sent per call, all ranks together;
* ``intra``: bytes sent within the hosts per call, all ranks together.

MPI's own call moves bytes the library cannot count (``-``).  ``vs hier`` is
the median over rounds of the row's time over hier's time (> 1: hier is faster).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
from typing import Optional, TextIO

from .cases import CASES, Call, Case
from .runner import Clock, effective_sizes, learn, mpi_supported

ROUNDS = 5  # per size, where the command line gives no --repeat
MIN_ITERS, MAX_ITERS = 3, 1000  # a round's calls, as the main table bounds its loops
TRANSPORTS = ("hier", "mpi")
NATIVE = "MPI"  # the row of MPI's own collective


@dataclasses.dataclass
class HostRow:
    """One transport's call at one size (the ``inter``/``intra`` bytes are
    None for MPI's own collective)."""

    bytes: int
    count: int
    transport: str
    algorithm: str
    iters: int
    time_us: float            # median over the rounds
    times_us: list[float]     # each round's (the slowest rank's mean per call)
    busbw: float
    vs_hier: float            # median over rounds of this row's time / hier's
    inter_max: Optional[int]
    inter_bytes: Optional[int]
    intra_bytes: Optional[int]
    wrong: Optional[int]


@dataclasses.dataclass
class Comparison:
    """Every row of one collective, and the layout they ran on."""

    collective: str
    ranks_per_host: list[int]
    dtype: str
    op: str
    rounds: int
    rows: list[HostRow] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["rows"] = [dataclasses.asdict(r) for r in self.rows]
        return d


class Hosts:
    """The two communicators of the comparison, opened on every rank of ``mpicomm``."""

    def __init__(self, mpicomm, comm=None):
        import collectives as cc
        self.mpicomm, self.clock = mpicomm, Clock(mpicomm)
        self._own = []
        self.comms = {}
        for t in TRANSPORTS:
            if comm is not None and comm.transport == t:
                self.comms[t] = comm
            else:
                self.comms[t] = cc.init(transport=t)
                self._own.append(self.comms[t])
        h = self.comms["hier"]
        sizes = mpicomm.allgather(h.host)
        self.ranks_per_host = [sizes.count(x) for x in range(h.hosts)]

    def close(self) -> None:
        for c in self._own:
            c.close()
        self._own = []

    def run(self, name: str, s, rounds: Optional[int], show: bool) -> Comparison:
        """Measure ``name`` over ``s.sizes`` (bench.runner's Settings) in
        ``rounds`` rounds (None: ROUNDS), each transport with the library's
        default algorithm; with ``show`` (rank 0) rows are printed as each
        size is done."""
        hier = self.comms["hier"]
        rounds = rounds or ROUNDS
        table = Table() if show else None
        res = Comparison(name, self.ranks_per_host, str(s.dtype),
                         s.op if CASES[name].reducing else "none", rounds)
        if table:
            table.header(res)
        for nbytes in effective_sizes(name, s.sizes, hier.size, s.dtype):
            cases = {t: CASES[name](c, self.mpicomm, nbytes, s.dtype, s.op, s.root)
                     for t, c in self.comms.items()}
            calls: dict[str, Call] = {t: cases[t].ours(None) for t in TRANSPORTS}
            native = cases["hier"].baseline()
            if mpi_supported(native, self.mpicomm):
                calls[NATIVE] = native
            for t in TRANSPORTS:  # each default through its first tries, untimed
                learn(cases[t], [calls[t]], self.mpicomm)
            times, iters = self._rounds(calls, s, rounds)
            for key in calls:
                case = cases.get(key, cases["hier"])
                row = self._row(case, key, times, iters[key], s.check)
                res.rows.append(row)
                if table:
                    table.row(row)
            del cases, calls
        if table:
            table.closing(res)
        return res

    def _rounds(self, calls: dict[str, Call], s, rounds: int):
        """Each call warmed up and its iteration count chosen (about
        ``s.budget_s`` of calls over all rounds), then ``rounds`` rounds that
        time every call once, in turn."""
        iters = {}
        for k, fn in calls.items():
            est = self.clock.per_call(fn, 1)
            est = self.clock.per_call(fn, max(1, min(s.warmup, int(0.2 / max(est, 1e-9)))))
            iters[k] = s.iters or max(MIN_ITERS, min(MAX_ITERS,
                                                     int(s.budget_s / rounds / max(est, 1e-9))))
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for k, fn in calls.items():
                times[k].append(self.clock.per_call(fn, iters[k]))
        return times, iters

    def _row(self, case: Case, key: str, times: dict, iters: int, check: bool) -> HostRow:
        """The row of ``key`` (a transport, or NATIVE): its times, and for a
        transport one more call's bytes (and mismatches, with ``check``)."""
        from mpi4py import MPI
        inter_max = inter = intra = wrong = None
        if key != NATIVE:
            comm = self.comms[key]
            if check:
                case.reset(False)
            self.mpicomm.Barrier()
            before = comm.traffic
            case.ours(None)()
            d = comm.traffic - before
            every = self.mpicomm.allgather((d.sent_bytes, d.inter_sent_bytes))
            inter_max = max(i for _, i in every)
            inter = sum(i for _, i in every)
            intra = sum(a - i for a, i in every)
            if check:
                wrong = int(self.mpicomm.allreduce(case.wrong(False), op=MPI.SUM))
        mine = times[key]
        med = statistics.median(mine)
        algbw = case.nbytes / med / 1e9
        algorithm = case.comm.choose_algorithm(case.name, case.choose_nbytes()) \
            if key != NATIVE else "-"
        return HostRow(bytes=case.nbytes, count=case.count, transport=key, algorithm=algorithm,
                       iters=iters, time_us=med * 1e6, times_us=[t * 1e6 for t in mine],
                       busbw=algbw * case.factor(),
                       vs_hier=statistics.median(a / b for a, b in zip(mine, times["hier"])),
                       inter_max=inter_max, inter_bytes=inter, intra_bytes=intra, wrong=wrong)


# (title, width) of each column
_COLUMNS = [("size(B)", 12), ("count", 12), ("transport", 9), ("algorithm", 18),
            ("time(us)", 11), ("busbw(GB/s)", 11), ("vs hier", 7), ("inter/rank(B)", 13),
            ("inter(B)", 12), ("intra(B)", 12), ("#wrong", 6)]


def _cell(x, spec: str, width: int) -> str:
    return ("-" if x is None else format(x, spec)).rjust(width)


class Table:
    """Rank 0's printout of a comparison."""

    def __init__(self, out: TextIO = sys.stdout):
        self.out = out

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def header(self, res: Comparison) -> None:
        layout = " + ".join(str(k) for k in res.ranks_per_host)
        self._print(f"# {res.collective} on {len(res.ranks_per_host)} hosts ({layout} ranks): "
                    f"hier, the flat mpi transport and MPI's own call, {res.rounds} "
                    f"interleaved rounds, medians  dtype {res.dtype}  op {res.op}")
        self._print("# inter/rank: most inter-host bytes one rank sends per call; inter, "
                    "intra: bytes sent between / within hosts per call, all ranks; "
                    "vs hier: time / hier's time")
        self._print("#" + " ".join(t.rjust(w) for t, w in _COLUMNS)[1:])

    def row(self, r: HostRow) -> None:
        cells = [str(r.bytes).rjust(12), str(r.count).rjust(12), r.transport.rjust(9),
                 r.algorithm.rjust(18), _cell(r.time_us, "11.2f", 11),
                 _cell(r.busbw, "11.3f", 11), _cell(r.vs_hier, "7.2f", 7),
                 _cell(r.inter_max, "d", 13), _cell(r.inter_bytes, "d", 12),
                 _cell(r.intra_bytes, "d", 12), _cell(r.wrong, "d", 6)]
        self._print(" ".join(cells))

    def closing(self, res: Comparison) -> None:
        for t in TRANSPORTS[1:] + (NATIVE,):
            ratios = [r.vs_hier for r in res.rows if r.transport == t]
            if ratios:
                self._print(f"# {t} time / hier time: median {statistics.median(ratios):.2f} "
                            f"over {len(ratios)} sizes (min {min(ratios):.2f}, "
                            f"max {max(ratios):.2f})")
        bad = sum(r.wrong or 0 for r in res.rows)
        if bad:
            self._print(f"# WRONG RESULTS: {bad} mismatching elements in total")
        self._print("#")
