#!/usr/bin/env bash
# The GPU checks of the cuda transport, on a fresh GPU machine, in well under 8 minutes:
#   bash bench/gpu_check.sh
# 1. a virtual environment (/tmp/collectives-gpu-venv) that sees the machine's own packages (CuPy,
#    numpy, pytest where the image has them), with the project and what is missing
#    (numpy, mpi4py, the mpich wheel that brings mpiexec, pytest, CuPy as the 'cuda'
#    extra, NCCL for CuPy) from PyPI, or from wheels in .whl/ on a machine offline;
# 2. the GPU tests (tests/test_cuda.py: conformance on CuPy arrays at N = 2 and 4,
#    traffic, CuPy checks);
# 3. a short all-reduce benchmark on 2 ranks (NCCL as the baseline where there is
#    one GPU per rank, else MPI on host buffers);
# 4. a summary.  Every step runs under `timeout`, inside GPU_CHECK_SECONDS (420).
set -u
cd "$(dirname "$0")/.."
START=$SECONDS
BUDGET=${GPU_CHECK_SECONDS:-420}
PY=${PYTHON:-python3}
VENV=${GPU_CHECK_VENV:-/tmp/collectives-gpu-venv}
LOG=${GPU_CHECK_LOG:-/tmp/collectives-gpu-check.log}
: >"$LOG"
left() { echo $((BUDGET - (SECONDS - START))); }
step() {  # step SECONDS-AT-MOST COMMAND...: run under timeout, never past the budget
    local cap=$1; shift
    local t; t=$(left); [ "$t" -lt "$cap" ] && cap=$t
    [ "$cap" -le 5 ] && { echo "(no time left for: $*)" | tee -a "$LOG"; return 124; }
    timeout -k 5 "$cap" "$@" 2>&1 | tee -a "$LOG"
    return "${PIPESTATUS[0]}"
}
PIP_FLAGS=(-q --disable-pip-version-check --retries 0 --timeout 10)
[ -d .whl ] && PIP_FLAGS+=(--no-index --find-links .whl)
pip_install() { step 150 "$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" "$@"; }
has() { "$VENV/bin/python" -c "$1" >/dev/null 2>&1; }

echo "== set-up ($PY)" | tee -a "$LOG"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
[ -x "$VENV/bin/python" ] || step 60 "$PY" -m venv --system-site-packages "$VENV"
has "import numpy" || pip_install numpy
has "import pytest" || pip_install pytest
[ -x "$VENV/bin/mpiexec" ] || pip_install mpich
has "from mpi4py import MPI" || pip_install mpi4py
# the image's own CuPy if it has one (two CuPy builds in one environment conflict)
has "import cupy" || pip_install cupy-cuda12x
has "from cupy.cuda import nccl" || pip_install nvidia-nccl-cu12
step 60 "$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --no-deps --no-build-isolation -e . \
    || echo "(the project is used from the source tree: PYTHONPATH)" | tee -a "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step 60 "$VENV/bin/python" - <<'PY'
import cupy, numpy, mpi4py
from mpi4py import MPI
print("cupy", cupy.__version__, "| numpy", numpy.__version__, "| mpi4py", mpi4py.__version__,
      "|", MPI.Get_library_version().splitlines()[0])
print("GPUs:", cupy.cuda.runtime.getDeviceCount())
try:
    from cupy.cuda import nccl
    print("NCCL", nccl.get_version())
except Exception as e:
    print("no NCCL for CuPy:", e)
PY
ready=$?

tests_rc=125; bench_rc=125
if [ "$ready" -eq 0 ]; then
    echo "== GPU tests" | tee -a "$LOG"
    step 270 "$VENV/bin/python" -m pytest -q -x -k gpu -p no:cacheprovider tests/test_cuda.py
    tests_rc=$?
    echo "== benchmark: all_reduce on 2 ranks, CuPy buffers" | tee -a "$LOG"
    step 100 "$VENV/bin/mpiexec" -n 2 "$VENV/bin/python" -m bench all_reduce --transport cuda \
        -b 8 -e 64M -f 8 -n 20 -w 3 --check
    bench_rc=$?
fi

echo "== summary ($((SECONDS - START)) s)"
verdict() { case $1 in 0) echo passed;; 124|137) echo "TIMED OUT";; 125) echo "not run (set-up failed)";; *) echo "FAILED ($1)";; esac; }
echo "set-up:     $([ "$ready" -eq 0 ] && echo ready || echo "FAILED: see $LOG")"
echo "GPU tests:  $(verdict $tests_rc)  $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$LOG" | grep -E ' in [0-9.]+s' | tail -1)"
echo "benchmark:  $(verdict $bench_rc)  $(grep -E '^# (Avg bus bandwidth|buffers)' "$LOG" | tr '\n' ' ')"
[ "$ready" -eq 0 ] && [ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
