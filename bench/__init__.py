"""Benchmark suite for the collectives library, after nccl-tests and OSU.

Run under MPI; rank 0 prints a table::

    mpiexec -n 4 python -m bench all_reduce -b 8 -e 64M -f 4 --check
    mpiexec -n 4 python -m bench all -b 1K -e 4M -f 16 --json out.json
    mpiexec -n 4 python -m bench tune -o tuning.json   # see bench.tune

Conventions (those of nccl-tests)
---------------------------------
``size``  (bytes, column 1) is the size that ``-b``/``-e``/``-f`` step over:

=============== ============================================= ==========
collective      size S is                                     busbw/algbw
=============== ============================================= ==========
all_reduce      the bytes of ``x`` (= of the result)           2(n-1)/n
broadcast       the bytes of ``buf``                           1
reduce          the bytes of ``x`` (= of root's result)        1
all_gather      the total output bytes (n blocks)              (n-1)/n
reduce_scatter  the total input bytes (n blocks)               (n-1)/n
all_to_all      the total input bytes of one rank (n blocks)   (n-1)/n
gather          the total bytes at root (n blocks)             (n-1)/n
scatter         the total bytes at root (n blocks)             (n-1)/n
barrier         0 (one row, whatever the sizes asked)          -
=============== ============================================= ==========

For the blocked collectives a block has ``S // (n * itemsize)`` elements and
the size reported is rounded down to ``n`` whole blocks; sizes that round to
one already measured are skipped.  ``count`` is the number of elements that
the size covers.  For gather and scatter, nccl-tests' factor (n-1)/n is used
(root moves n-1 of the n blocks), so busbw is the bandwidth of root's link.

* Each row times the call out of place and in place, in two column groups
  as nccl-tests prints them: ``time algbw busbw #wrong`` for each.  In place
  is the call's in-place form in the library's interface: ``all_reduce(x,
  out=x)``, ``reduce(x, out=x)`` at the root, ``all_gather(out[rank],
  out=out)``, ``reduce_scatter(x, out=x[rank])``, ``all_to_all(x, out=x)``.
  ``broadcast`` is always in place, so its one measurement fills both groups;
  ``gather``, ``scatter`` and ``barrier`` have no in-place form and print
  ``n/a`` there.  The closing line adds the in-place average.
* Rounds (``--repeat R``, default 3): this machine's speed drifts, so per
  size every call is timed R times, in turn with the others: round k times
  our out-of-place call (each algorithm's, with ``--algorithm all``), the
  baseline's call and a local copy of the message, each as one loop, before
  round k+1 starts; then R rounds time our in-place calls the same way.
  Each form's default learns before its rounds, on its own calls: calls of
  both forms between two of adaptation's agreements share one choice
  (docs/algorithms.md, "How the default is chosen"), which a program that
  calls one form at a size never meets.  A round's figure of a
  call is the largest, over ranks, of each rank's average time per call of a
  loop of ``iters`` calls that starts after a barrier.  ``time`` (and
  ``mpi_time``) is the median of the R rounds' figures.
* Algorithms (``--algorithm``): by default each row times the library's
  default, printed ``auto:X(source)``: X is the algorithm it chose for the
  size (asked after the size's rounds) and source where the choice came
  from, ``table`` (the library's own), ``tuning`` (a tuning file:
  ``python -m bench tune``) or ``adapted`` (run-time adaptation); a name
  forces that algorithm; ``all`` times the default and then every
  algorithm offered, in the same rounds, and adds the column ``÷best``:
  per row, the median over the rounds of the row's out-of-place time over
  the fastest named algorithm's time in the same round (1.00: the fastest;
  on the default's row, what its choice costs).  ``python -m bench.summary
  --defaults`` tabulates the default's ``÷best`` and ratios from such runs.
* Buffers (``--alloc``): ours are plain numpy arrays (``numpy``, the
  default) or communicator-allocated ones (``comm``: ``comm.empty``, the
  same values; on ``shm`` the peers read them in place); the baseline's are
  plain arrays either way.
* ``algbw = S / time`` and ``busbw = algbw * factor``, in GB/s (1e9 bytes/s).
* ``#wrong`` (with ``--check``) is the number of result elements, summed over
  ranks, that differ from a numpy reference (integers and moved data
  exactly; floating reductions within the rounding that another order of
  combining the ranks may give, see ``bench.data.tolerance``).  It comes from one
  call made after the timed loop, on outputs filled beforehand with values
  that match nowhere (NaN; the result plus one for integers) and, in place,
  on inputs restored; ``N/A`` without ``--check``.  Inputs are
  deterministic (``bench.data``), so every rank computes the expected
  result locally.
* ``mpi_time``/``mpi_busbw`` measure MPI's own collective (mpi4py buffer
  calls, out of place, without ``MPI_IN_PLACE``) on buffers of the same
  sizes in the same run, in the same rounds; ``ratio`` is the median over
  the rounds of each round's ``mpi_time / time`` (= ``busbw / mpi_busbw``,
  both out of place; > 1 means ours is faster; for the barrier, which has
  no bandwidth, it is the time ratio all the same), so each ratio compares
  two loops timed one after the other.  With R even the median is the mean
  of the middle two.
  MPI columns show ``-`` for ``--op avg`` (MPI has none) and for dtypes or
  ops that the MPI library refuses.  Data-movement collectives hand MPI the
  buffers as bytes.  MPI has no bfloat16: with ``-d bfloat16`` its reducing
  calls run on 16-bit words with a user-defined op (``MPI.Op.Create``:
  numpy in float32, rounded to bfloat16), titled ``mpi-op_time``/
  ``mpi-op_busbw`` (``"baseline": "MPI-op"`` in the JSON) after a header
  line that says so.  ``--check`` compares bfloat16 and float16 results
  with float32 arithmetic rounded once to the dtype.
* ``--transport cuda`` measures CuPy copies of the same buffers (each rank on
  GPU ``rank mod #GPUs``); the baseline columns then hold NCCL's collective
  on those CuPy buffers where NCCL can be had (CuPy's NCCL binding and one
  GPU per rank; titled ``nccl_time``/``nccl_busbw``, ``"baseline": "NCCL"``
  in the JSON, which keeps the ``mpi_*`` keys), else MPI's on the host
  buffers; a header line says which and why.  ``bench/gpu_check.sh`` runs
  the GPU tests and a short benchmark on a GPU machine.
* ``%cpy`` is our out-of-place busbw as a percentage of the one-copy
  limit: the median over the rounds of ``busbw / (S / copy time)``, where
  the copy time is that round's timing of ``np.copyto`` of S bytes between
  two buffers of the rank's own (a device-to-device copy on ``--transport
  cuda``), every rank copying at once and the slowest rank counting, as for
  the collectives.  It is measured at the message's size because the limit
  depends on it (caches), and in the rounds because it shares the cores with
  the same ranks and drifts with the machine; a collective that moves every
  byte once, by a local copy's speed, is at 100.
* Without ``-n`` the iteration count adapts: about ``--budget`` seconds
  (0.3) of timed loop per call and size, all rounds together (budget / R a
  round), at least 3 and at most 1000 calls a round; without ``-w`` each
  call's warm-up, before the first round, is 5 calls or about 0.02 s of
  them, whichever is more, cut to about 0.2 s.  Where the default adapts
  (``comm.adaptive``), its calls at a size first run untimed as many times
  as its first tries take (8 calls of its first choice, then two tries of
  eight calls of every other offered algorithm; collectives/adapt.py), and
  8 more (``runner.LEARN_EXTRA``): the figures are those of a program past
  its first calls of that size.
* The header gives one core's memcpy bandwidth (best ``np.copyto`` of a
  64 MiB buffer, bytes copied per second, other ranks idle), and the closing
  line the average busbw over the non-empty sizes and its fraction of it.

JSON (``--json FILE``)
----------------------
One object per collective::

    {"collective", "n", "transport", "dtype", "op", "root", "memcpy_gbps",
     "repeat", "baseline",
     "rows": [{"bytes", "count", "algorithm", "auto", "iters", "time_us",
               "algbw", "busbw", "wrong", "inplace", "inplace_iters",
               "inplace_time_us", "inplace_algbw", "inplace_busbw",
               "inplace_wrong", "mpi_time_us", "mpi_busbw", "ratio",
               "repeat", "times_us", "inplace_times_us", "mpi_times_us",
               "ratios", "copy_times_us", "copy_gbps", "pct_copy", "source",
               "over_best", "over_best_ratios", "twin"}, ...]}

A single collective writes that object; ``all`` writes a list of them, one
per collective, in the order run.  ``-``, ``N/A`` and ``n/a`` become
``null``; ``inplace`` says what the ``inplace_*`` keys hold: ``"own"`` (the
in-place call), ``"same"`` (broadcast: the out-of-place figures again) or
``"none"`` (no in-place form: all null).  ``times_us``,
``inplace_times_us``, ``mpi_times_us`` and ``copy_times_us`` hold each
round's figure (``repeat`` of them, in round order), ``ratios`` each
round's ``mpi_time / time``; ``time_us`` etc. are their medians and
``ratio`` the median of ``ratios``; ``iters`` is per round.  ``copy_gbps``
is S over the median copy time, ``pct_copy`` the ``%cpy`` column.
``auto`` is true on the default's rows, ``algorithm`` then the algorithm it
chose and ``source`` where the choice came from (null on other rows, and
where the library does not say); ``over_best`` is the ``÷best`` column and
``over_best_ratios`` each round's ratio (null without ``--algorithm all``).
``twin`` is true on the ``--twin`` rows only: ``algorithm`` is then
``twin:X``, a second copy of the fastest named algorithm X (lowest median
time) timed in the same rounds, out of place; its ``over_best`` is what
``÷best`` shows for a default that always ran X, the cell's noise floor.

Many hosts
----------
Where the ranks span several hosts (or emulated ones: ``COLLECTIVES_HOST``
per block of an MPMD launch, docs/hosts.md), each collective's table is
followed by ``bench.hosts``' comparison: per size, the call on a ``hier``
communicator, on a flat ``mpi`` one and MPI's own, in interleaved rounds,
with the bytes one call moves within and between hosts; ``--hosts only``
prints the comparison alone, ``--hosts off`` leaves it out.  With
``--json`` each collective's object holds it under ``"hosts"``.

``--plot FILE.png`` draws the out-of-place busbw against size (one panel
per collective), one line per algorithm and one for MPI; it needs matplotlib (the ``plot``
extra): without it the command exits with status 2 before it measures anything.

Micro-benchmarks of single-process hot paths: ``python -m pytest bench/micro
--benchmark-only``.
"""
