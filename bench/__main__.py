"""``mpiexec -n N python -m bench COLLECTIVE [options]``, see bench/__init__.py;
``mpiexec -n N python -m bench tune -o FILE [options]``, see bench/tune.py."""
from __future__ import annotations

import sys
import traceback


def _run() -> int:
    from .cli import main
    try:
        return main()
    except SystemExit:
        raise
    except BaseException:
        # One failing rank would leave the others waiting in a collective:
        # report and take the whole job down.
        traceback.print_exc()
        sys.stderr.flush()
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_size() > 1:
            MPI.COMM_WORLD.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(_run())
