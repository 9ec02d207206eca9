"""Output on rank 0: the nccl-tests style table, the JSON file and the plot."""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Optional, TextIO

from .runner import Row


@dataclasses.dataclass
class Result:
    """Everything measured for one collective."""

    collective: str
    n: int
    transport: str
    dtype: str
    op: str
    root: int
    memcpy_gbps: float
    repeat: int = 1                # rounds per size
    rows: list[Row] = dataclasses.field(default_factory=list)
    baseline: str = "MPI"  # whose collective the mpi_* columns measure: MPI or NCCL
    alloc: str = "numpy"   # our buffers: plain arrays or communicator-allocated ("comm")
    mpi_library: str = ""  # the MPI under mpi4py (mpi_library_name)

    def as_json(self) -> dict:
        d = {k: getattr(self, k) for k in
             ("collective", "n", "transport", "dtype", "op", "root", "memcpy_gbps",
              "repeat", "baseline", "alloc", "mpi_library")}
        d["rows"] = [r.as_json() for r in self.rows]
        return d


# (title, unit, width) of each column, in order; the group of the timing
# columns (out-of-place, in-place) is a header line above them, as in nccl-tests
_TIMING = [("time", "(us)", 11), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8),
           ("#wrong", "", 7)]
_COLUMNS = ([("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 10),
             ("redop", "", 6), ("root", "", 5), ("algorithm", "", 0)]
            + _TIMING + _TIMING
            + [("mpi_time", "(us)", 11), ("mpi_busbw", "(GB/s)", 10), ("ratio", "", 7),
               ("%cpy", "", 6)])
_GROUPS = {6: "out-of-place", 10: "in-place"}  # first column index -> title
NA = "n/a"  # in-place cells of a call without an in-place form
OVER_BEST_WIDTH = 7  # the last column's, with several algorithms (--algorithm all)
SOURCES = ("table", "tuning", "adapted")  # where the default's choice comes from


def over_best_title(out: TextIO) -> str:
    """The ÷best column's title, spelt with a slash where ``out`` cannot encode ÷."""
    try:
        "\u00f7".encode(getattr(out, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return "/best"
    return "\u00f7best"


def algorithm_label(r: Row) -> str:
    """The algorithm cell: ``auto:X(source)`` for the default's rows (``auto:X``
    where the library does not say where its choice came from)."""
    if not r.auto:
        return r.algorithm
    return f"auto:{r.algorithm}" + (f"({r.source})" if r.source else "")


def _fmt(x: Optional[float], spec: str, missing: str = "-") -> str:
    return missing if x is None else format(x, spec)


def _timing(time_us, algbw, busbw, wrong) -> list[str]:
    return [_fmt(time_us, "11.2f"), _fmt(algbw, "8.3f"), _fmt(busbw, "8.3f"),
            _fmt(wrong, "7d", "N/A").rjust(7)]


class Table:
    """Prints the header, one line per row as it comes, and the closing lines."""

    def __init__(self, out: TextIO = sys.stdout):
        self.out = out
        self.alg_width = 12
        self.over_best = False  # the collective's table has the ÷best column

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def preamble(self, memcpy_gbps: float, iters: str, warmup: str, check: bool,
                 repeat: int, alloc: str = "numpy", over_best: bool = False,
                 mpi_library: str = "") -> None:
        """The lines that hold for every collective of the run; ``over_best``:
        the tables have the ÷best column (--algorithm all); ``mpi_library``:
        the MPI whose calls are the baseline (mpi_library_name)."""
        if mpi_library:
            self._print(f"# MPI library (the baseline's, and the mpi transport's): {mpi_library}")
        self._print(f"# memcpy bandwidth (1 core, np.copyto of 64 MiB): {memcpy_gbps:.2f} GB/s")
        self._print(f"# iters: {iters}  warmup: {warmup}  check: {'yes' if check else 'no'}"
                    "  (algorithm auto:X(source) = the library's default choice, X, taken "
                    "from its table, a tuning file or run-time adaptation)")
        self._print(f"# rounds: {repeat} a size, each timing ours out of place, the baseline "
                    "and a copy of the message in turn, then as many of ours in place; "
                    "times are medians")
        self._print("# ratio: median over rounds of baseline time / our time out of place "
                    "(> 1: ours faster);  %cpy: median over rounds of busbw / the bandwidth "
                    "of np.copyto of the message's bytes, every rank at once")
        if over_best:
            self._print(f"# {over_best_title(self.out)}: median over rounds of the row's time "
                        "out of place / the fastest named algorithm's in the same round "
                        "(1.00: the fastest; the default's row: what its choice costs)")
        if alloc == "comm":
            self._print("# our buffers: communicator-allocated (comm.empty); the baseline's: "
                        "plain numpy arrays")
        self._print("#")

    def header(self, res: Result, requested_transport: str,
               algorithm_names: list[str], over_best: bool = False) -> None:
        """The collective's title line and the column heads; ``algorithm_names``
        the labels that the algorithm column is to hold, ``over_best``: add the
        ÷best column."""
        self.alg_width = max([12] + [len(a) + 3 for a in algorithm_names])
        self.over_best = over_best
        columns = _COLUMNS + ([(over_best_title(self.out), "", OVER_BEST_WIDTH)]
                              if over_best else [])
        transport = res.transport
        if requested_transport != res.transport:
            transport += f" ({requested_transport})"
        self._print(f"# {res.collective}  nranks {res.n}  transport {transport}  dtype "
                    f"{res.dtype}  op {res.op}  root {res.root}  memcpy "
                    f"{res.memcpy_gbps:.2f} GB/s")
        widths = [w or self.alg_width for _, _, w in columns]
        groups, names, units = [], [], []
        for i, ((title, unit, _), w) in enumerate(zip(columns, widths)):
            if i in _GROUPS:  # centred over its four columns and their spaces
                span = sum(widths[i:i + len(_TIMING)]) + len(_TIMING) - 1
                groups.append(_GROUPS[i].center(span))
            elif not any(g <= i < g + len(_TIMING) for g in _GROUPS):
                groups.append(" " * w)
            if title.startswith("mpi_"):
                title = res.baseline.lower() + title[3:]
            names.append(title.rjust(w))
            units.append(unit.rjust(w))
        for cells in (groups, names, units):
            self._print(("#" + " ".join(cells)[1:]).rstrip())

    def row(self, res: Result, r: Row) -> None:
        cells = [str(r.bytes).rjust(12), str(r.count).rjust(12), res.dtype.rjust(10),
                 res.op.rjust(6), str(res.root).rjust(5),
                 algorithm_label(r).rjust(self.alg_width)]
        cells += _timing(r.time_us, r.algbw, r.busbw, r.wrong)
        if r.inplace == "none":
            cells += [NA.rjust(w) for _, _, w in _TIMING]
        else:
            cells += _timing(r.inplace_time_us, r.inplace_algbw, r.inplace_busbw,
                             r.inplace_wrong)
        cells += [_fmt(r.mpi_time_us, "11.2f").rjust(11),
                  _fmt(r.mpi_busbw, "10.3f").rjust(10), _fmt(r.ratio, "7.2f").rjust(7),
                  _fmt(r.pct_copy, "6.1f").rjust(6)]
        if self.over_best:
            cells.append(_fmt(r.over_best, f"{OVER_BEST_WIDTH}.2f").rjust(OVER_BEST_WIDTH))
        self._print(" ".join(cells))

    def closing(self, res: Result) -> None:
        for alg, rows in _by_algorithm(res.rows).items():
            label = f" [{alg}]" if len(_by_algorithm(res.rows)) > 1 else ""
            sized = [r for r in rows if r.bytes > 0]
            if not sized:  # the barrier: latency only
                avg_t = sum(r.time_us for r in rows) / len(rows)
                mpi = [r.mpi_time_us for r in rows if r.mpi_time_us is not None]
                tail = f"   {res.baseline}: {sum(mpi) / len(mpi):.2f} us" if mpi else ""
                self._print(f"# Avg latency{label}: {avg_t:.2f} us{tail}")
                continue
            avg = sum(r.busbw for r in sized) / len(sized)
            inplace = [r.inplace_busbw for r in sized if r.inplace_busbw is not None]
            mpi = [r.mpi_busbw for r in sized if r.mpi_busbw is not None]
            frac = avg / res.memcpy_gbps if res.memcpy_gbps > 0 else float("nan")
            tail = (f"   in place: {sum(inplace) / len(inplace):.3f} GB/s"
                    if len(inplace) == len(sized) else "")
            tail += (f"   {res.baseline}: {sum(mpi) / len(mpi):.3f} GB/s"
                     if len(mpi) == len(sized) else "")
            self._print(f"# Avg bus bandwidth{label}: {avg:.3f} GB/s "
                        f"({100 * frac:.1f}% of memcpy {res.memcpy_gbps:.2f} GB/s){tail}")
        bad = sum(wrong(r) for r in res.rows)
        if bad:
            self._print(f"# WRONG RESULTS: {bad} mismatching elements in total")
        self._print("#")


def wrong(r: Row) -> int:
    """The row's mismatching elements, out of place and in place (a call that
    is in place already counts once)."""
    own = (r.inplace_wrong or 0) if r.inplace == "own" else 0
    return (r.wrong or 0) + own


def _by_algorithm(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault("auto" if r.auto else r.algorithm, []).append(r)
    return out


def mpi_library_name() -> str:
    """The first line of MPI_Get_library_version, shortened: "MPICH Version:
    5.0.2" or "Open MPI v5.0.11, ..." becomes "MPICH 5.0.2", "Open MPI 5.0.11"."""
    from mpi4py import MPI
    first = MPI.Get_library_version().strip().splitlines()[0]
    words = first.replace(",", " ").replace("Version:", " ").split()
    if first.startswith("Open MPI") and len(words) > 2:
        return f"Open MPI {words[2].lstrip('v')}"
    if first.startswith("MPICH") and len(words) > 1:
        return f"MPICH {words[1]}"
    return " ".join(words)


def write_json(path: str, results: list[Result], as_list: bool,
               hosts: Optional[list[dict]] = None) -> None:
    """One object for a single collective; a list of them for ``all``.  Where
    the ranks span several hosts, each object's ``"hosts"`` holds the
    collective's comparison (bench.hosts), in the same order; with ``--hosts
    only`` the objects hold the collective's name and that alone."""
    docs = [r.as_json() for r in results]
    for h in hosts or []:
        mine = [d for d in docs if d["collective"] == h["collective"]] or \
            [{"collective": h["collective"]}]
        if mine[0] not in docs:
            docs.append(mine[0])
        mine[0]["hosts"] = h
    doc = docs if as_list else docs[0]
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")


PLOT_NEEDS = ("--plot needs matplotlib (pip install matplotlib, or the package's "
              "'plot' extra)")


def plotting_missing() -> Optional[str]:
    """Why ``--plot`` cannot draw (matplotlib does not import), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"{PLOT_NEEDS}: {e}"
    return None


def write_plot(path: str, results: list[Result]) -> bool:
    """busbw against size, one panel per collective; False if matplotlib is missing
    (the command line checks that before it runs anything)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"bench: {PLOT_NEEDS}; no plot written", file=sys.stderr, flush=True)
        return False
    panels = [r for r in results if any(row.bytes > 0 for row in r.rows)]
    if not panels:
        print("bench: nothing to plot (no sized rows)", file=sys.stderr, flush=True)
        return False
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4 * nrows), squeeze=False)
    for ax, res in zip(axes.flat, panels):
        groups = _by_algorithm([r for r in res.rows if r.bytes > 0])
        for alg, rows in groups.items():
            ax.plot([r.bytes for r in rows], [r.busbw for r in rows], marker="o", label=alg)
        first = next(iter(groups.values()))
        mpi = [(r.bytes, r.mpi_busbw) for r in first if r.mpi_busbw is not None]
        if mpi:
            ax.plot(*zip(*mpi), marker="s", linestyle="--", color="black", label=res.baseline)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{res.collective}, n={res.n}, {res.transport}, {res.dtype} "
                     f"(memcpy {res.memcpy_gbps:.1f} GB/s)", fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
