"""The default choice of a communicator: the selection table, a tuning file,
and adaptation at run time (docs/algorithms.md, "How the default is chosen").

``algorithm=None`` starts from the tuning file's rule where one is loaded
and fits, else from the built-in table (selection.py).  With adaptation on
(the default; ``COLLECTIVES_ADAPT=0`` or ``COLLECTIVES_DETERMINISTIC=1``
turn it off), each (collective, size class, form) keeps what its calls
cost and moves to another algorithm when that one is clearly faster:

- A size class is the sizes from 2^(b-1) to 2^b - 1 bytes; the form is the
  array kind ("plain", "allocated", "device") and whether the call is in
  place, as every rank passed since the last agreement ("plain", not in
  place, where they differ).  Each form has its own measurements (an
  in-place all_to_all and an out-of-place one favour different algorithms).
- The current algorithm runs its first ``FIRST_RUNS`` calls; then every
  other offered algorithm is tried ``FIRST_TRIES`` times, each try after
  ``WATCH`` timed calls of the current one.  A try is
  ``BURST`` calls in a row of which all but the first ``WARMS`` are timed,
  and the current one's first calls are timed as one.  It starts from a
  small all-reduce, so that no rank still owes work to calls before it (a
  root behind on what its peers ran ahead into), and its untimed calls fill
  what the algorithm fills (a root that runs ahead into its peers' slots
  is fast until they are full): the timed calls see the state its own
  calls leave, which a try of one warm call and two timed ones did not
  (docs/algorithms.md).  After that each other algorithm
  is tried again now and then: the closer it came to the current one, the
  sooner (a close one every ``MIN_INTERVAL`` calls times the number of
  others, or more where an agreement would otherwise cost over
  ``AGREE_SHARE`` of the calls' time; a slow one rarely, so that trying
  costs about ``BUDGET`` of the time; at most ``MAX_INTERVAL`` calls apart),
  so that a machine whose speed changes is followed.  Only the tries and
  the ``WATCH`` calls before each are timed; the others just run.  A call
  that runs compiled (a small one's plan, Communicator._small_call) is
  tried compiled too, and the stretches of timed calls that need no
  agreement run as compiled calls that time themselves (``_Class.sync``,
  ``_Class.absorb``).
- After each try the ranks agree on the facts: one small all-reduce (max)
  of the timed calls' clock readings and of the array kinds.  Each run of
  calls of one algorithm (the current one's calls before a try, a try's
  timed calls; an untimed call between two ends a run) gives one figure,
  the median of its timed calls (one call that other processes held up,
  or one lucky call, does not move it):
  where every rank reads one clock (one kernel: transports/hosts.py,
  ``Hosts.one_clock``), the time from one call's last rank's end (or,
  where later, the next call's last rank's start) to the next call's last
  rank's end, which counts what ranks that run ahead into the next call
  cost the others, and not a pause between calls; else the longest
  rank's own time.  Every
  rank then decides from the same numbers, so every rank switches at the
  same call, whatever its own clock said; no call runs different
  algorithms on different ranks.
- It switches when another algorithm's median of its last ``TRIES`` tries
  is ``MARGIN`` below the current one's median of its last ``RUNS`` figures;
  a try that beats the current one is repeated, after ``WATCH`` calls of
  the current one, to confirm it, and after a switch the old choice is
  tried again ``CHECK_BACK`` calls later.

The all-reduces that agree are bookkeeping: they are not counted in
``comm.traffic``.
"""
from __future__ import annotations

import array
import collections
import os
import statistics
import time
from typing import Callable, Optional

import numpy as np

from . import selection
from .families import FAMILIES

SOURCES = ("table", "tuning", "adapted")
ADAPT_ENV = "COLLECTIVES_ADAPT"
DETERMINISTIC_ENV = "COLLECTIVES_DETERMINISTIC"

MARGIN = 0.10        # another algorithm must be this much faster to take over
BUDGET = 0.005       # of the calls' time spent trying slower algorithms
MIN_INTERVAL = 32    # calls per try, at least, all the other algorithms together
MAX_INTERVAL = 1 << 16  # and at most
TRIES = 3            # an algorithm's estimate: the mean of its last tries
RUNS = 9             # the current one's: the median of its last calls
FIRST_TRIES = 2      # tries of every other algorithm after the first choice's first calls
WATCH = 8            # calls of the current one timed before each try
CHECK_BACK = WATCH   # calls after a switch before the old choice is tried again
BURST = 8            # calls of a try in a row, of which
WARMS = 4            # the first ones warm it up, untimed
KEEP = WATCH + BURST + 2  # calls' times shared at an agreement, at most
FIRST_RUNS = BURST   # calls of a new current one before any try, started as a try is
RUN, WARM, TIMED, TRY = 0, 1, 2, 3  # what a call is (_Arm.pick)
AGREE_SHARE = 0.003  # of the calls' time spent agreeing, at most (tries spaced out)
AGREE_KIND_EVERY = 64  # calls between agreements on the kind, adaptation off, at least
_KIND = {k: i for i, k in enumerate(selection.KINDS)}
_FORMS = 2 * len(_KIND)  # form codes: the kind's index, + len(KINDS) in place
_NONE = (_FORMS, -1)      # (lowest, highest) form code before any call
_PLAIN = _KIND["plain"]   # the form code of plain arrays out of place
_PLAIN_IN = _PLAIN + len(_KIND)  # and in place (a compiled all_gather takes both)


def flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip() not in ("0", "false", "no", "off")


class Choice(str):
    """An algorithm's name, with where the choice came from: ``source`` is
    "table" (the built-in selection table), "tuning" (a tuning file) or
    "adapted" (measured here at run time); ``why``: the table row's reason."""

    source: str
    why: str

    def __new__(cls, name: str, source: str, why: str = ""):
        c = super().__new__(cls, name)
        c.source, c.why = source, why
        return c

    def __repr__(self) -> str:
        return f"Choice({str(self)!r}, source={self.source!r})"

    def __getnewargs__(self):  # copy and pickle
        return str(self), self.source, self.why


def size_class(nbytes: int) -> int:
    return int(nbytes).bit_length()


class _Arm:
    """What one (collective, size class, kind) knows: the algorithm it runs,
    the others it tries, their recent per-call times (slowest rank's)."""

    def __init__(self, first: Choice, others: list[str], now: int, family=None):
        self.family = family
        self.current = first
        self.base = first
        self.times = {a: collections.deque(maxlen=RUNS) for a in [str(first)] + others}
        # each other algorithm's first FIRST_TRIES tries, after the first
        # choice's first FIRST_RUNS calls
        self.due = {a: now + i for i, a in enumerate(others)}
        self.burst: Optional[tuple[str, int]] = None  # a try under way: (name, calls left)
        self.name = str(first)  # the current algorithm's name, as a plain str
        # its Algorithm.run, which most calls call straight
        self.run = family[self.name].run if family is not None else None
        self.fresh = 0          # its calls since it became the current one
        self.next_at = 0        # the earliest due call (0: look)
        self.watch_at = 0       # calls from here on are timed (WATCH before next_at)
        self.confirms: dict[str, int] = {}  # tries again at once, to confirm a fast one

    def pick(self, count: int) -> tuple[str, int]:
        """The algorithm call ``count`` runs, and what it is: RUN (the current
        one), WARM (a try's first WARMS calls, untimed), TIMED (its next ones)
        or TRY (a try's last, after which the ranks agree and ``decide`` puts
        it back on the schedule).  A try is BURST calls in a row, so that it is timed in the
        state its own calls leave (caches, pages), not the current one's.
        The current algorithm's first FIRST_RUNS calls come before any try,
        the first WARMS of them untimed, as a try's are."""
        if self.burst is not None:
            a, i = self.burst
            self.burst = (a, i + 1) if i + 1 < BURST else None
            return a, (WARM if i < WARMS else TIMED if i + 1 < BURST else TRY)
        if self.fresh < FIRST_RUNS:
            self.fresh += 1
            return self.name, (WARM if self.fresh <= WARMS else RUN)
        self.look(count)
        if self.next_at <= count:  # a try is due
            a = min(self.due, key=lambda x: (self.due[x], x))
            del self.due[a]
            self.burst = (a, 1)
            return a, WARM
        return self.name, RUN

    def look(self, count: int) -> None:
        """Past ``next_at`` (0 after a decision), find the next due try:
        ``next_at`` (at most ``count`` where one is due now) and
        ``watch_at``, WATCH calls before it."""
        if count >= self.next_at:
            self.next_at = min(self.due.values()) if self.due else 1 << 62
            self.watch_at = self.next_at - WATCH

    def segment(self, count: int) -> Optional[tuple[str, int, int]]:
        """The calls from ``count`` on that run one algorithm and need no
        agreement, as ``pick`` will name them: (its name, the count they
        end before, the count from which they are timed), or None where the
        call ``count`` needs Python's (a try's first call, which starts from
        an agreement, and its last, which ends in one; a new current one's
        first; a look after a decision).  What compiled calls run
        (_Class.sync)."""
        if self.burst is not None:
            a, i = self.burst
            return (a, count + BURST - 1 - i, count) if i < BURST - 1 else None
        if self.fresh < FIRST_RUNS:
            return (self.name, count + FIRST_RUNS - self.fresh, count) if self.fresh else None
        self.look(count)
        return (self.name, self.next_at, self.watch_at) if count < self.next_at else None

    def estimate(self, a: str) -> Optional[float]:
        """The current algorithm's median over its last RUNS figures (one a
        run of calls before a try); another's mean over its last TRIES tries
        (None before FIRST_TRIES)."""
        t = self.times[a]
        if a == self.name:
            return statistics.median(t) if t else None
        return statistics.fmean(list(t)[-TRIES:]) if len(t) >= FIRST_TRIES else None

    def decide(self, count: int, agree_s: float = 0.0) -> None:
        """After an agreement (the calls so far: ``count``; ``agree_s``: how
        long an agreement takes): switch where another is clearly faster, and
        schedule the next try of every algorithm not scheduled."""
        cur = self.estimate(self.name)
        best, best_t = None, None
        for a in self.times:
            t = self.estimate(a)
            if a != self.name and t is not None and (best_t is None or t < best_t):
                best, best_t = a, t
        if cur is not None and best is not None and best_t < cur * (1 - MARGIN):
            old = self.name
            self.current = self.base if best == self.base else Choice(best, "adapted")
            self.name = best
            if self.family is not None:
                self.run = self.family[best].run
            self.fresh = 0
            self.due.pop(best, None)
            self.due[old] = count + CHECK_BACK
            cur = best_t
        others = len(self.times) - 1
        # calls between two tries, at least: MIN_INTERVAL, and enough that the
        # agreements (two a try: the one it starts from, the one after it) cost
        # at most AGREE_SHARE of the calls' time
        least = MIN_INTERVAL if cur is None else \
            max(MIN_INTERVAL, int(2 * agree_s / (AGREE_SHARE * max(cur, 1e-9))))
        for a in self.times:
            if a == self.name or a in self.due:
                continue
            t, times = self.estimate(a), self.times[a]
            if t is None or cur is None:  # its first tries, or the current one's first calls
                self.due[a] = count
            elif times[-1] < cur * (1 - MARGIN) and self.confirms.get(a, 0) < TRIES - 1:
                self.due[a] = count  # its last try beat the current: confirm it
                self.confirms[a] = self.confirms.get(a, 0) + 1
            else:
                self.confirms.pop(a, None)
                ratio = t / max(cur, 1e-12)
                gap = int((ratio - 1) * others * BURST / BUDGET) if ratio > 1 else 0
                self.due[a] = count + min(MAX_INTERVAL, max(least * others, gap))
        # no try before WATCH calls of the current one, timed: every try is
        # compared with the current one's calls just before it, not only
        # with its first calls (cold: on 2 x 2 hosts an all_gather of 64 B
        # took 109-174 us in its first run, then 35-40, and a slower
        # algorithm's tries beat that run and took over)
        for a, at in self.due.items():
            self.due[a] = max(at, count + WATCH)
        self.next_at = self.watch_at = 0  # the schedule changed: look again


SLOTS = 16  # calls a compiled segment times, at most (transports/_native.c, LANE_SLOTS)
_NO_TIMES = array.array("q", [0]) * (2 * SLOTS)  # a start and an end a slot
_NEVER = 1 << 62


class _Class:
    """One (collective, size class): its calls so far, the form the ranks
    last agreed on (the array kind, and whether in place), the calls since
    that agreement, and an arm per form.  ``cells``: words that a compiled
    small call reads and writes (transports/_native.c, ``mpi_lane``): the
    count; the count below which calls of plain arrays out of place run
    compiled (0: none do); the identity (``id(run)``) of the algorithm they
    run; the count from which they are timed; then the start and end
    (nanoseconds of time.perf_counter's clock) of each timed one, SLOTS at
    most.  ``seg``: (arm, algorithm, first count) of the calls that the
    cells let run compiled (``sync``) until Python has taken them in
    (``absorb``)."""

    def __init__(self):
        self.cells = array.array("q", [0, 0, 0, _NEVER]) + _NO_TIMES
        self.seg: Optional[tuple] = None
        self.form: Optional[int] = None  # the form the ranks last agreed on
        # (adaptation off: the array kind's index in selection.KINDS)
        self.lo, self.hi = _NONE   # this rank's form codes since the last agreement
        # (arm, algorithm, call count, start, end) of the timed calls since
        # the last agreement
        self.recent: collections.deque = collections.deque(maxlen=KEEP)
        self.arms: dict[str, _Arm] = {}
        self.arm: Optional[_Arm] = None  # the agreed form's
        self.next_agree = 0
        self.agreed_count = 0    # adaptation off: the count and clock at the last agreement
        self.agreed_at = 0.0
        self.last_agree_s = 0.0  # this rank's time in the last agreement
        self.agree_s = 0.0       # the longest rank's, as last agreed

    @property
    def count(self) -> int:
        return self.cells[0]

    @count.setter
    def count(self, n: int) -> None:
        self.cells[0] = n

    def sync(self, keeping: bool, timing: bool = True) -> None:
        """Set ``cells`` from the current arm, where calls of plain arrays
        (out of place, or in place: an all_gather's) were noted since the
        last agreement (none while ``keeping`` a
        history of each call's algorithm): compiled calls run the arm's
        ``segment``, timed where ``timing`` (the chooser's clock is
        time.perf_counter's), else its current algorithm untimed up to
        ``watch_at``."""
        self.absorb()
        arm, c = self.arm, self.cells
        if arm is not None and not keeping and (self.lo <= _PLAIN <= self.hi or
                                                 self.lo <= _PLAIN_IN <= self.hi):
            seg = arm.segment(c[0]) if timing and arm.family is not None else None
            if seg is None:
                c[1], c[2], c[3] = arm.watch_at, id(arm.run), _NEVER
            else:
                name, c[1], c[3] = seg
                c[2] = id(arm.family[name].run)
                c[4:] = _NO_TIMES
                self.seg = (arm, name, c[0])
        else:
            c[1] = 0

    def absorb(self) -> None:
        """Take in the calls that ran compiled in the segment ``sync`` set:
        the arm's state moves on as ``pick`` would have moved it call by
        call, and the calls with times join ``recent``."""
        seg = self.seg
        if seg is None:
            return
        self.seg = None
        arm, name, start = seg
        c = self.cells
        first = c[3]
        for count in range(start, c[0]):
            a, what = arm.pick(count)
            i = 4 + 2 * (count - first)
            if a == name and 4 <= i < len(c):
                self.recent.append((arm, a, count, c[i] * 1e-9, c[i + 1] * 1e-9, what != WARM))

    def note(self, form: int) -> None:
        if form < self.lo:
            self.lo = form
        if form > self.hi:
            self.hi = form


class _Compiled:
    """``family.run``, by ``compiled(name, args)`` where that runs it (Chooser.run)."""

    __slots__ = ("family", "compiled")

    def __init__(self, family, compiled):
        self.family, self.compiled = family, compiled

    def run(self, name: str, ep, *args) -> None:
        if not self.compiled(name, args):
            self.family.run(name, ep, *args)


class Chooser:
    """A communicator's default choices.  ``where``: its ranks and transport
    (selection.Where); ``offered``: call -> the algorithms offered here;
    ``tuning``: a fitting tuning file or None; ``adapt``: adaptation on;
    ``one_clock``: every rank reads the same clock (one machine), so that
    calls are timed from the last rank's start to the last rank's end;
    elsewhere by the longest of the ranks' own times.  ``clock``: the
    clock.  ``run`` takes ``agree(ep, vec)``: the all-reduce (max, in place)
    of a float64 vector among the ranks, on the call's endpoint."""

    def __init__(self, where: selection.Where, offered: dict, tuning=None,
                 adapt: bool = True, one_clock: bool = False,
                 clock: Callable[[], float] = time.perf_counter):
        self.where = where
        self.offered = offered
        self.tuning = tuning
        self.adapt = adapt and where.size > 1
        self.one_clock = one_clock
        self.clock = clock
        self._timing = clock is time.perf_counter  # compiled calls time themselves (_Class.sync)
        # calls whose choice stays the table's: the barrier but on "hier" (one
        # round, or log2 N; a few microseconds a call, which timing would add to)
        self._still = frozenset() if where.hier else frozenset({"barrier"})
        self._settled: dict = {}  # adaptation off: (call, nbytes, form) -> (class, form, name)
        self.classes: dict[tuple[str, int], _Class] = {}
        self._bases: dict = {}
        self._matters: dict = {}
        self._history: Optional[list] = None

    @property
    def history(self) -> Optional[list]:
        """(call, algorithm) of each call, appended as it starts, where kept (a list)."""
        return self._history

    @history.setter
    def history(self, h: Optional[list]) -> None:
        self._history = h
        for cls in self.classes.values():  # compiled calls keep none: they stop
            if self.adapt:
                cls.sync(h is not None, self._timing)
            elif h is not None:
                cls.cells[1] = 0

    def cells(self, call: str, nbytes: int):
        """The ``cells`` of ``call``'s size class of ``nbytes`` (``_Class``)."""
        return self._class(call, nbytes).cells

    # -- static choices -----------------------------------------------------
    def base(self, call: str, nbytes: int, kind: str = "plain") -> Choice:
        """The choice before any measurement here: the tuning file's rule,
        else the table's row (remembered)."""
        key = (call, nbytes, kind)
        c = self._bases.get(key)
        if c is None:
            if len(self._bases) > 4096:
                self._bases.clear()
            c = self._bases[key] = self._lookup(call, nbytes, kind)
        return c

    def _lookup(self, call: str, nbytes: int, kind: str) -> Choice:
        if self.tuning is not None:
            alg = self.tuning.rule(call, kind, nbytes)
            if alg is not None and alg in self.offered[call]:
                return Choice(alg, "tuning")
        r = selection.row(call, nbytes, self.where.of_kind(kind))
        return Choice(r.algorithm, "table", r.why)

    def _kind_matters(self, call: str, nbytes: int) -> bool:
        """Whether the base choice differs between array kinds at ``nbytes``."""
        m = self._matters.get((call, nbytes))
        if m is None:
            if len(self._matters) > 4096:
                self._matters.clear()
            m = self._matters[call, nbytes] = \
                len({self.base(call, nbytes, k) for k in selection.KINDS}) > 1
        return m

    def current(self, call: str, nbytes: int, kind: str = "plain") -> Choice:
        """What the next call of ``call`` on ``kind`` arrays of ``nbytes``
        runs, tries aside (``comm.choose_algorithm``)."""
        cls = self.classes.get((call, size_class(nbytes)))
        if self.adapt and call not in self._still and cls is not None:
            arm = cls.arms.get(_KIND[kind]) or cls.arms.get(_KIND[kind] + len(_KIND))
            if arm is not None and arm.current is not arm.base:
                return arm.current
        return self.base(call, nbytes, kind)

    # -- a call -------------------------------------------------------------
    def quick(self, call: str, nbytes: int, form: int):
        """Most calls while adaptation is on: far from the next try, of a
        form (``forms``) noted since the last agreement, they just run the
        current algorithm, untimed.  Its arm (``name``, ``run``), this call
        counted as run; else None, nothing counted (``run`` decides)."""
        cls = self.classes.get((call, int(nbytes).bit_length()))  # size_class
        if cls is not None and cls.lo <= form <= cls.hi:
            arm = cls.arm
            c = cls.cells
            count = c[0]
            if arm is not None and count < arm.watch_at:
                c[0] = count + 1
                if self.history is not None:
                    self.history.append((call, arm.name))
                return arm
        return None

    def settling(self, call: str, nbytes: int, calls: int) -> bool:
        """Whether adaptation of ``call`` at ``nbytes`` has more of its
        learning within the next ``calls`` calls, for any form: a try under
        way, a new choice's first calls, or a try due (a look back after a
        switch, a confirmation).  What the benchmark waits out before it
        times a default (bench/runner.py, ``learn``)."""
        cls = self.classes.get((call, int(nbytes).bit_length()))
        if not self.adapt or cls is None:
            return False
        for arm in cls.arms.values():
            if arm.burst is not None or arm.fresh < FIRST_RUNS or (
                    arm.due and min(arm.due.values()) <= cls.count + calls):
                return True
        return False

    @staticmethod
    def forms(kind: str, in_place: bool) -> int:
        """The form code of a call on ``kind`` arrays, ``in_place`` or not."""
        return _KIND[kind] + (len(_KIND) if in_place else 0)

    def run(self, call: str, nbytes: int, kind: str, in_place: bool, ep, args: tuple,
            agree: Callable[[object, np.ndarray], None], compiled=None) -> str:
        """Run ``call``'s default on ``ep`` (in the communicator's order, on
        every rank alike) for ``kind`` arrays, ``in_place`` or not; returns
        the algorithm's name.  ``compiled(name, args)``: runs an algorithm
        as the calls around this one run it (a small call's compiled plan,
        Communicator._small_call) and says whether it did, so that a try
        times what the untimed calls would run; else its ``run``."""
        form = self.forms(kind, in_place)
        family = FAMILIES[call]
        if self.adapt and call not in self._still:
            arm = self.quick(call, nbytes, form)
            if arm is not None:  # adaptation is on with 2 ranks or more
                if compiled is None or not compiled(arm.name, args):
                    arm.run(ep, *args)
                return arm.name
        if compiled is not None:
            family = _Compiled(family, compiled)
        if not self.adapt:
            # adaptation off: a choice made before, while the agreed kind holds
            k = _KIND[kind]
            hit = self._settled.get((call, nbytes, k))
            if hit is not None:
                cls, agreed, name = hit
                if cls is None or (cls.form == agreed and cls.count < cls.next_agree
                                   and cls.lo <= k <= cls.hi):
                    if cls is not None:
                        cls.count += 1
                    if self.history is not None:
                        self.history.append((call, name))
                    family.run(name, ep, *args)
                    return name
        if not self.adapt or call in self._still:
            name = self._fixed(call, nbytes, _KIND[kind], ep, agree)
            if self.history is not None:
                self.history.append((call, name))
            if not self.adapt:
                self._sync_settled(call, nbytes, _KIND[kind], name)
            family.run(name, ep, *args)
            return name
        cls = self._class(call, nbytes)
        try:
            return self._adapting(cls, call, nbytes, form, family, ep, args, agree)
        finally:
            cls.sync(self._history is not None, self._timing)

    def _adapting(self, cls: _Class, call: str, nbytes: int, form: int, family, ep,
                  args: tuple, agree) -> str:
        """``run``'s calls while adaptation is on."""
        cls.absorb()
        cls.note(form)
        if cls.form is None:
            self._agree(cls, ep, agree)
        arm = cls.arm
        if arm is None:
            first = self.base(call, nbytes, selection.KINDS[cls.form % len(_KIND)])
            others = [a for a in self.offered[call] if a != first]
            arm = cls.arm = cls.arms[cls.form] = _Arm(first, others, cls.count, FAMILIES[call])
        count = cls.count
        cls.count = count + 1
        if arm.burst is None and arm.fresh >= FIRST_RUNS:
            arm.look(count)
        if count < arm.watch_at:  # far from the next try: run, untimed
            name = arm.name
            if self.history is not None:
                self.history.append((call, name))
            family.run(name, ep, *args)
            return name
        name, what = arm.pick(count)
        if self.history is not None:
            self.history.append((call, name))
        if what == WARM and (arm.burst == (name, 1) or arm.fresh == 1):
            # a try, or a new current one, starts where every rank has finished its calls
            agree(ep, np.zeros(1))
        clock = self.clock
        t0 = clock()
        family.run(name, ep, *args)
        cls.recent.append((arm, name, count, t0, clock(), what != WARM))
        if what == TRY:
            self._agree(cls, ep, agree)
            arm.decide(cls.count, cls.agree_s)
        return name

    def _class(self, call: str, nbytes: int) -> _Class:
        """The state of ``call``'s size class of ``nbytes``, made on first use."""
        key = (call, int(nbytes).bit_length())  # size_class, on every call's path
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = _Class()
        return cls

    def steady(self, call: str, nbytes: int):
        """Adaptation off: the algorithm (an Algorithm) that a call of plain
        arrays out of place runs while the choice made before holds,
        counted as run (as ``run`` counts it); else None."""
        hit = self._settled.get((call, nbytes, _PLAIN))
        if hit is None:
            return None
        cls, agreed, name = hit
        if cls is not None:
            if not (cls.form == agreed and cls.count < cls.next_agree
                    and cls.lo <= _PLAIN <= cls.hi):
                return None
            cls.count += 1
        if self.history is not None:
            self.history.append((call, name))
        return FAMILIES[call][name]

    def _sync_settled(self, call: str, nbytes: int, k: int, name: str) -> None:
        """Adaptation off: the ``cells`` of ``call``'s size class after a
        call of kind ``k`` chose ``name``: compiled calls of plain arrays
        run it until the next agreement on the kind (where one is due)."""
        hit = self._settled.get((call, nbytes, k))
        cls = self._class(call, nbytes)
        c = cls.cells
        if hit is None or k != _PLAIN or self._history is not None:
            c[1] = 0
            return
        if hit[0] is None:  # the kind does not matter: no agreement is due
            c[1] = 1 << 62
        elif cls.form == hit[1] and cls.lo <= _PLAIN <= cls.hi:
            c[1] = cls.next_agree
        else:
            c[1] = 0
        c[2] = id(FAMILIES[call][name].run)

    def _fixed(self, call: str, nbytes: int, k: int, ep, agree) -> str:
        """Adaptation off: the base choice, for the array kind (``k``: its
        index in selection.KINDS) the ranks agreed on where the choice
        depends on it (``_agree_kind``).  Whether a call is in place does
        not enter: a rank that alternates in place and out of place calls
        on one kind of array keeps that kind's rule."""
        settled = self._settled
        if len(settled) > 4096:
            settled.clear()
        if not self._kind_matters(call, nbytes):
            name = self.base(call, nbytes)
            if not self.adapt:
                settled[call, nbytes, k] = (None, None, name)
            return name
        cls = self._class(call, nbytes)
        cls.note(k)
        if cls.count >= cls.next_agree:
            self._agree_kind(cls, ep, agree)
        cls.count += 1
        name = self.base(call, nbytes, selection.KINDS[cls.form])
        if not self.adapt:
            settled[call, nbytes, k] = (cls, cls.form, name)
        return name

    def _agree_kind(self, cls: _Class, ep, agree) -> None:
        """Adaptation off: the ranks agree on the array kind of ``cls``'s
        calls (plain where they differ), at its first call and then at most
        AGREE_SHARE of the time since (wall time, every rank's longest), and
        at least every AGREE_KIND_EVERY calls up to MAX_INTERVAL: an
        agreement meets every rank, and where ranks run ahead of each other
        it costs more than its all-reduce."""
        now = self.clock()
        vec = np.array([-cls.lo, cls.hi, cls.last_agree_s,
                        now - cls.agreed_at if cls.form is not None else 0.0])
        start = time.perf_counter()
        agree(ep, vec)
        cls.last_agree_s = time.perf_counter() - start  # shared at the next agreement
        lo, hi = int(-vec[0]), int(vec[1])
        cls.form = lo if lo == hi else 0  # plain where the ranks differ
        cls.lo, cls.hi = _NONE
        # from the same figures on every rank: the same next agreement
        calls, since, agree_s = cls.count - cls.agreed_count, float(vec[3]), float(vec[2])
        gap = int(agree_s * calls / (AGREE_SHARE * since)) if since > 0 else 0
        cls.next_agree = cls.count + min(MAX_INTERVAL, max(AGREE_KIND_EVERY, gap))
        cls.agreed_count, cls.agreed_at = cls.count, self.clock()

    def _agree(self, cls: _Class, ep, agree) -> None:
        """Share this rank's recent call times and kinds; every rank then
        holds the same times and the common form.  Each run of consecutive
        calls of one algorithm (the current one's calls before a try, a
        try's timed calls) gives one figure, the median of its timed calls:
        with one clock, by the time from the last rank's end of the call
        before (a warm one's included) or, where later, the last rank's start
        of this one, to the last rank's end of this one (what the calls cost
        one after the other, ranks that run ahead included, a pause between
        two calls not); else by the longest rank's time."""
        recent = list(cls.recent)
        m = len(recent)
        if self.one_clock:
            vec = np.empty(3 + 2 * m, np.float64)
            vec[3:3 + m] = [r[3] for r in recent]
            vec[3 + m:] = [r[4] for r in recent]
        else:
            vec = np.empty(3 + m, np.float64)
            vec[3:] = [r[4] - r[3] for r in recent]
        vec[0], vec[1], vec[2] = -cls.lo, cls.hi, cls.last_agree_s
        start = time.perf_counter()
        agree(ep, vec)
        cls.last_agree_s = time.perf_counter() - start  # shared at the next agreement
        lo, hi = int(-vec[0]), int(vec[1])
        cls.form = lo if lo == hi else 0  # plain, not in place, where the ranks differ
        cls.arm = cls.arms.get(cls.form)
        cls.agree_s = float(vec[2])
        starts, ends = vec[3:3 + m], vec[3 + m:]  # with one clock
        i = 0
        while i < m:  # each run of consecutive calls of one algorithm: one figure
            arm, name, count = recent[i][0], recent[i][1], recent[i][2]
            j = i
            while j + 1 < m and recent[j + 1][0] is arm and recent[j + 1][1] == name \
                    and recent[j + 1][2] == count + (j + 1 - i):  # no untimed call between
                j += 1
            per = []  # the run's timed calls, each as long as it held up the job
            for k in range(i, j + 1):
                if not recent[k][5]:
                    continue  # a try's warm-up: where the next call starts from
                if self.one_clock:
                    per.append(ends[k] - (max(ends[k - 1], starts[k]) if k > i else starts[k]))
                else:
                    per.append(vec[3 + k])
            if per:
                arm.times[name].append(statistics.median(per))
            i = j + 1
        cls.recent.clear()
        cls.lo, cls.hi = _NONE
