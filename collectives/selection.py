"""The selection table: every default choice of an algorithm, as data.

Per collective, rows in order; the first row that matches the call picks its
algorithm.  A row matches on

- the message size ``nbytes`` (the input's bytes: x for most calls, buf for
  broadcast, one block for gather and scatter): ``min_bytes <= nbytes <=
  max_bytes``, and ``N * nbytes >= min_total``;
- the ranks: ``ranks`` (lowest, highest), and ``pow2`` (a power of two);
- the ranks per host (on the "hier" transport): ``per_host`` (lowest,
  highest) and ``equal_hosts``;
- the array kind (``KINDS``): plain numpy arrays, communicator-allocated
  ones (``comm.empty``), or CuPy arrays on the "cuda" transport;
- what the transport offers (``transports.base.Capabilities``): ``shared``
  (an exchange through shared memory), ``one_copy`` (peers read each other's
  memory), ``hier`` (the "hier" transport's parts).

A condition left at None holds everywhere.  Each row says why: the
measurement behind it (docs/performance.md has the sweeps).  The table is
the default's starting point: a tuning file (collectives/tuning.py) takes
precedence where it has a rule, and adaptation (collectives/adapt.py) moves
on from either where the machine says otherwise.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

KINDS = ("plain", "allocated", "device")
_ANY = 1 << 62


@dataclasses.dataclass(frozen=True)
class Where:
    """What a choice depends on besides the size: the communicator's ranks and
    transport (fixed), and the array kind (per call)."""

    size: int
    shared: bool = False
    one_copy: bool = False
    hier: bool = False
    equal_hosts: bool = True
    per_host: int = 0          # ranks on this rank's host (hier only)
    kind: str = "plain"

    def of_kind(self, kind: str) -> "Where":
        return self if kind == self.kind else dataclasses.replace(self, kind=kind)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: the conditions, the algorithm, and why."""

    algorithm: str
    why: str = ""
    min_bytes: int = 0
    max_bytes: int = _ANY
    min_total: int = 0         # N x nbytes at least
    ranks: tuple[int, int] = (1, _ANY)
    pow2: Optional[bool] = None
    per_host: tuple[int, int] = (0, _ANY)
    equal_hosts: Optional[bool] = None
    kinds: tuple[str, ...] = KINDS
    shared: Optional[bool] = None
    one_copy: Optional[bool] = None
    hier: Optional[bool] = None

    def matches(self, nbytes: int, w: Where) -> bool:
        n = w.size
        return (self.min_bytes <= nbytes <= self.max_bytes and n * nbytes >= self.min_total
                and self.ranks[0] <= n <= self.ranks[1]
                and (self.pow2 is None or self.pow2 == (n & (n - 1) == 0))
                and self.per_host[0] <= w.per_host <= self.per_host[1]
                and (self.equal_hosts is None or self.equal_hosts == w.equal_hosts)
                and w.kind in self.kinds
                and (self.shared is None or self.shared == w.shared)
                and (self.one_copy is None or self.one_copy == w.one_copy)
                and (self.hier is None or self.hier == w.hier))


KiB, MiB = 1 << 10, 1 << 20
# all_to_all's one_copy_or_staged from blocks of this many bytes a rank (and
# all_to_all_v's from this mean): on communicator-allocated arrays the peers'
# reads in place beat the staged rounds (the row's measurement)
ALL_TO_ALL_ALLOCATED_READ_BYTES = 4 * MiB
# the hierarchical algorithms, first in the rows of every call that has one
_HIER = Row("hier", "the hier transport: shared memory within a host, MPI between (hosts.md)",
            hier=True)
# the rows of messages between host arrays (mpi, and hier's parts between
# hosts), measured with ``bench all --transport mpi -b 4K -e 16M -f 4
# --repeat 3 --algorithm all``, COLLECTIVES_ADAPT=0, one job at N = 2 and two
# at N = 4 (performance.md, "Default algorithm choice"); sizes there are
# nccl-tests' (all_gather: the output), here the call's nbytes
_MSG = dict(shared=False, kinds=("plain", "allocated"))

TABLE: dict[str, tuple[Row, ...]] = {
    "all_reduce": (
        Row("hier_leader", "hosts of unequal sizes: only the leaders cross (hosts.md)",
            hier=True, equal_hosts=False),
        Row("hier_leader", "one rank a host: the leaders are every rank", hier=True,
            per_host=(0, 1)),
        Row("recursive_doubling", "up to 4 KiB: two flat rounds, each one compiled "
            "send-receive; 2 x 2 hosts, 8 B-4 KiB, real at 1 Gbit/s and emulated: 0.49-0.55 "
            "of hier_mirror's time (hosts.md, \"Small messages\")", hier=True,
            max_bytes=4 * KiB),
        Row("hier_mirror", "two steps; level with flat mpi on 2 x 2, 1.06-1.18x on 2 x 4 "
            "from 8 B to 4 KiB, where hier_leader's three steps were 0.60-0.80x",
            hier=True, max_bytes=64 * KiB - 1),
        Row("hier_pipelined", "from 4 MiB: hier_slices chunk by chunk, the link busy while "
            "the host reduces; 2 x 2 hosts at 1 Gbit/s, 4/16/64 MiB: 1.06/1.13/0.97-1.01x "
            "hier_slices. Where the processors are the limit (no rate limit, one kernel's "
            "emulated hosts) it is 0.6-0.9x, and adaptation moves to hier_slices or the flat "
            "ring (hosts.md)",
            hier=True, min_bytes=4 * MiB),
        Row("hier_slices", "each local rank carries 1/L of the message between hosts",
            hier=True),
        Row("recursive_doubling", "messages from 8 KiB: log2 N rounds beat direct's posts "
            "to every peer (N = 4, 16 KiB: 96-107 against 111-112 us)", min_bytes=8 * KiB,
            max_bytes=128 * KiB, **_MSG),
        Row("ring", "messages at N = 2 past 128 KiB: one exchange, x read where it lies "
            "(256 KiB: 41 against halving_doubling's 52 us)", ranks=(2, 2),
            min_bytes=128 * KiB + 1, **_MSG),
        Row("direct", "one round through the exchange buffers", max_bytes=32 * KiB),
        Row("one_copy_or_staged", "on communicator-allocated arrays reduces from the peers' "
            "mappings: faster at 16 and 64 MiB (performance.md)", one_copy=True,
            min_bytes=16 * MiB),
        Row("direct", "staged: one exchange, fewest rounds up to 256 KiB", shared=True,
            max_bytes=256 * KiB),
        Row("direct", "staged at N = 2: the half-megabyte rounds beat two_shot's two",
            shared=True, ranks=(2, 2), min_bytes=16 * MiB),
        Row("two_shot", "staged: reduce-scatter then all-gather through the exchange",
            shared=True),
        Row("recursive_doubling", "messages: log2 N rounds while latency-bound",
            max_bytes=128 * KiB),
        Row("halving_doubling", "messages: Rabenseifner's bytes, log2 N rounds",
            max_bytes=512 * KiB, pow2=True),
        Row("ring", "messages: 2(N-1)/N of the message per rank, bandwidth-bound"),
    ),
    "broadcast": (
        _HIER,
        Row("one_copy", "N = 2 from 4 MiB: each rank copies root's buffer once "
            "(performance.md)", one_copy=True, ranks=(2, 2), min_bytes=4 * MiB),
        Row("one_copy", "N x S from 32 MiB: each rank copies root's buffer once",
            one_copy=True, min_total=32 * MiB),
        Row("direct", "staged: root writes once, every peer reads", shared=True),
        Row("binomial", "messages: log2 N rounds while latency-bound", max_bytes=64 * KiB),
        Row("binomial", "messages at N = 2: one send either way", ranks=(1, 2)),
        Row("binomial", "messages up to 4 ranks (N = 4, 256 KiB to 4 MiB: scatter_allgather "
            "took 1.6-3.2 times binomial's time)", ranks=(3, 4), **_MSG),
        Row("scatter_allgather", "messages: van de Geijn's bytes for large buffers"),
    ),
    "reduce": (
        _HIER,
        Row("direct", "staged: every rank's piece in one exchange", shared=True),
        Row("binomial", "messages: log2 N rounds while latency-bound", max_bytes=64 * KiB),
        Row("binomial", "messages at N = 2: one send", ranks=(1, 2)),
        Row("binomial", "messages up to 4 ranks to 1 MiB (N = 4, 256 KiB: 139-150 against "
            "reduce_scatter_gather's 210-267 us; 1 MiB: 258-300 against 297-385)",
            ranks=(3, 4), max_bytes=1 * MiB, **_MSG),
        Row("reduce_scatter_gather", "messages: Rabenseifner's bytes for large buffers"),
    ),
    "all_gather": (
        Row("recursive_doubling", "hier, blocks to 1 KiB: two flat rounds in one compiled "
            "call, one of them across hosts; 2 x 2 hosts at 1 Gbit/s, 8 B-512 B blocks: 36-71 "
            "against hier's 96-129 us and bruck's 62-97 (hosts.md, \"Small messages\")",
            hier=True, max_bytes=1 * KiB),
        _HIER,
        Row("one_copy", "N = 2, output from 16 MiB: one copy per block (performance.md)",
            one_copy=True, ranks=(2, 2), min_total=16 * MiB),
        Row("one_copy_or_staged", "N >= 3, output from 16 MiB: direct's half-megabyte "
            "rounds beat process_vm_readv; the mappings of communicator-allocated arrays "
            "beat both", one_copy=True, min_total=16 * MiB),
        Row("one_copy_or_staged", "N = 2, communicator-allocated arrays, output from 2 MiB: "
            "the mappings", one_copy=True, ranks=(2, 2), min_total=2 * MiB,
            kinds=("allocated",)),
        Row("ring", "messages at N = 2: one exchange (4 to 64 KiB of output: 9-14 against "
            "direct's 12-16 us)", ranks=(2, 2), **_MSG),
        Row("bruck", "messages at N = 3-4, blocks to 256 KiB: ceil(log2 N) rounds (N = 4, "
            "1 MiB of output: 181-215 against ring's 243-322 us)", ranks=(3, 4),
            max_bytes=256 * KiB, **_MSG),
        Row("direct", "one round through the exchange buffers while a block fits them",
            max_bytes=32 * KiB),
        Row("one_copy", "N = 2, plain arrays, blocks from 32 KiB: one compiled call; 64 KiB "
            "to 16 MiB of output: 0.47-0.87 of direct's time and 0.90-1.04 of the ring's, "
            "under MPICH and Open MPI, bound or not (performance.md)", one_copy=True,
            ranks=(2, 2), kinds=("plain",)),
        Row("direct", "staged: no context switch per step; beats the ring from 64 KiB to "
            "8 MiB at N = 2", shared=True),
        Row("ring", "messages: one copy per block (Bruck's fewer rounds lose above 32 KiB)"),
    ),
    "reduce_scatter": (
        Row("recursive_doubling", "hier, to 128 B: all_reduce's two flat rounds in one "
            "compiled call, the one across hosts last; 2 x 2 hosts at 1 Gbit/s, 64 B: 34 "
            "against recursive_halving's 38 us (from 256 B the whole message crosses at "
            "twice the time: hosts.md, \"Small messages\")", hier=True, max_bytes=128),
        Row("recursive_halving", "hier, to 4 KiB: two flat rounds in one compiled call, one "
            "of them across hosts; 2 x 2 hosts at 1 Gbit/s, 32 B-2 KiB: 43-88 against hier's "
            "123-156 us (hosts.md, \"Small messages\")", hier=True, max_bytes=4 * KiB),
        _HIER,
        Row("one_copy_or_staged", "measured as all_reduce's (from 16 MiB)", one_copy=True,
            min_bytes=16 * MiB),
        Row("direct", "staged: one exchange", shared=True),
        Row("ring", "messages at N = 2: one exchange, x read where it lies (4 to 64 KiB: "
            "12-17 against recursive_halving's 13-19 us)", ranks=(2, 2), **_MSG),
        Row("recursive_halving", "messages: log2 N rounds while latency-bound",
            max_bytes=64 * KiB),
        Row("ring", "messages: (N-1)/N of the message per rank"),
    ),
    "all_to_all": (
        _HIER,
        Row("one_copy", "N = 2, plain arrays, from 16 KiB: one compiled call, no slow state; "
            "1 MiB: 66-72 us against direct's 57-61 where it runs fast and 250-300 where it "
            "does not (half the jobs, MPICH and Open MPI, bound or not; performance.md)",
            one_copy=True, ranks=(2, 2), kinds=("plain",), min_bytes=16 * KiB),
        Row("one_copy_or_staged", "from 4 MiB: 1.5-1.7x MPICH on communicator-allocated "
            "arrays, where direct gave 0.9-1.1x", one_copy=True,
            min_bytes=ALL_TO_ALL_ALLOCATED_READ_BYTES),
        Row("one_copy_or_staged", "N x S from 32 MiB", one_copy=True, min_total=32 * MiB),
        Row("direct", "staged: one exchange a round (performance.md)", shared=True),
        Row("linear", "messages: every block posted at once while small", max_bytes=4 * KiB),
        Row("linear", "messages at N = 3-4: every block posted at once (N = 4, 16 KiB to "
            "16 MiB: pairwise took 1.16-1.40 times its time in two jobs)", ranks=(3, 4),
            **_MSG),
        Row("pairwise", "messages: one peer a step, no contention"),
    ),
    "gather": (
        Row("one_copy", "blocks from 2 MiB: root reads each block once", one_copy=True,
            min_bytes=2 * MiB),
        Row("binomial", "small blocks: fewer messages at root", max_bytes=16 * KiB),
        Row("linear", "large blocks: each block moves once"),
    ),
    "scatter": (
        Row("one_copy", "blocks from 2 MiB: each rank reads its block once",
            one_copy=True, min_bytes=2 * MiB),
        Row("binomial", "small blocks: fewer messages at root", max_bytes=16 * KiB),
        Row("linear", "large blocks: each block moves once"),
    ),
    "barrier": (
        Row("dissemination", "hier, up to 4 ranks: two rounds of empty messages in one compiled "
            "call; 2 x 2 hosts at 1 Gbit/s: 46-52 against hier's 98-99 us (hosts.md)",
            hier=True, ranks=(1, 4)),
        _HIER,
        Row("direct", "one round in which every rank signals every other", ranks=(1, 16)),
        Row("dissemination", "ceil(log2 N) rounds: fewer signals per rank from 17 ranks"),
    ),
}


# the calls whose default is this table's alone (families.MORE): the
# variable-count calls where their counts differ (equal counts run the
# fixed-count twin and its choice), nbytes the whole concatenation's, the same
# on every rank (all_to_all_v's ranks know no common size: one row); and the
# prefix reductions
MORE: dict[str, tuple[Row, ...]] = {
    "all_gather_v": (
        Row("one_copy", "from 1 MiB: every block read once where it lies", one_copy=True,
            min_bytes=1 * MiB),
        Row("linear", "every block posted at once while latency-bound", max_bytes=64 * KiB),
        Row("ring", "one block a step to the right, no contention"),
    ),
    "gather_v": (
        Row("one_copy", "from 1 MiB: each block written once into root's out",
            one_copy=True, min_bytes=1 * MiB),
        Row("linear", "each block moves once"),
    ),
    "scatter_v": (
        Row("one_copy", "from 1 MiB: each rank reads its block of root's x once",
            one_copy=True, min_bytes=1 * MiB),
        Row("linear", "each block moves once"),
    ),
    "all_to_all_v": (
        Row("one_copy_or_staged", "the twin's staged rounds, the first with the ranks' "
            "bounds, so that every rank knows every count; the rest of each block read in "
            "place where the twin reads (N > 2: from ALL_TO_ALL_V_READ_TOTAL_BYTES in all)",
            one_copy=True, shared=True),
        Row("staged", "without one copy: the twin's staged rounds", shared=True),
        Row("linear", "messages at N = 3-4: every block posted at once, as all_to_all's row "
            "(N = 4, 16 MiB a rank, equal counts: pairwise took 1.13-1.28 times the twin's "
            "linear in three jobs)", ranks=(3, 4), **_MSG),
        Row("pairwise", "one peer a step, no contention; sizes differ between ranks, so "
            "the choice cannot depend on them"),
    ),
    "reduce_scatter_v": (
        Row("linear", "one round, blocks reduced in rank order (numpy's bits)",
            ranks=(1, 8)),
        Row("ring", "messages at many ranks: one block a step"),
    ),
    "scan": (
        Row("linear", "up to 4 ranks: N - 1 steps, each a message of S, numpy's bits",
            ranks=(1, 4)),
        Row("recursive_doubling", "ceil(log2 N) rounds"),
    ),
    "exscan": (
        Row("linear", "up to 4 ranks: N - 1 steps, each a message of S, numpy's bits",
            ranks=(1, 4)),
        Row("recursive_doubling", "ceil(log2 N) rounds"),
    ),
}

# -- choices inside an algorithm or a path ----------------------------------
# the Communicator's fast path for a blocking all_reduce on shared memory
# (collectives/small.py): at most one exchange buffer (at least 4096 bytes,
# transports.md), where the table picks direct's one round
SMALL_ALL_REDUCE_BYTES = 4096
# hierarchical.hier_pipelined: chunks of at least this many bytes, at most
# this many (their steps overlap: one chunk between hosts while the next is
# reduced within them)
PIPELINE_CHUNK_BYTES = 1 << 20
PIPELINE_CHUNKS = 16
# one_copy.regions_or_staged's ``huge``: from this share of every source on
# huge pages (all_to_all at N = 2, 4 MiB: process_vm_readv from sources all,
# half and not on huge pages 238, 321 and 393 us against the staged 285;
# performance.md)
HUGE_SHARE = 0.75
# all_to_all's one_copy_or_staged reads plain arrays with process_vm_readv at
# N = 2 from N x S of this many bytes (below, direct's half-megabyte rounds)
ALL_TO_ALL_READ_TOTAL_BYTES = 32 << 20
# all_to_all_v's one_copy_or_staged, after its first round, reads the rest of
# every block from the peers' x at N > 2 where the count matrix (every rank's
# blocks together) holds this many bytes (equal counts, interleaved,
# adaptation off, N = 4 x 1 MiB: 0.61-0.71 of the twin's staged direct;
# performance.md, "Variable counts"); at N = 2 where the twin reads, from
# ALL_TO_ALL_READ_TOTAL_BYTES, and from ALL_TO_ALL_ALLOCATED_READ_BYTES a rank
# on communicator-allocated arrays
ALL_TO_ALL_V_READ_TOTAL_BYTES = 2 << 20
# broadcast's one_copy: root writes (1/N of the buffer) from this size, every
# peer reads all of it below
WRITE_FROM_BYTES = 256 * 1024
# gather's one_copy at N = 2 shares the peer's block with root from blocks
# of this size (performance.md, "Gather at N = 2: root reads a third")
SPLIT_BLOCK_BYTES = 4 << 20


# -- the same bits ------------------------------------------------------------
# the algorithms whose float results are the bits of numpy's sum in rank
# order, ((x0 + x1) + x2) + ..., at every N (docs/algorithms.md, "Reproducible
# bits"; tests/order_check.py); the others reduce in another order
RANK_ORDER: dict[str, tuple[str, ...]] = {
    "all_reduce": ("direct", "two_shot", "one_copy", "one_copy_or_staged"),
    "reduce_scatter": ("direct", "one_copy", "one_copy_or_staged"),
    "reduce": ("direct", "one_copy"),
}


def row(call: str, nbytes: int, w: Where) -> Row:
    """The first row of ``call``'s table that matches."""
    for r in TABLE[call] if call in TABLE else MORE[call]:
        if r.matches(nbytes, w):
            return r
    raise LookupError(f"no row of the selection table for {call} at {nbytes} B on {w}")


def choose(call: str, nbytes: int, size: int, shared: bool = False) -> str:
    """The table's algorithm for a flat communicator of ``size`` ranks on
    plain arrays (``shared``: its exchange is through shared memory; one-copy
    algorithms never): what the hierarchical algorithms run on their parts."""
    return row(call, nbytes, Where(size, shared)).algorithm
