"""mpiexec command lines for the MPI at hand: MPICH's Hydra (or its simple
fork launcher, ``mpiexec.gforker``) and Open MPI's ``mpiexec`` (prterun).
The two take different words for the same things (docs/mpi.md):

=============================  ==================  =========================
                               MPICH (Hydra)       Open MPI (prterun)
=============================  ==================  =========================
more ranks than cores          (always allowed)    ``--oversubscribe``
as root                        (always allowed)    ``--allow-run-as-root``
one block's environment        ``-env VAR VALUE``  ``-x VAR=VALUE``
survivors of a death run on    ``mpiexec.gforker``  ``--enable-recovery``
=============================  ==================  =========================

``python -m collectives.launcher`` prints the launcher found and its kind.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

KINDS = ("mpich", "openmpi")
# what Open MPI's launchers say of themselves in ``--version`` (lowercased)
OPEN_MPI_WORDS = ("open mpi", "open-mpi", "openrte", "prte")


def find(name: str = "mpiexec", variable: str = "MPIEXEC") -> str:
    """``$variable`` if set; else ``name`` beside this Python (a virtual
    environment with an MPI wheel); else ``name`` on PATH (an MPI that came
    some other way).  The path beside this Python where it is nowhere, so
    that an error names where it was looked for."""
    given = os.environ.get(variable)
    if given:
        return given
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    return shutil.which(name) or str(beside)


@functools.lru_cache(maxsize=None)
def kind_of(path: str) -> str:
    """"openmpi" where ``path --version`` says Open MPI: its name, PRRTE
    (Open MPI 5) or OpenRTE (Open MPI 4, whose ``mpiexec --version`` reads
    "mpiexec (OpenRTE) 4.1.6"); else "mpich" (Hydra, and launchers that say
    nothing of themselves, as gforker does)."""
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        said = (p.stdout + p.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        return "mpich"
    return "openmpi" if any(w in said for w in OPEN_MPI_WORDS) else "mpich"


class Launcher:
    """One launcher: ``path``, its ``kind`` (KINDS; found from the launcher
    where not given) and whether the survivors of a rank's death run on
    (``keep_going``: Open MPI's --enable-recovery; MPICH's Hydra ends
    them, so there pass the path of ``mpiexec.gforker``)."""

    def __init__(self, path: str, kind: str | None = None, keep_going: bool = False):
        if kind is not None and kind not in KINDS:
            raise ValueError(f"launcher kind {kind!r}: one of {', '.join(KINDS)}")
        self.path = str(path)
        self._kind = kind
        self.keep_going = keep_going

    @property
    def kind(self) -> str:
        if self._kind is None:
            self._kind = kind_of(self.path)
        return self._kind

    def flags(self) -> list[str]:
        """What comes before the first block: Open MPI's words for more
        ranks than cores and for running as root (which Hydra allows
        anyway), and for survivors that run on."""
        if self.kind != "openmpi":
            return []
        f = ["--oversubscribe"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            f.append("--allow-run-as-root")
        if self.keep_going:
            f.append("--enable-recovery")
        return f

    def env_words(self, env: Mapping[str, str]) -> list[str]:
        """One block's own environment variables, in the launcher's words."""
        words: list[str] = []
        for k, v in env.items():
            words += ["-x", f"{k}={v}"] if self.kind == "openmpi" else ["-env", k, str(v)]
        return words

    def command(self, blocks: Iterable[tuple[int, Mapping[str, str], list[str]]]) -> list[str]:
        """An MPMD command: each block ``(ranks, environment, argv)``."""
        cmd = [self.path, *self.flags()]
        for i, (n, env, argv) in enumerate(blocks):
            if i:
                cmd.append(":")
            cmd += ["-n", str(n), *self.env_words(env), *argv]
        return cmd

    def __call__(self, n: int, argv: list[str], **env: str) -> list[str]:
        """``mpiexec -n n argv...`` (``env``: variables for these ranks alone,
        where the launcher's environment is not enough)."""
        return self.command([(n, env, argv)])

    def __repr__(self) -> str:
        return f"Launcher({self.path!r}, kind={self.kind!r})"


def default(keep_going: bool = False) -> Launcher:
    """The launcher of this environment ($MPIEXEC, beside this Python, or on
    PATH).  ``keep_going``: one whose survivors of a death run on: MPICH's
    gforker ($GFORKER, or beside the launcher), or Open MPI's launcher with
    --enable-recovery."""
    path = find()
    if not keep_going:
        return Launcher(path)
    if kind_of(path) == "openmpi":
        return Launcher(path, "openmpi", keep_going=True)
    beside = Path(path).with_name("mpiexec.gforker")
    given = os.environ.get("GFORKER")
    if given or beside.exists():
        return Launcher(given or str(beside), "mpich")
    return Launcher(find("mpiexec.gforker", "GFORKER"), "mpich")


if __name__ == "__main__":
    for name, la in (("mpiexec", default()), ("survivors run on", default(keep_going=True))):
        print(f"{name}: {la.path} ({la.kind}) {' '.join(la.flags())}".rstrip())
