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
            world.Abort(1)
    hook._collectives = True
    sys.excepthook = hook


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
