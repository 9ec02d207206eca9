"""A small mutation run: plant one realistic bug at a time in a copy of the
repository, run the tests that should catch it, and report which did.

    make mutants                       # every mutant (about 90 s on 2 cores)
    python tests/mutants.py --list     # the mutants and their test selections
    python tests/mutants.py NAME ...   # only these
    python tests/mutants.py --baseline # each selection on the tree as it is: all must pass

Each mutant is found by the text it changes (``old`` must occur exactly once
in its file), not by a line number, so the list survives refactoring: a
mutant whose text is gone is reported as STALE and counts as not caught, so
that a refactor cannot silently shrink the run.  The mutants themselves are
in ``tests/mutant_list.py``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutant_list import MUTANTS, Mutant  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f and (ROOT / f).is_file()]


def copy_tree(dst: Path) -> None:
    """The repository's files (tracked and untracked-not-ignored) and its built
    extensions, which git ignores."""
    for f in tracked_files() + [str(p.relative_to(ROOT)) for p in ROOT.glob("collectives/*.so")]:
        target = dst / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, target)


def apply(tree: Path, m: Mutant) -> str | None:
    """Plant ``m`` in ``tree``; None, or why it could not be planted."""
    path = tree / m.file
    if not path.exists():
        return f"{m.file} does not exist"
    text = path.read_text()
    hits = text.count(m.old)
    if hits != 1:
        return f"the text to change occurs {hits} times in {m.file}"
    path.write_text(text.replace(m.old, m.new))
    return None


def end_leftovers(pgid: int, tree: Path) -> None:
    """SIGKILL what a selection left running: its process group, and the
    processes that work in its copy of the tree (MPICH's launcher puts each
    rank in a session of its own, out of the group's reach), by pid."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cwd = os.readlink(d / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        if cwd == str(tree) or cwd.startswith(f"{tree}/"):
            try:
                os.kill(int(d.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_one(m: Mutant, base: Path, timeout: float,
            plant: bool = True) -> tuple[str, float, str]:
    """(verdict, seconds, detail): CAUGHT, SURVIVED, STALE or TIMEOUT.
    ``plant`` False: the selection on the tree as it is (``--baseline``)."""
    tree = base / m.name
    shutil.copytree(base / "_clean", tree, symlinks=True)
    try:
        why = apply(tree, m)
        if why:
            return "STALE", 0.0, why
        if not plant:
            shutil.rmtree(tree)
            shutil.copytree(base / "_clean", tree, symlinks=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
        env.setdefault("COLLECTIVES_TIMEOUT", "20")
        env.update(dict(m.env))
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *m.tests]
        t0 = time.monotonic()
        # a session of its own: on a timeout the whole group goes (pytest, the
        # mpiexec it started and the ranks), not pytest alone
        p = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            # a hang the tests did not turn into a failure counts as caught
            # only if the selection itself has a timeout; here it did not end
            return "TIMEOUT", time.monotonic() - t0, "the selection did not end"
        finally:
            end_leftovers(p.pid, tree)
        dt = time.monotonic() - t0
        last = (out.strip().splitlines() or [""])[-1]
        if p.returncode == 0:
            return "SURVIVED", dt, last
        if p.returncode in (2, 3, 4, 5):  # interrupted, internal error, usage, no tests
            return "STALE", dt, f"pytest exit {p.returncode}: {last}\n{out[-800:]}"
        return "CAUGHT", dt, last
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="run only these mutants")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--baseline", action="store_true",
                    help="run each selection on the tree without its bug: every one must "
                         "pass (else its CAUGHT means nothing)")
    ap.add_argument("--timeout", type=float, default=420,
                    help="seconds one mutant's test selection may run")
    ap.add_argument("--min-score", type=float, default=0.9,
                    help="exit non-zero below this fraction caught")
    a = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not a.names or m.name in a.names]
    unknown = set(a.names) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutants: {sorted(unknown)}")
    if a.list:
        for m in chosen:
            env = "".join(f"{k}={v} " for k, v in m.env)
            print(f"{m.name:28} [{m.kind}] {m.file}: {m.why}\n{'':30}tests: {env}"
                  f"{' '.join(m.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="collectives-mutants-") as d:
        base = Path(d)
        copy_tree(base / "_clean")
        results = []
        t_all = time.monotonic()
        for m in chosen:
            verdict, dt, detail = run_one(m, base, a.timeout, plant=not a.baseline)
            if a.baseline:  # the selection passed (SURVIVED) or failed (CAUGHT) unplanted
                verdict = {"SURVIVED": "PASSED", "CAUGHT": "FAILED"}.get(verdict, verdict)
            results.append((m, verdict))
            print(f"{verdict:8} {dt:6.0f}s  {m.name:28} [{m.kind}]  {detail.splitlines()[0] if detail else ''}",
                  flush=True)
            if verdict == "STALE":
                print("         " + detail.replace("\n", "\n         "), flush=True)
    if a.baseline:
        bad = [m.name for m, v in results if v != "PASSED"]
        print(f"\nselections that pass without their bug: {len(results) - len(bad)}/"
              f"{len(results)} in {time.monotonic() - t_all:.0f} s")
        if bad:
            print("failing without their bug: " + ", ".join(bad))
        return 1 if bad else 0
    caught = sum(v == "CAUGHT" for _, v in results)
    print(f"\nmutants caught: {caught}/{len(results)} = {caught / max(1, len(results)):.0%} "
          f"in {time.monotonic() - t_all:.0f} s")
    for kind in sorted({m.kind for m in chosen}):
        ks = [v for m, v in results if m.kind == kind]
        print(f"  {kind:12} {sum(v == 'CAUGHT' for v in ks)}/{len(ks)}")
    missed = [m.name for m, v in results if v != "CAUGHT"]
    if missed:
        print("not caught: " + ", ".join(missed))
    return 0 if caught >= a.min_score * len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
