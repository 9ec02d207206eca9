"""The default's choice: the selection table (collectives/selection.py),
tuning files (collectives/tuning.py) and adaptation (collectives/adapt.py)."""
from __future__ import annotations

import itertools
import json
import re
import types

import pytest

from launch import ROOT, run_mpi

from collectives import adapt, selection, tuning
from collectives.families import FAMILIES, offered
from transports.base import Capabilities
from transports.hosts import Hosts, number

SIZES = [0, 1, 8, 4096, 32 << 10, (32 << 10) + 1, 64 << 10, 128 << 10, 256 << 10,
         (256 << 10) + 1, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20]


def _situations():
    """(Where, capabilities, hosts) of flat communicators of 1-20 ranks on
    messages, staged and one-copy shared memory, and of "hier" layouts."""
    flat = [(False, False, Capabilities()),
            (True, False, Capabilities(shared_exchange=True)),
            (True, True, Capabilities(shared_exchange=True, one_copy=True, regions=True))]
    for n, (shared, one, caps) in itertools.product(range(1, 21), flat):
        for kind in selection.KINDS:
            yield selection.Where(n, shared, one, kind=kind), caps, None
    for names in ("aabb", "aab", "abcd", "aaabbb", "ab"):
        for r in range(len(names)):
            h = Hosts(r, number(list(names)), (0,) * len(names), (True,) * len(names))
            yield (selection.Where(len(names), hier=True, equal_hosts=h.equal,
                                   per_host=h.local_size), Capabilities(hier=True), h)


def test_every_situation_has_an_offered_row():
    """Every call, size and situation finds a row, and its algorithm is one the
    communicator offers there; every row names an algorithm of its family
    and says why."""
    for call, rows in selection.TABLE.items():
        names = FAMILIES[call].names()
        for row in rows:
            assert row.algorithm in names and row.why, (call, row)
    assert set(selection.TABLE) == set(FAMILIES)
    for where, caps, hosts in _situations():
        here = offered(caps, hosts)
        for call in FAMILIES:
            for s in SIZES:
                alg = selection.row(call, s, where).algorithm
                assert alg in here[call], (call, s, where, alg)


def test_table_rows_pick_as_measured():
    """Spot checks of the table against the choices docs/algorithms.md states."""
    w = selection.Where
    assert selection.row("all_reduce", 8, w(4, True, True)).algorithm == "direct"
    assert selection.row("all_reduce", 1 << 20, w(4, True, False)).algorithm == "two_shot"
    assert selection.row("all_reduce", 16 << 20, w(4, True, True)).algorithm == \
        "one_copy_or_staged"
    assert selection.row("all_reduce", 1 << 20, w(4)).algorithm == "ring"
    assert selection.row("all_reduce", 256 << 10, w(4)).algorithm == "halving_doubling"
    assert selection.row("all_reduce", 256 << 10, w(3)).algorithm == "ring"
    assert selection.row("all_gather", 8 << 20, w(2, True, True)).algorithm == "one_copy"
    at2 = w(2, True, True)
    assert selection.row("all_gather", 32 << 10, at2).algorithm == "direct"  # exchange buffers
    assert selection.row("all_gather", 64 << 10, at2).algorithm == "one_copy"
    alloc = at2.of_kind("allocated")
    assert selection.row("all_gather", 64 << 10, alloc).algorithm == "direct"
    assert selection.row("all_gather", 1 << 20, alloc).algorithm == "one_copy_or_staged"
    assert selection.row("all_to_all", 16 << 10, at2).algorithm == "one_copy"
    assert selection.row("all_to_all", 8 << 10, at2).algorithm == "direct"
    assert selection.row("all_to_all", 64 << 20, alloc).algorithm == "one_copy_or_staged"
    assert selection.row("all_to_all", 1 << 20, w(3, True, True)).algorithm == "direct"
    assert selection.row("barrier", 0, w(17)).algorithm == "dissemination"


def test_no_chooser_outside_the_table():
    """Every default choice lives in selection.py: no other module of
    collectives/ defines a chooser."""
    for p in (ROOT / "collectives").glob("*.py"):
        if p.name not in ("selection.py", "adapt.py"):
            assert not re.search(r"^def choose\b", p.read_text(), re.M), p


def _doc(**over) -> dict:
    d = {"format": "collectives-tuning", "version": 1, "ranks": 2, "ranks_per_host": [2],
         "transport": "shm", "adapt": True,
         "rules": {"all_reduce": {"plain": [[4096, "direct"], [None, "ring"]]}}}
    d.update(over)
    return d


def test_tuning_document_checked():
    t = tuning.check(_doc())
    assert t.rule("all_reduce", "plain", 4096) == "direct"
    assert t.rule("all_reduce", "plain", 4097) == "ring"
    assert t.rule("all_reduce", "allocated", 8) is None and t.rule("gather", "plain", 8) is None
    assert t.misfit(2, (2,), "shm") is None
    assert "3 ranks" in t.misfit(3, (3,), "shm") or "3" in t.misfit(3, (3,), "shm")
    assert "per host" in t.misfit(2, (1, 1), "shm")
    assert "transport" in t.misfit(2, (2,), "mpi")


def _rules(rows, call="all_reduce", kind="plain"):
    return {"rules": {call: {kind: rows}}}


BAD = [
    ([], "expected a JSON object"),
    (_doc(format="other"), "'format' must be"),
    (_doc(version=2), "'version' must be 1"),
    ({k: v for k, v in _doc().items() if k != "ranks"}, "missing 'ranks'"),
    (_doc(ranks=0), "'ranks' must be a positive integer"),
    (_doc(ranks_per_host=[1, 2]), "adds up to 3"),
    (_doc(ranks_per_host="2"), "'ranks_per_host' must be a list"),
    (_doc(transport="tcp"), "'transport' must be one of"),
    (_doc(adapt="yes"), "'adapt' must be true or false"),
    (_doc(rules=[]), "'rules' must be an object"),
    (_doc(rules={"allreduce": {}}), "unknown collective 'allreduce'"),
    (_doc(**_rules([[None, "ring"]], kind="gpu")), "unknown array kind 'gpu'"),
    (_doc(**_rules([])), "non-empty list"),
    (_doc(**_rules([[8, "ring", 1]])), "rules.all_reduce.plain[0] must be [up_to, algorithm]"),
    (_doc(**_rules([[None, "ring"], [8, "direct"]])), "only the last rule may have no bound"),
    (_doc(**_rules([[64, "ring"], [8, "direct"]])), "above the previous rule's (64)"),
    (_doc(**_rules([[-1, "ring"]])), "up_to must be an integer"),
    (_doc(**_rules([[8.5, "ring"]])), "up_to must be an integer"),
    (_doc(**_rules([[None, "bitonic"]])), "all_reduce has no algorithm 'bitonic'"),
    (_doc(machine="x"), "'machine' must be an object"),
]


@pytest.mark.parametrize("doc,words", BAD, ids=[w for _, w in BAD])
def test_bad_tuning_document_names_what_is_wrong(doc, words):
    with pytest.raises(tuning.TuningError) as e:
        tuning.check(doc, "f.json")
    assert words in str(e.value) and "f.json" in str(e.value), str(e.value)


def test_bad_tuning_files(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("{not json")
    with pytest.raises(tuning.TuningError, match="not JSON"):
        tuning.load(p)
    with pytest.raises(tuning.TuningError, match="cannot be read"):
        tuning.load(tmp_path / "missing.json")


def test_a_malformed_file_fails_init_on_every_rank(tmp_path):
    """COLLECTIVES_TUNING naming a bad file: every rank raises TuningError at
    init, naming the file and what is wrong."""
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_doc(version=9)))
    r = run_mpi(2, ["-c", "import collectives as cc; cc.init()"], timeout=120,
                COLLECTIVES_TUNING=str(p), COLLECTIVES_ABORT_ON_EXCEPTION="0")
    assert r.returncode != 0
    assert r.stderr.count("TuningError") >= 2 and "'version' must be 1" in r.stderr, r.stderr[-2000:]


def _write(tmp_path, doc) -> str:
    p = tmp_path / "tuned.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_tuning_file_decides_and_fixes_the_choice(tmp_path):
    doc = _doc(ranks=3, ranks_per_host=[3], adapt=False,
               rules={"all_reduce": {"plain": [[4096, "direct"], [None, "recursive_doubling"]]}})
    r = run_mpi(3, ["tests/tuning_check.py", "use", _write(tmp_path, doc)], timeout=120)
    assert "OK use" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_fixed_choice_follows_the_kind_the_ranks_agree_on(tmp_path):
    """Adaptation off, rules that differ by array kind, and ranks whose kinds
    differ and change: the same algorithm on every rank at every call, the
    plain arrays' where the kinds differ, results right (tests/tuning_check.py)."""
    rows = {"plain": [[None, "recursive_doubling"]], "allocated": [[None, "ring"]]}
    doc = _doc(ranks=3, ranks_per_host=[3], adapt=False, rules={"all_reduce": rows})
    r = run_mpi(3, ["tests/tuning_check.py", "kinds", _write(tmp_path, doc)], timeout=120)
    assert "OK kinds" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_tuning_file_for_another_job_warns_once(tmp_path):
    r = run_mpi(3, ["tests/tuning_check.py", "misfit", _write(tmp_path, _doc())], timeout=120,
                COLLECTIVES_ADAPT="0")
    assert "OK misfit" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_fixed_choices_give_the_same_bits_run_after_run():
    """COLLECTIVES_DETERMINISTIC=1 (and COLLECTIVES_ADAPT=0): one algorithm at
    every call, the table's, and the same result bits in two runs."""
    hashes = []
    for env in ({"COLLECTIVES_DETERMINISTIC": "1"}, {"COLLECTIVES_ADAPT": "0"}):
        r = run_mpi(3, ["tests/tuning_check.py", "fixed"], timeout=120, **env)
        assert "OK fixed" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
        hashes.append(re.search(r"HASH (\w+)", r.stdout).group(1))
    assert hashes[0] == hashes[1]


@pytest.mark.parametrize("mode,n", [("random", 3), ("slowest", 3), ("random", 2)])
def test_ranks_agree_whatever_their_own_clocks_say(mode, n):
    """Every rank runs the same algorithm at every call though each rank's
    clock says something else, and the slowest rank's times decide
    (tests/adapt_check.py)."""
    r = run_mpi(n, ["tests/adapt_check.py", mode, "600"], timeout=180)
    assert f"OK {mode}" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


class FakeFamily:
    """A family stand-in for the chooser: ``run(name, ep, *args)`` as
    collectives.algorithm.Family's, and its algorithms' ``run(ep, *args)``
    (which the chooser calls straight for most calls) the same."""

    def __getitem__(self, name):
        return types.SimpleNamespace(run=lambda ep, *args: self.run(name, ep, *args))


def test_choice_carries_its_source():
    c = adapt.Choice("ring", "adapted")
    assert c == "ring" and c.source == "adapted" and isinstance(c, str)
    assert "adapted" in repr(c)


def test_arm_switches_only_on_clearly_faster_tries():
    """The decision rule alone: a fast try is confirmed next (after WATCH timed
    calls of the current one), two switch; a
    candidate within the margin never takes over; the old choice is tried
    again soon after a switch."""
    arm = adapt._Arm(adapt.Choice("a", "table"), ["b", "c"], 0)
    arm.due = {}  # every first try done
    arm.fresh = adapt.FIRST_RUNS
    arm.times["a"].extend([1.0] * 9)
    arm.times["b"].append(0.5)
    arm.times["c"].extend([0.95, 0.95])
    arm.decide(10)
    assert arm.current == "a" and arm.due["b"] == 10 + adapt.WATCH  # b's second try, next
    assert arm.due["c"] >= 10 + adapt.MIN_INTERVAL  # within the margin: later
    assert [arm.pick(10 + i) for i in range(adapt.WATCH)] == [("a", adapt.RUN)] * adapt.WATCH
    assert arm.watch_at == 10  # the current one's calls before the try are timed
    assert [arm.pick(10 + adapt.WATCH + i) for i in range(adapt.BURST)] == \
        [("b", adapt.WARM)] * adapt.WARMS + [("b", adapt.TIMED)] * (adapt.BURST - adapt.WARMS - 1) \
        + [("b", adapt.TRY)]
    arm.times["b"].append(0.5)
    arm.decide(13)
    assert arm.current == "b" and arm.current.source == "adapted"
    assert arm.due["a"] == 13 + adapt.CHECK_BACK
    arm.times["b"].extend([0.5] * 3)
    arm.times["a"].append(0.55)  # tried again: no better than b
    del arm.due["a"]
    arm.decide(18)
    assert arm.current == "b" and arm.due["a"] > 18


def test_arm_first_calls_then_every_algorithm_twice():
    """A new arm runs its first choice FIRST_RUNS times (the first WARMS
    untimed), then tries each other algorithm, a try being BURST calls in a
    row (the first WARMS untimed)."""
    arm = adapt._Arm(adapt.Choice("a", "table"), ["b", "c"], 0)
    assert [arm.pick(i) for i in range(adapt.FIRST_RUNS)] == \
        [("a", adapt.WARM)] * adapt.WARMS + [("a", adapt.RUN)] * (adapt.FIRST_RUNS - adapt.WARMS)
    assert arm.pick(adapt.FIRST_RUNS) == ("b", adapt.WARM)


@pytest.mark.parametrize("n", [3, 4])
def test_rank_order_algorithms_give_the_same_bits(n):
    """docs/algorithms.md, "Reproducible bits": the table of which algorithms
    give numpy's rank-order bits (tests/order_check.py)."""
    r = run_mpi(n, ["tests/order_check.py"], timeout=180)
    assert "OK" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_choice_copies_and_pickles():
    import copy
    import pickle
    c = adapt.Choice("ring", "tuning", "why")
    for d in (copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert d == "ring" and d.source == "tuning" and d.why == "why"
    assert json.dumps({"a": c}) == '{"a": "ring"}'


@pytest.mark.parametrize("one_clock", [True, False])
def test_a_figure_spans_only_consecutive_timed_calls(monkeypatch, one_clock):
    """Every call costs one tick; whatever calls the chooser leaves untimed
    between two timed ones, each figure it keeps is one tick a call (a run
    that spanned the untimed calls would count their time too)."""
    now = [0.0]

    class Family(FakeFamily):
        def run(self, name, ep, *args):
            now[0] += 1.0

    monkeypatch.setitem(FAMILIES, "broadcast", Family())
    where = selection.Where(2, True, True, False, True, 2)
    algs = ["direct", "binomial", "one_copy"]
    reads = [0]

    def clock():
        reads[0] += 1
        return now[0]

    ch = adapt.Chooser(where, {"broadcast": algs}, None, True, one_clock=one_clock, clock=clock)
    calls = 5000
    for _ in range(calls):
        ch.run("broadcast", 1 << 20, "allocated", False, None, (), lambda ep, vec: None)
    arm = next(iter(ch.classes["broadcast", 21].arms.values()))
    figures = [t for a in algs for t in arm.times[a]]
    assert len(figures) >= 3 * 2 and all(t == pytest.approx(1.0) for t in figures), figures
    assert reads[0] < calls  # two reads a timed call: most calls were left untimed


@pytest.mark.parametrize("base", ["sync", "ahead"])
@pytest.mark.parametrize("one_clock", [True, False])
def test_tries_see_what_a_run_ahead_algorithm_costs_once_its_slots_fill(monkeypatch, one_clock,
                                                                       base):
    """A run-ahead algorithm (a root that fills its peers' slots and leaves)
    is fast for its first calls in a row and slow once the slots are full;
    a synchronous one pays for the backlog the other left at its first call.
    Each try, and the first calls of the first choice, start from an
    agreement and time only the calls after the slots have filled, so the
    default runs the synchronous algorithm, whichever the table named,
    which tries of one warm call and two timed ones did not."""
    now = [0.0]
    state = {"last": None, "row": 0, "agreements": 0, "before_try": 0}
    FILL = 3  # the run-ahead one is fast for this many calls in a row (then its slots are full)

    class Family(FakeFamily):
        def run(self, name, ep, *args):
            row = state["row"] + 1 if state["last"] == name else 1
            if name == "ahead":
                cost = 0.2 if row <= FILL else 2.0
            else:
                cost = 3.0 if (state["last"] == "ahead" and row == 1) else 1.0
            state["last"], state["row"] = name, row
            now[0] += cost

    def agree(ep, vec):
        state["agreements"] += 1
        if len(vec) == 1:
            state["before_try"] += 1

    monkeypatch.setitem(FAMILIES, "gather", Family())
    where = selection.Where(4, True, True, False, True, 4)
    ch = adapt.Chooser(where, {"gather": ["sync", "ahead"]}, None, True, one_clock=one_clock,
                       clock=lambda: now[0])
    ch.base = lambda call, nbytes, kind="plain": adapt.Choice(base, "table")
    ch.history = []
    for _ in range(3000):
        ch.run("gather", 1 << 20, "allocated", False, None, (), agree)
    ran = [name for _, name in ch.history]
    assert ran.count("sync") > 0.9 * len(ran), (ran.count("ahead"), len(ran))
    assert ch.current("gather", 1 << 20, "allocated") == "sync"
    if base == "sync":  # every try started from an agreement, and the first calls
        tries, left = divmod(ran.count("ahead"), adapt.BURST)
        assert state["before_try"] == tries + 1 and tries >= 2 and left == 0
