"""What a process sets up once, beside its communicators: the settings that
``init`` reads from the environment, the hook that ends the whole job on an
uncaught exception, and the communicators still open, closed at exit."""
from __future__ import annotations

import atexit
import os
import sys
import weakref
from typing import Any

DEFAULT_TIMEOUT = 300.0


def settings(timeout: float | None, debug: bool | None) -> tuple[float, bool]:
    """``init``'s timeout and debug flag: the arguments where given, else
    $COLLECTIVES_TIMEOUT (default 300 s) and $COLLECTIVES_DEBUG (on unless
    empty or 0); a ValueError for a timeout that is not a positive number."""
    if debug is None:
        debug = os.environ.get("COLLECTIVES_DEBUG", "0") not in ("", "0")
    if timeout is None:
        env = os.environ.get("COLLECTIVES_TIMEOUT") or str(DEFAULT_TIMEOUT)
        try:
            timeout = float(env)
        except ValueError:
            raise ValueError(f"init: COLLECTIVES_TIMEOUT must be a number of seconds, "
                             f"got {env!r}") from None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"init: timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout), bool(debug)


def tuning(path):
    """``init``'s tuning file, checked (collectives/tuning.py): ``path``
    where given, else $COLLECTIVES_TUNING; None where neither is."""
    from . import tuning as t
    if path is None:
        path = os.environ.get(t.ENV) or None
    return None if path is None else t.load(path)


def adapting(tuned) -> bool:
    """Whether the default adapts at run time (collectives/adapt.py): on
    unless $COLLECTIVES_ADAPT is 0, $COLLECTIVES_DETERMINISTIC is 1, or the
    tuning file in use says ``"adapt": false``."""
    from .adapt import ADAPT_ENV, DETERMINISTIC_ENV, flag
    if flag(DETERMINISTIC_ENV, False) or not flag(ADAPT_ENV, True):
        return False
    return tuned is None or tuned.adapt


def abort_on_uncaught(MPI) -> None:
    """An exception that no code catches on one rank ends the whole job
    (MPI_Abort) instead of leaving the others waiting for it until their
    timeout; COLLECTIVES_ABORT_ON_EXCEPTION=0 turns this off.  Installed once,
    in front of whatever sys.excepthook was (which still prints the error)."""
    if getattr(sys.excepthook, "_collectives", False):
        return
    if os.environ.get("COLLECTIVES_ABORT_ON_EXCEPTION", "1") in ("0", ""):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        world = MPI.COMM_WORLD
        if MPI.Is_initialized() and not MPI.Is_finalized() and world.Get_size() > 1:
            sys.stderr.write(f"collectives: uncaught {kind.__name__} on rank {world.Get_rank()}: "
                             "aborting the job (MPI_Abort); set "
                             "COLLECTIVES_ABORT_ON_EXCEPTION=0 to let the other ranks wait\n")
            sys.stderr.flush()
            drop_mpi_files()
            world.Abort(1)
    hook._collectives = True
    sys.excepthook = hook


# the files an MPI library keeps in /dev/shm while its job runs and removes in
# MPI_Finalize, which MPI_Abort skips: MPICH's (one a host, which every rank
# on it maps) and Open MPI's sm BTL's (one a rank, sm_segment.HOST.UID.JOB.RANK)
MPI_FILES = ("mpich_shm_", "sm_segment.")


def drop_mpi_files(shm: str = "/dev/shm") -> list[str]:
    """Unlink the MPI library's files in ``shm`` that this process maps, and
    for Open MPI's those of the other ranks of its job on this host: called
    before MPI_Abort, which leaves them behind.  The mappings stay valid
    until the processes end.  Returns the names unlinked."""
    try:
        with open("/proc/self/maps") as f:
            mine = {line.split(shm + "/", 1)[1].split()[0] for line in f if shm + "/" in line}
        here = os.listdir(shm)
    except OSError:
        return []
    doomed = set()
    for name in mine:
        if name.startswith(MPI_FILES[0]):
            doomed.add(name)
        elif name.startswith(MPI_FILES[1]) and name.count(".") >= 4:
            job = name.rsplit(".", 1)[0] + "."
            doomed.update(f for f in here if f.startswith(job))
    gone = []
    for name in sorted(doomed):
        try:
            os.unlink(os.path.join(shm, name))
            gone.append(name)
        except OSError:
            pass
    return gone


# the communicators not closed yet (weakly: one the program drops is not kept)
_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track(comm: Any) -> None:
    """Close ``comm`` at exit unless it is closed before."""
    _LIVE.add(comm)


def untrack(comm: Any) -> None:
    _LIVE.discard(comm)


@atexit.register
def _close_all() -> None:  # before mpi4py finalizes MPI
    for c in list(_LIVE):
        try:
            c.close()
        except Exception:
            pass
