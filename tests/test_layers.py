"""The layers hold: no import cycles inside transports/ or collectives/,
and the lower layer (transports) never imports the upper (collectives).

Read from the source with ast, not by importing: every import counts --
module level, inside functions, under ``if TYPE_CHECKING:`` -- relative or
absolute (``transports.x``, ``collectives.x``).  ``from . import x`` where x
is a submodule imports x; importing a package imports its ``__init__``, and
importing a module inside a package imports the package's ``__init__`` first
(Python runs it), so both count as edges."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transports", "collectives")


def modules(pkg: str) -> dict[str, Path]:
    """Dotted name -> file, for every module under package ``pkg``: its
    Python modules, and its C extensions (by their source; they import
    nothing of ours)."""
    out = {}
    for f in sorted((ROOT / pkg).rglob("*.c")):
        out[".".join(f.relative_to(ROOT).with_suffix("").parts)] = f
    for f in sorted((ROOT / pkg).rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def is_package(name: str, known: dict[str, Path]) -> bool:
    return name in known and known[name].name == "__init__.py"


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in it."""
    pkg = name if is_package(name, known) else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str, explicit: bool = True) -> None:
        """``target`` and the packages above it, which Python runs first; of
        those, the ones above ``name`` itself are running already (no edge)
        unless ``target`` is one of them, named for its own attributes."""
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            own = explicit and m == target
            if m in known and m != name and (own or not name.startswith(m + ".")):
                found.add(m)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            # from pkg import submodule: the submodule; any other name: pkg itself
            add(mod, explicit=len(subs) < len(node.names) or not is_package(mod, known))
            for m in subs:
                add(m)
    return found


def graph(pkgs=PACKAGES) -> dict[str, set[str]]:
    known: dict[str, Path] = {}
    for p in PACKAGES:
        known.update(modules(p))
    return {m: imports(m, f, known) if f.suffix == ".py" else set()
            for m, f in known.items() if m.split(".")[0] in pkgs}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``g`` (its modules in order, the first repeated at the
    end), restricted to the modules of ``g``; None if there is none."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(g, WHITE)
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        stack.append(m)
        for n in sorted(g[m]):
            if n not in g:
                continue
            if colour[n] == GREY:
                return stack[stack.index(n):] + [n]
            if colour[n] == WHITE:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        colour[m] = BLACK
        return None

    for m in sorted(g):
        if colour[m] == WHITE:
            c = visit(m)
            if c:
                return c
    return None


def check_no_cycle(pkg: str) -> None:
    cycle = find_cycle(graph((pkg,)))
    assert cycle is None, f"import cycle in {pkg}/: " + " -> ".join(cycle)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_import_cycles(pkg):
    """Nothing under transports/ or collectives/ imports a module that
    imports it back."""
    check_no_cycle(pkg)


def test_transports_never_import_collectives():
    up = {m: sorted(n for n in deps if n.split(".")[0] == "collectives")
          for m, deps in graph(("transports",)).items()}
    assert not {m: d for m, d in up.items() if d}, up


def test_the_checks_see_what_they_must():
    """The graph sees every form of import, and a cycle through them."""
    g = graph()
    assert "transports.base" in g["transports.mpi"]  # from .base import ...
    assert "transports.shm" in g["transports.cuda"]  # from .shm import ShmTransport
    assert "transports.shm.slots" in g["transports.cuda"]  # from .shm.slots import ...
    assert "transports.shm" in g["transports"]  # from .shm import ... inside a function
    assert "transports" in g["collectives.communicator"]  # from transports import ...
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
