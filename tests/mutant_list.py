"""The planted bugs of ``make mutants`` (tests/mutants.py): each one a
realistic slip, found by the text it changes, with the tests that should
catch it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    kind: str          # what it breaks: bits, faults, bench, collectives, transports, trainer
    file: str
    old: str           # must occur exactly once in file
    new: str
    tests: tuple       # pytest arguments: the selection that should catch it
    why: str = ""
    env: tuple = ()    # (name, value) pairs set for the selection


def conformance(n: int, transport: str, *families: str) -> dict:
    """``tests`` and ``env`` of a Mutant: the conformance tests of these
    families, in one job of n ranks that runs only them (conftest.py's
    CONFORMANCE_FAMILIES: a family knocked out of step by a bug costs a
    timeout of its own, and could hang another family's MPI calls)."""
    return {"tests": tuple(f"tests/test_conformance.py::test_family[{n}-{transport}-{f}]"
                           for f in families),
            "env": (("CONFORMANCE_FAMILIES", ",".join(families)),)}


KILLED = "tests/test_faults.py::test_killed_rank"
TRAINER = "tests/test_trainer.py::test_same_weights_as_one_rank"
BENCH = "tests/test_bench_cli.py"

MUTANTS: list[Mutant] = [
    # -- the bits a reduction promises (docs/testing.md, "Bits") ---------------------
    Mutant("direct_from_own_rank", "bits", "collectives/all_reduce.py",
           "    in_rank_order(ep.exchange(src), op, out)",
           "    v = ep.exchange(src)\n    in_rank_order(v[ep.rank:] + v[:ep.rank], op, out)",
           **conformance(3, "shm", "all_reduce", "default"),
           why="each rank reduces starting from its own contribution: right within rounding, "
           "other bits on every rank (the small fast path runs this too)"),
    Mutant("two_shot_from_own_rank", "bits", "collectives/all_reduce.py",
           "            in_rank_order(parts, op, mine[res:res + m])",
           "            in_rank_order(parts[r:] + parts[:r], op, mine[res:res + m])",
           **conformance(3, "shm", "all_reduce"),
           why="each piece reduced from its owner's rank: every rank the same bits, not rank order"),
    Mutant("reduce_scatter_reversed", "bits", "collectives/reduce_scatter.py",
           "for p in range(n)], op,", "for p in range(n)][::-1], op,",
           **conformance(3, "shm", "reduce_scatter"),
           why="direct reduce-scatter combines the ranks last to first"),
    Mutant("small_path_forgets_avg", "bits", "collectives/small.py",
           "                in_rank_order(views, self.uf, of)\n        if self.avg:",
           "                in_rank_order(views, self.uf, of)\n        if False:  # avg",
           **conformance(3, "shm", "default"),
           why="the small all-reduce fast path (from the second call of an op and dtype) "
           "does not divide by the number of ranks"),
    Mutant("small_messages_forget_avg", "bits", "collectives/small.py",
           "                        self.agree)\n        if self.avg:",
           "                        self.agree)\n        if False:  # avg",
           **conformance(3, "mpi", "default"),
           why="the small all-reduce fast path on message transports does not divide by "
           "the number of ranks"),
    # -- faults --------------------------------------------------------------------------
    Mutant("dead_peer_unseen", "faults", "transports/base.py",
           "        return [r for r in ranks if self.local[r] and not _alive(self.pids[r])]",
           "        return []",
           (f"{KILLED}[2-shm-all_reduce]", f"{KILLED}[2-mpi-all_reduce]"),
           "the liveness check never finds a dead peer: a kill shows as a timeout"),
    Mutant("zombie_alive", "faults", "transports/base.py",
           '.split()[0] != b"Z"', '.split()[0] != b"?"',
           ("tests/test_liveness.py",),
           "a process that has exited but is not reaped counts as alive (the launchers "
           "reap at once, so only the unit test sees one)"),
    Mutant("timeout_doubled", "faults", "transports/base.py",
           "        if now >= self.expires:", "        if now >= self.expires + self.timeout:",
           ("tests/test_faults.py::test_late_rank_times_out[3-shm]",),
           "a late rank is reported after twice the timeout"),
    Mutant("deadline_not_restarted", "faults", "transports/base.py",
           "        self.expires = time.monotonic() + self.timeout",
           "        self.expires = self.expires",
           ("tests/test_faults.py::test_a_transfer_that_keeps_moving_does_not_time_out",),
           "progress does not restart the deadline: a long transfer times out"),
    # -- the benchmark's check -----------------------------------------------------------
    Mutant("bench_checks_mpi_output", "bench", "bench/cases.py",
           "        return self.ip if in_place else self.out",
           "        return self.ip if in_place else self.mout",
           (f"{BENCH}::test_out_of_place_checks_catch_a_stale_result",
            f"{BENCH}::test_a_wrong_baseline_is_not_counted_as_ours"),
           "#wrong counts MPI's output instead of ours"),
    Mutant("bench_no_poison", "bench", "bench/cases.py",
           "            _put(self.out, data.poison(want))", "            pass",
           (f"{BENCH}::test_out_of_place_checks_catch_a_stale_result",),
           "the output is not poisoned before the checked call: a stale result passes"),
    Mutant("bench_in_place_not_restored", "bench", "bench/runner.py",
           "        case.reset(in_place)", "        case.reset()",
           (f"{BENCH}::test_all_reduce_checked_rows",),
           "the checked in-place call starts from the timed loop's values, not the inputs"),
    Mutant("busbw_factor", "bench", "bench/cases.py",
           '"allreduce": 2 * (n - 1) / n', '"allreduce": (n - 1) / n',
           (f"{BENCH}::test_all_reduce_checked_rows",),
           "all_reduce's bus bandwidth with the all-gather's factor"),
    Mutant("reference_ignores_offset", "bench", "bench/data.py",
           "np.int64) + offset) % PERIOD", "np.int64)) % PERIOD",
           ("tests/test_data.py",),
           "inputs ignore their offset: the references of blocks are wrong"),
    # -- algorithms ------------------------------------------------------------------------
    Mutant("ring_owned_block", "collectives", "collectives/ring.py",
           "    return (p + 1 + shift) % n", "    return (p + shift) % n",
           **conformance(3, "shm", "all_reduce"),
           why="the ring reduce-scatter names the wrong block as reduced"),
    Mutant("fold_mapping", "collectives", "collectives/ranks.py",
           "        return 2 * new + 1 if new < self.rem else new + self.rem",
           "        return 2 * new + 1 if new <= self.rem else new + self.rem",
           **conformance(3, "shm", "all_reduce"),
           why="the fold maps the first rank after the pairs to a wrong world rank"),
    Mutant("block_bounds", "collectives", "collectives/ranks.py",
           "        acc += q + (i < r)", "        acc += q + (i <= r)",
           ("tests/test_traffic.py::test_bytes_per_algorithm[shm-3]",),
           "one block too many one element longer, the last one cut short: every rank "
           "agrees, so results stay right, but the ring's bytes per rank are off"),
    Mutant("halving_doubling_half", "collectives", "collectives/all_reduce.py",
           "(lo - mask, lo) if f.new & mask else (hi, hi + mask)",
           "(hi, hi + mask) if f.new & mask else (lo - mask, lo)",
           **conformance(4, "shm", "all_reduce"),
           why="halving_doubling's all-gather (by doubling) exchanges the wrong half"),
    Mutant("reduce_scatter_gather_block", "collectives", "collectives/reduce.py",
           "        blk = (r + 1) % n", "        blk = r % n",
           **conformance(3, "shm", "reduce"),
           why="root collects each rank's block at the wrong place"),
    Mutant("recv_reduce_src_ignored", "transports", "transports/shm/messages.py",
           "self.op(self.src[lo:hi], chunk.view(self.acc.dtype), out=a)",
           "self.op(a, chunk.view(self.acc.dtype), out=a)",
           **conformance(3, "shm", "reduce"),
           why="a receive-and-reduce given x reduces into what its destination held "
               "instead: binomial's first sum starts from garbage"),
    Mutant("recv_reduce_src_ignored_mpi", "transports", "transports/mpi.py",
           "self.op(self.src, self.scratch, out=self.acc)",
           "self.op(self.acc, self.scratch, out=self.acc)",
           **conformance(3, "mpi", "reduce"),
           why="the same on mpi"),
    Mutant("reduce_direct_in_place_root_unsaved", "collectives", "collectives/reduce.py",
           "    own_copy = is_root and root > 1 and np.may_share_memory(x, out)",
           "    own_copy = False",
           **conformance(3, "shm", "reduce"),
           why="an in-place root past rank 1 reduces from its own chunk while overwriting it"),
    Mutant("swap_sent_uncounted", "transports", "transports/mpi.py",
           "            self.count_sent(dst, sbuf.nbytes)\n            self.count_received(",
           "            self.count_received(",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_on_hier",),
           why="the compiled send-receive leaves its sends out of the byte counts"),
    Mutant("swap_late_receive_unwaited", "transports", "transports/mpi.py",
           "            if h:\n",
           "            if h and sending:\n",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_matches_python_on_mpi[4]",),
           why="a receive still pending after the compiled polls is not waited for: the "
               "round reduces a buffer that has not arrived"),
    Mutant("steps_receives_uncounted", "transports", "transports/mpi.py",
           "        recvs = [(s[2], s[6]) for s in steps if s[0] in schedule.RECEIVES]",
           "        recvs = [(s[2], s[6]) for s in steps if s[0] in schedule.REDUCES]",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_matches_python_on_mpi[4]",),
           why="a compiled schedule counts only the receives it reduces: all-gather's "
               "bytes go missing"),
    Mutant("bruck_out_half", "collectives", "collectives/all_gather.py",
           "        if rank:\n            steps.append((schedule.OUT",
           "        if False:\n            steps.append((schedule.OUT",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_matches_python_on_mpi[3]",),
           why="Bruck's compiled plan leaves the blocks of the ranks before this one out of "
               "the result"),
    Mutant("halving_out_block", "collectives", "collectives/reduce_scatter.py",
           "        steps.append((schedule.OUT, r, r, 0, 0, r, 1))\n        plan = _HALVING",
           "        steps.append((schedule.OUT, r, r, 0, 0, 0, 1))\n        plan = _HALVING",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_matches_python_on_mpi[3]",),
           why="recursive halving's compiled plan hands out block 0 of its buffer, not this "
               "rank's"),
    Mutant("lane_avg_undivided", "collectives", "collectives/communicator.py",
           "                if avg:\n                    divide(args[1], self.size)",
           "                pass",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_on_hier",),
           why="the small calls' shortest way returns avg's sum"),
    Mutant("hier_sendrecv_python", "transports", "transports/hier.py",
           "        self.flat.sendrecv(sbuf, dst, rbuf, src)",
           "        Endpoint.sendrecv(self, sbuf, dst, rbuf, src)",
           ("tests/test_mpi_swap.py::test_compiled_sendrecv_on_hier",),
           why="hier's send-receive rounds go through Python's posts, not the compiled call"),
    Mutant("all_to_all_index_swap", "collectives", "collectives/all_to_all.py",
           "ep.sendrecv(x[dst * m:(dst + 1) * m], dst, out[src * m:(src + 1) * m], src)",
           "ep.sendrecv(x[src * m:(src + 1) * m], dst, out[dst * m:(dst + 1) * m], src)",
           **conformance(3, "shm", "all_to_all"),
           why="pairwise all-to-all swaps the send and receive block indices"),
    Mutant("scatter_root_block", "collectives", "collectives/gather.py",
           "    np.copyto(out, x[root * m:(root + 1) * m])", "    np.copyto(out, x[:m])",
           **conformance(3, "shm", "scatter"),
           why="a root other than 0 keeps block 0 instead of its own"),
    Mutant("gather_split_offset", "collectives", "collectives/gather.py",
           "        rem.read(peer, head * isz, out[peer * m + head:(peer + 1) * m])",
           "        rem.read(peer, 0, out[peer * m + head:(peer + 1) * m])",
           tests=("tests/test_conformance.py::test_family_shm_rendezvous[2-gather]",),
           env=(("CONFORMANCE_FAMILIES", "gather"),),
           why="gather's shared copy at N = 2: root reads the head of its peer's block "
               "into the tail's place"),
    Mutant("broadcast_ring_order", "collectives", "collectives/broadcast.py",
           "    order = [absolute(v, root, n) for v in range(n)]", "    order = list(range(n))",
           **conformance(3, "shm", "broadcast"),
           why="scatter_allgather's ring ignores the root"),
    Mutant("avg_on_ints", "collectives", "collectives/ops.py",
           '    if o is Op.AVG and not inexact:', '    if False:',
           ("tests/test_data.py::test_ops_for_follows_the_interface",
            "tests/test_errors.py::test_bad_input_world_of_one"),
           "avg accepted on integer dtypes"),
    Mutant("leading_size_unchecked", "collectives", "collectives/validate.py",
           "    if x.ndim == 0 or x.shape[0] != size:", "    if x.ndim == 0:",
           ("tests/test_errors.py::test_bad_input_world_of_one",
            "tests/test_errors.py::test_bad_input_under_mpiexec[shm-3]"),
           "a missing size check: x's leading dimension is not the communicator's size"),
    Mutant("segment_readable", "transports", "transports/shm/segment.py",
           "os.O_EXCL | os.O_NOFOLLOW, 0o600)", "os.O_EXCL | os.O_NOFOLLOW, 0o644)",
           ("tests/test_security.py::test_segment_is_private_exclusive_and_unguessable",),
           "the segment is created readable by every user"),
    Mutant("p2p_tag_ignored", "transports", "transports/shm/slots.py",
           "            if r.tag == tag:", "            if True:",
           **conformance(2, "shm", "p2p"),
           why="a message goes to the oldest posted receive from its sender, whatever its tag"),
    Mutant("death_not_relayed", "faults", "transports/mpi.py",
           "    caps = Capabilities(relays_deaths=True)", "    caps = Capabilities()",
           ("tests/test_faults.py::test_killed_rank_relayed",),
           "on mpi the rank that finds a peer dead keeps it to itself: the others time out"),
    Mutant("huge_share_own_only", "transports", "transports/shm/one_copy.py",
           "for i in (d.mine, *d.block_of.values()))", "for i in (d.mine,))",
           ("tests/test_one_copy.py::test_in_place_all_to_all_reads_where_huge_pages_back_every_source",),
           "each rank decides on its own source's huge pages alone: ranks take different paths"),
    Mutant("refused_send_overtaken", "transports", "transports/mpi.py",
           "            if q is not None:\n                q.append(r)\n            elif not",
           "            if False:\n                q.append(r)\n            elif not",
           ("tests/test_bounded.py::test_refused_sends_are_posted_later_in_order[2]",),
           "a send to another host is posted although an earlier one to that peer waits "
           "refused: it overtakes it, and messages with one tag arrive out of order"),
    Mutant("refused_send_never_flushed", "transports", "transports/mpi.py",
           "        if ep.queued:  # sends MPI refused, to any peer",
           "        if self.mpi is None:  # sends MPI refused, to any peer",
           ("tests/test_bounded.py::test_refused_sends_are_posted_later_in_order[2]",),
           "a refused send is retried only when its own request is polled: a rank that waits "
           "for a message from A never posts what it owes B"),
    # -- variable counts -------------------------------------------------------------------
    Mutant("a2a_v_wrong_slot", "collectives", "collectives/variable.py",
           "peer_index(r, p) * step * x.itemsize)",
           "peer_index(p, r) * step * x.itemsize)",
           ("tests/test_variable.py::test_variable_calls_against_numpy[3-shm]",),
           "a rank copies out the piece its peer staged for another rank (all_to_all_v staged)"),
    Mutant("a2a_v_learned_row", "collectives", "collectives/variable.py",
           "    return bounds([v[r + 1] - v[r] for v in rows], 1)",
           "    return bounds([rows[r][q + 1] - rows[r][q] for q in range(n)], 1)",
           ("tests/test_variable.py::test_variable_calls_against_numpy[3-shm]",),
           "without recv_counts a rank takes its send counts (its row) for what it receives"),
    Mutant("a2a_v_matrix_unchecked", "collectives", "collectives/variable.py",
           "            if not learn:\n                w = rows[q]",
           "            if False:\n                w = rows[q]",
           ("tests/test_variable.py::test_disagreeing_ranks_raise[2-shm]",),
           "all_to_all_v's ranks no longer compare the count matrix: a rank that expects a "
           "row more reads past its peer's block"),
    Mutant("ag_v_learned_out_unchecked", "collectives", "collectives/variable.py",
           "        if h[2] != -1 and h[2] != b[n]:", "        if False:",
           ("tests/test_variable.py::test_disagreeing_ranks_raise[2-shm]",),
           "all_gather_v without counts no longer compares each rank's out with the blocks: "
           "a rank whose out holds a row more returns it with that row unwritten"),
    Mutant("gv_learned_out_unchecked", "collectives", "collectives/variable.py",
           "    if out.size != total:", "    if False:",
           ("tests/test_variable.py::test_disagreeing_ranks_raise[2-shm]",),
           "gather_v without counts no longer compares root's out with the blocks it "
           "learns: an out of a row more comes back with that row unwritten"),
    Mutant("ag_v_learned_own_rest_lost", "collectives", "collectives/variable.py",
           "            copy(out[b[r] + step:b[r + 1]], x[step:])", "            pass",
           ("tests/test_variable.py::test_variable_calls_against_numpy[2-shm]",),
           "all_gather_v without counts, its blocks read in place past the first round: a "
           "rank's own block past that round is never copied into its out"),
    Mutant("a2a_v_bare_unread", "collectives", "collectives/variable.py",
           "                bare = {p for p in peers if _bare(read, n, rows[p][n] * item)}",
           "                bare = set()",
           ("tests/test_variable.py::test_variable_calls_against_numpy[3-shm]",),
           "a rank whose first round carried bounds alone is taken to have sent data: its "
           "blocks' first pieces are copied from an empty round and never read"),
    # -- the trainer -----------------------------------------------------------------------
    Mutant("zero_accumulation_lost", "trainer", "trainer/strategies/zero.py",
           "                    piece += own", "                    piece[:] = own",
           (f"{TRAINER}[shm-2]",),
           "ZeRO-2/3 keep only the last micro-batch's gradient shard"),
    Mutant("ddp_bucket_averaged", "trainer", "trainer/strategies/ddp.py",
           "return self.comm.all_reduce(b, out=b, algorithm=",
           "return self.comm.all_reduce(b, out=b, op=\"avg\", algorithm=",
           (f"{TRAINER}[shm-2]",),
           "DDP averages its gradient buckets although the loss is already divided by the "
           "global batch: gradients N times too small"),
    Mutant("zero_shard_offset", "trainer", "trainer/strategies/zero.py",
           "            start = self.lay.shard_starts[self.rank]",
           "            start = self.lay.start",
           (f"{TRAINER}[shm-2]",),
           "Adam updates a group at its offset in the flat buffer, not in the shard"),
]
