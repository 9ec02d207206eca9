"""The planted bugs of ``make mutants`` (tests/mutants.py): each one a
realistic slip, found by the text it changes, with the tests that should
catch it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    kind: str          # what it breaks: collectives, transports, trainer, bench, errors
    file: str
    old: str           # must occur exactly once in file
    new: str
    tests: tuple       # pytest arguments: the selection that should catch it
    why: str = ""


MUTANTS: list[Mutant] = []
