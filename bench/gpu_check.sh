#!/usr/bin/env bash
# The GPU check of the cuda transport, on a GPU machine as it is: its own Python
# (python3, or $PYTHON) with CuPy, numpy, mpi4py and pytest, and no MPI library
# and no network.  No virtual environment is made (one made from that Python
# would hide its CuPy) and nothing CUDA-specific is installed.
#
#   bash bench/gpu_check.sh --fetch-wheels   # with network: MPICH's wheel into .whl/
#   bash bench/gpu_check.sh                  # on the GPU machine, .whl/ carried along
#   bash bench/gpu_check.sh --dry-run        # no GPU: the same steps over tests/standin
#
# Steps; each writes its log to $OUT (gpu-check-out/ where OUT is unset), and the
# run ends with one line per step, also in $OUT/summary.txt:
#   preflight  CuPy imports and sees a GPU; mpi4py loads an MPI library; mpiexec -n 2
#              starts a world of 2.  Only MPICH can be installed, from its wheel in
#              .whl/ (GPU_CHECK_WHEELS), into a temporary prefix that MPI4PY_LIBMPI
#              and MPIEXEC then point at.  The first thing still missing ends the
#              run at once, with one line naming it.
#   warmup     one process compiles the CuPy kernels the transport runs (add,
#              multiply, maximum, minimum over the library's dtypes, the average's
#              division, a copy), so that the multi-rank steps do not each pay for them.
#   tests      tests/test_cuda.py -k gpu: conformance on CuPy arrays at N = 2 and 4,
#              traffic at N = 2 and 3, the CuPy checks at N = 1, 2 and 4.
#   bench      the GPU's own copy bandwidth (cudaMemcpyAsync device to device) at
#              each size, then python -m bench --transport cuda: all_reduce and
#              all_gather at 1 MiB .. 256 MiB on 2 and 4 ranks sharing the GPU.
# NCCL is the benchmark's baseline only where each rank has a GPU of its own;
# NCCL refuses several ranks on one GPU, so with ranks sharing one the baseline
# is MPI's collective on host buffers (see bench/gpu.py).
#
# The run ends by itself within GPU_CHECK_SECONDS (420): every step has a cap,
# cut to what is left of that budget, and every command in a step runs under
# timeout within the step.  GPU_CHECK_STEPS picks among warmup, tests and bench
# (default all three; preflight always runs); GPU_CHECK_TESTS replaces the -k
# expression of the tests step.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
NAME=gpu_check
ALL_STEPS=(preflight warmup tests bench)
CAPS=(45 75 150 140)   # seconds at most per step: 410, and RESERVE makes 420

usage() { sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//;p}' "$0"; }

default_python() {  # the dry run's: the virtual environment that make builds, if any
    if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else echo python3; fi
}

fetch_wheels() {  # MPICH's wheel (Python-independent, x86-64 Linux) into .whl/
    local py=${PYTHON:-$(default_python)} dir=${GPU_CHECK_WHEELS:-$ROOT/.whl}
    mkdir -p "$dir" || return
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 -d "$dir" mpich || return
    local mib tree
    mib=$(( ($(du -sb "$dir" | cut -f1) + (1 << 20) - 1) >> 20 ))
    # what travels besides: the tracked and the untracked-but-not-ignored files
    tree=$(( ($(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null |
        tail -1 | cut -f1) + (1 << 20) - 1) >> 20 ))
    ls -l "$dir"
    echo "$dir: $mib MiB, the rest of the working tree $tree MiB: send $dir (ignored by git)"
    echo "to the GPU machine with the tree, and there run: bash bench/gpu_check.sh"
    [ $((mib + tree)) -le 48 ] || { echo "$NAME: over 48 MiB: keep one mpich wheel" >&2; return 1; }
}

MODE=gpu
case "${1-}" in
    "") ;;
    --dry-run) MODE=dry ;;
    --fetch-wheels) fetch_wheels; exit ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

START=$SECONDS
BUDGET=${GPU_CHECK_SECONDS:-420}
RESERVE=10  # kept back from every step: timeout's kill grace and the summary
OUT=${OUT:-$ROOT/gpu-check-out}
WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.whl}
WANTED=${GPU_CHECK_STEPS-warmup tests bench}  # set and empty: the preflight alone
mkdir -p "$OUT" || exit 2
for s in "${ALL_STEPS[@]}"; do rm -f "$OUT/$s.log"; done
rm -f "$OUT/summary.txt"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/collectives-gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "$MODE" = dry ]; then  # tiny sizes, 2 ranks, CuPy from tests/standin
    PY=${PYTHON:-$(default_python)}
    SIZES=(-b 1K -e 64K -f 4)
    RANKS=(2)
    TESTS=${GPU_CHECK_TESTS:-gpu-2 and not without}
    export PYTHONPATH="$ROOT/tests/standin:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    PY=${PYTHON:-python3}
    SIZES=(-b 1M -e 256M -f 2)
    RANKS=(2 4)
    TESTS=${GPU_CHECK_TESTS:-gpu and not without}
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

# -- steps: a log each, commands under timeout, one summary line each --------
declare -A LINE=() STATUS=()  # per step: its summary line; passed, or not
LOGF=/dev/null
log() { echo "$*" | tee -a "$LOGF"; }

begin() {  # begin NAME: step NAME starts, with its cap cut to the budget left
    local i cap
    for i in "${!ALL_STEPS[@]}"; do [ "${ALL_STEPS[$i]}" = "$1" ] && cap=${CAPS[$i]}; done
    STEP=$1 LOGF=$OUT/$1.log STEP_T0=$SECONDS
    STEP_END=$((SECONDS + cap))
    [ "$STEP_END" -gt $((START + BUDGET - RESERVE)) ] && STEP_END=$((START + BUDGET - RESERVE))
    log "== $STEP ($MODE run; at most $((STEP_END - SECONDS)) s)"
}

t() {  # t SECONDS COMMAND...: COMMAND under timeout, never past the step's end
    local cap=$1 left=$((STEP_END - SECONDS)) before rc
    shift
    [ "$cap" -gt "$left" ] && cap=$left
    if [ "$cap" -lt 1 ]; then log "(no time left for: $*)"; return 124; fi
    [ "$MODE" = dry ] && before=$(standin_files)
    timeout -k 3 "$cap" "$@" 2>&1 | tee -a "$LOGF"
    rc=${PIPESTATUS[0]}
    [ "$MODE" = dry ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && drop_standin "$before"
    return "$rc"
}

standin_files() { ls /dev/shm 2>/dev/null | grep '^standin-cuda-'; }

drop_standin() {  # drop_standin BEFORE: the stand-in's "device memory" that ranks killed
    local f pid   # by a timeout left in /dev/shm (new since BEFORE, its process gone)
    sleep 1       # the killed ranks exit
    for f in $(standin_files); do
        grep -qxF "$f" <<<"$1" && continue
        pid=${f#standin-cuda-} pid=${pid%%-*}
        [ -e "/proc/$pid" ] || rm -f "/dev/shm/$f"
    done
}

verdict() {  # verdict STATUS DETAIL: the step's summary line (STATUS: an exit status)
    local word
    case $1 in
        0) word=passed ;;
        124|137) word="TIMED OUT" ;;
        missing) word=FAILED ;;
        *) word="FAILED (exit $1)" ;;
    esac
    STATUS[$STEP]=$word
    LINE[$STEP]=$(printf '%-10s %s' "$STEP:" "$word ($((SECONDS - STEP_T0)) s)${2:+: $2}")
    log "${LINE[$STEP]}"
}

finish() {  # the summary (steps not reached say so); exit 0 only if every step ran and passed
    local s rc=0
    for s in "${ALL_STEPS[@]}"; do
        if [ -z "${STATUS[$s]-}" ]; then
            case " $WANTED " in
                *" $s "*) STATUS[$s]="not run" LINE[$s]=$(printf '%-10s %s' "$s:" \
                    "not run (preflight failed)") ;;
                *) STATUS[$s]=skipped LINE[$s]=$(printf '%-10s %s' "$s:" \
                    "skipped (not in GPU_CHECK_STEPS)") ;;
            esac
        fi
        case ${STATUS[$s]} in passed|skipped) ;; *) rc=1 ;; esac
    done
    {
        echo "== $NAME summary ($MODE run, $((SECONDS - START)) s of $BUDGET; logs in $OUT)"
        for s in "${ALL_STEPS[@]}"; do echo "${LINE[$s]}"; done
        [ -s "$WORK/table.txt" ] && cat "$WORK/table.txt"
    } | tee "$OUT/summary.txt"
    exit "$rc"
}

why() {  # the telling line of a failed command's output: its exception, else its last line
    local e
    e=$(grep -E '^[A-Za-z_.]*(Error|Exception|Exit)\b' <<<"$1" | tail -1)
    [ -n "$e" ] || e=$(grep -v '^[-=*[:space:]]*$' <<<"$1" | tail -1)  # not a rule of dashes
    echo "${e:-no output}" | cut -c1-240
}

missing() {  # missing WHAT: the first thing missing ends the run, named on one line
    log "$NAME: missing: $*"
    verdict missing "missing $*"
    finish
}

# -- preflight: what must be there, checked before anything else -------------
find_launcher() {  # as tests/launch.py does: beside the Python, else on PATH
    local beside
    beside="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/$1"
    if [ -x "$beside" ]; then echo "$beside"; else command -v "$1"; fi
}

install_mpich() {  # install_mpich WHY: MPICH from its wheel, for mpi4py and the launchers
    local whl
    whl=$(ls "$WHEELS"/mpich-*.whl 2>/dev/null | sort -V | tail -1)
    [ -n "$whl" ] || missing "MPICH ($1), and no mpich wheel in $WHEELS: run" \
        "'bash bench/gpu_check.sh --fetch-wheels' where there is network and carry .whl"
    log "$1: installing $(basename "$whl") into $WORK/mpich"
    # --prefix, not --target: pip --target drops a wheel's data files (MPICH's lib/)
    # (--ignore-installed: else pip skips a wheel that its environment holds already)
    t 30 "$PY" -m pip install -q --no-index --no-deps --no-compile --ignore-installed \
        --prefix "$WORK/mpich" "$whl" >/dev/null ||
        missing "MPICH (pip could not install $whl: see preflight.log)"
    # mpi4py 4 looks for libmpi in its environment's lib/ unless MPI4PY_LIBMPI names it
    export MPI4PY_LIBMPI=$WORK/mpich/lib/libmpi.so.12 PATH=$WORK/mpich/bin:$PATH
    MPIEXEC=$WORK/mpich/bin/mpiexec
}

world_of_2() {  # the launcher's flags for its kind (MPIFLAGS), then a world of 2 ranks,
    # or fail; what the ranks said in $WORK/world.txt
    export MPIEXEC  # tests/launch.py launches with it, and with GFORKER where that is set
    [ -z "${GFORKER-}" ] && [ -x "$(dirname "$MPIEXEC")/mpiexec.gforker" ] &&
        export GFORKER=$(dirname "$MPIEXEC")/mpiexec.gforker
    # the launcher's words for more ranks than cores and for root, as the
    # tests' jobs get them (collectives/launcher.py: Open MPI's; MPICH needs none)
    local flags
    flags=$("$PY" -c 'import sys; from collectives.launcher import Launcher
print(" ".join(Launcher(sys.argv[1]).flags()))' "$MPIEXEC") || return
    read -r -a MPIFLAGS <<<"$flags"
    # one write per rank: the ranks' lines may interleave (PYTHONUNBUFFERED)
    t 30 "$MPIEXEC" ${MPIFLAGS[@]+"${MPIFLAGS[@]}"} -n 2 "$PY" -c 'import sys; from mpi4py import MPI
sys.stdout.write(f"<world {MPI.COMM_WORLD.Get_size()}>\n")' >"$WORK/world.txt"
    [ "$(grep -o '<world [0-9]*>' "$WORK/world.txt" | grep -c '<world 2>')" = 2 ]
}

preflight() {
    local got mpi
    begin preflight
    log "python: $PY"
    command -v "$PY" >/dev/null || missing "python: '$PY' is not a command (set PYTHON)"
    # by its path: a launcher's ranks may see another PATH (Open MPI 4's found
    # a python3 without mpi4py)
    PY=$("$PY" -c 'import sys; print(sys.executable)') || missing "a Python that runs ($PY)"
    log "python: $PY"
    command -v nvidia-smi >/dev/null &&
        t 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    got=$(t 30 "$PY" -c '
import cupy
n = cupy.cuda.runtime.getDeviceCount()
if n < 1:
    raise SystemExit("CuPy sees no GPU")
print(f"CuPy {cupy.__version__}, {n} GPU(s)")') || missing "CuPy with a GPU under $PY ($(why "$got"))"
    local cupy=${got##*$'\n'}  # its last line: warnings may come first
    got=$(t 20 "$PY" -c 'import mpi4py; print("mpi4py", mpi4py.__version__)') ||
        missing "mpi4py under $PY ($(why "$got"))"
    local info=${got##*$'\n'}
    if [ -n "${MPIEXEC-}" ]; then
        [ -x "$MPIEXEC" ] || missing "mpiexec: MPIEXEC=$MPIEXEC is not an executable"
    else
        MPIEXEC=$(find_launcher mpiexec)
    fi
    mpi='from mpi4py import MPI; print(" ".join(MPI.Get_library_version().replace("\0", "").splitlines()[0].split()))'
    if ! got=$(t 30 "$PY" -c "$mpi"); then
        install_mpich "mpi4py loads no MPI library: $(why "$got")"
        got=$(t 30 "$PY" -c "$mpi") || missing "an MPI library that mpi4py loads ($(why "$got"))"
    elif [ -z "$MPIEXEC" ]; then
        install_mpich "no mpiexec beside $PY or on PATH"
    fi
    info="$info, ${got##*$'\n'}"
    if ! world_of_2; then  # a launcher that starts no world: MPICH's, from the wheel, if not yet
        [ "$MPIEXEC" = "$WORK/mpich/bin/mpiexec" ] &&
            missing "a world of 2 ranks from '$MPIEXEC -n 2' ($(why "$(cat "$WORK/world.txt")"))"
        install_mpich "'$MPIEXEC -n 2' starts no world of 2 ($(why "$(cat "$WORK/world.txt")"))"
        got=$(t 30 "$PY" -c "$mpi") || missing "an MPI library that mpi4py loads ($(why "$got"))"
        info="${info%, *}, ${got##*$'\n'}"
        world_of_2 ||
            missing "a world of 2 ranks from '$MPIEXEC -n 2' ($(why "$(cat "$WORK/world.txt")"))"
    fi
    verdict 0 "$cupy; $info; $MPIEXEC -n 2: a world of 2"
}

# -- warmup: CuPy's kernels compiled once, in one process ----------------------
warmup() {
    begin warmup
    t 70 "$PY" - <<'EOF'
import time

import cupy
import numpy as np

from collectives import DTYPES

t0 = time.perf_counter()
kernels = 0
for dt in DTYPES:
    a, b = cupy.ones(4096, dt), cupy.full(4096, 2, dt)
    ufuncs = [cupy.add, cupy.multiply]
    if dt.kind != "c":
        ufuncs += [cupy.maximum, cupy.minimum]
    for f in ufuncs:  # the transport reduces with these, in place
        f(a, b, out=a)
    if dt.kind in "fc":  # op="avg" divides in place by the number of ranks
        np.true_divide(a, 4, out=a)
    c = a.copy()
    ok = bool(cupy.all(c == a))  # the checks compare on the GPU
    cupy.asnumpy(cupy.arange(8, dtype=dt) * 3)
    kernels += len(ufuncs) + (dt.kind in "fc") + 4
    assert ok, f"a copy of {dt} differs"
print(f"warmup: about {kernels} kernels over {len(DTYPES)} dtypes in "
      f"{time.perf_counter() - t0:.1f} s")
EOF
    local rc=$?
    verdict "$rc" "$(grep '^warmup:' "$LOGF" | tail -1 | cut -d' ' -f2-)"
}

# -- tests: tests/test_cuda.py's GPU side --------------------------------------
run_tests() {
    begin tests
    t 145 "$PY" -m pytest -q -rs -p no:cacheprovider -k "$TESTS" tests/test_cuda.py
    local rc=$? last
    last=$(grep -E ' in [0-9.]+s' "$LOGF" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')
    if [ "$rc" = 0 ] && [[ $last == *skipped* || $last != *passed* ]]; then
        rc=1 last="$last: tests were skipped, i.e. pytest saw no CuPy or no GPU"
    fi
    verdict "$rc" "-k '$TESTS': ${last:-no pytest summary}"
}

# -- bench: the GPU's copy bandwidth, then busbw of the cuda transport ---------
bench() {
    begin bench
    local fails=() runs=() worst=0 n c rc
    note() {  # note STATUS WHAT: a failed command of the step; a timeout outranks the rest
        fails+=("$2: exit $1")
        case $1 in 124|137) worst=124 ;; *) [ "$worst" = 0 ] && worst=1 ;; esac
    }
    log "-- the GPU's copy bandwidth (cudaMemcpyAsync device to device, bytes copied per s)"
    t 30 "$PY" - "${SIZES[1]}" "${SIZES[3]}" "${SIZES[5]}" "$WORK/copy.json" <<'EOF'
import json
import sys
import time

import cupy

from bench.cli import parse_size, size_range

lo, hi, factor, path = sys.argv[1:]
sizes = size_range(parse_size(lo), parse_size(hi), float(factor))
rt = cupy.cuda.runtime
stream = cupy.cuda.get_current_stream()
# the host stand-in copies at once: it has nothing to wait for
sync = getattr(cupy.cuda.Device(), "synchronize", lambda: None)
src, dst = cupy.ones(sizes[-1], cupy.uint8), cupy.zeros(sizes[-1], cupy.uint8)
gbps = {}
for s in sizes:
    reps = max(2, min(200, (1 << 31) // s))  # ~2 GiB copied per timing
    best = float("inf")
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            rt.memcpyAsync(dst.data.ptr, src.data.ptr, s, rt.memcpyDefault, stream.ptr)
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    gbps[s] = s / best / 1e9
    print(f"{s:>12} B  {gbps[s]:10.1f} GB/s", flush=True)
with open(path, "w") as f:
    json.dump(gbps, f)
EOF
    rc=$?
    [ "$rc" = 0 ] || note "$rc" "copy bandwidth"
    for n in "${RANKS[@]}"; do
        for c in all_reduce all_gather; do
            log "-- $c on $n ranks sharing the GPU"
            t 60 "$MPIEXEC" ${MPIFLAGS[@]+"${MPIFLAGS[@]}"} -n "$n" "$PY" -m bench "$c" --transport cuda "${SIZES[@]}" \
                --budget 0.2 --check --json "$WORK/bench-$c-$n.json"
            rc=$?
            [ "$rc" = 0 ] || note "$rc" "$c on $n ranks"
            runs+=("$WORK/bench-$c-$n.json")
        done
    done
    t 20 "$PY" - "$WORK" "${runs[@]}" <<'EOF'
import json
import os
import sys

work, runs = sys.argv[1], [p for p in sys.argv[2:] if os.path.exists(p)]
try:
    with open(f"{work}/copy.json") as f:
        copy = {int(k): v for k, v in json.load(f).items()}
except OSError:
    copy = {}


def size(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


lines = [f"{'collective':<12}{'ranks':>5}{'size':>7}{'busbw':>10}{'baseline':>16}"
         f"{'GPU copy':>10}{'busbw/copy':>11}"]
top, wrong = {}, 0
for path in runs:
    with open(path) as f:
        res = json.load(f)
    for r in res["rows"]:
        cp, base = copy.get(r["bytes"]), r["mpi_busbw"]
        lines.append(
            f"{res['collective']:<12}{res['n']:>5}{size(r['bytes']):>7}{r['busbw']:>10.1f}"
            + (f"{base:>11.1f} {res['baseline']:<4}" if base is not None else f"{'-':>16}")
            + (f"{cp:>10.1f}{r['busbw'] / cp:>11.3f}" if cp else f"{'-':>10}{'-':>11}"))
        wrong += r["wrong"] or 0
        top[res["collective"], res["n"]] = (r["bytes"], r["busbw"])
lines.append("(GB/s; busbw as nccl-tests counts it; GPU copy: bytes copied per second)")
with open(f"{work}/table.txt", "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
best = "; ".join(f"{c} on {n} at {size(b)}: {bw:.1f} GB/s" for (c, n), (b, bw) in top.items())
if copy:
    best += f"; GPU copy at {size(max(copy))}: {copy[max(copy)]:.1f} GB/s"
print(f"bench: {len(top)} runs, {wrong} wrong elements; {best}")
sys.exit(1 if wrong or not top else 0)
EOF
    rc=$?
    [ "$rc" = 0 ] || note "$rc" "the table"
    local detail
    detail=$(grep '^bench:' "$LOGF" | tail -1 | cut -d' ' -f2-)
    [ "${#fails[@]}" = 0 ] || detail="$(printf '%s; ' "${fails[@]}")$detail"
    verdict "$worst" "${detail%; }"
}

preflight
case " $WANTED " in *" warmup "*) warmup ;; esac
case " $WANTED " in *" tests "*) run_tests ;; esac
case " $WANTED " in *" bench "*) bench ;; esac
finish
