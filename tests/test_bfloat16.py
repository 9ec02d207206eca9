"""bfloat16 (``ml_dtypes.bfloat16``, ``cc.bfloat16``) end to end, and half
precision through the compiled kernels against numpy: tests/bfloat16_check.py
under mpiexec at N = 2 and 3 on shm and mpi; and what the library says of the
dtype in one process (its place in DTYPES, floating ops, CuPy's refusal)."""
import json

import ml_dtypes
import numpy as np
import pytest

import collectives as cc
from collectives import kernels
from collectives.dtypes import is_inexact
from collectives.ops import Op, divide, resolve
from conftest import standin_env
from launch import run_mpi

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("n,transport", [(2, "shm"), (3, "shm"), (2, "mpi"), (3, "mpi")],
                         ids=lambda v: str(v))
def test_every_collective_on_bfloat16(n, transport, tmp_path):
    out = tmp_path / "bf16.json"
    p = run_mpi(n, ["tests/bfloat16_check.py", str(out), transport], timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-5000:]
    got = json.loads(out.read_text())
    assert got["failures"] == 0, p.stderr[-5000:]
    assert got["checks"] > 1000, got  # every family, algorithm, op and mode ran


def test_bfloat16_is_a_dtype_of_the_library():
    assert cc.bfloat16 is ml_dtypes.bfloat16
    assert BF16 in cc.DTYPES and np.dtype(cc.bfloat16) == BF16
    # debug signatures send a dtype's index: the earlier ones keep theirs
    assert cc.DTYPES[-1] == BF16 and [str(d) for d in cc.DTYPES[:3]] == \
        ["float16", "float32", "float64"] and len(cc.DTYPES) == 14
    assert BF16 not in (np.dtype(np.float16), np.dtype(np.uint16), np.dtype("V2"))


def test_bfloat16_takes_every_op_as_a_floating_dtype():
    assert is_inexact(BF16) and is_inexact(np.dtype(np.complex64))
    assert not is_inexact(np.dtype(np.int16)) and not is_inexact(np.dtype("V2"))
    assert [resolve(o.value, BF16) for o in Op] == list(Op)
    with pytest.raises(TypeError, match="floating or complex"):
        resolve("avg", np.dtype(np.int16))


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_avg_divides_in_float32_and_rounds_once(dt):
    """Every bit pattern divided by 3: float32's quotient rounded once, on the
    compiled path and on numpy's."""
    every = np.arange(1 << 16, dtype=np.uint16).view(dt)
    with np.errstate(all="ignore"):
        want = (every.astype(np.float32) / np.float32(3)).astype(dt)
    before = kernels.isa()
    try:
        for path in ("best", "numpy"):
            kernels.use(path)
            got = every.copy()
            with np.errstate(all="ignore"):  # the library's calls run so (ops.quietly)
                divide(got, 3)
            nan = np.isnan(want.astype(np.float32))
            assert (np.isnan(got.astype(np.float32)) == nan).all(), path
            assert (got.view(np.uint16)[~nan] == want.view(np.uint16)[~nan]).all(), path
    finally:
        kernels.use(before)


CUDA_SCRIPT = """
import numpy as np, cupy, collectives as cc
comm = cc.init(transport="cuda")
x = cupy.zeros(8, dtype=cc.bfloat16)
for call in (lambda: comm.all_reduce(x), lambda: comm.broadcast(x),
             lambda: comm.all_gather(x), lambda: comm.reduce(x, op="max")):
    try:
        call()
    except TypeError as e:
        assert "bfloat16" in str(e) and "CuPy" in str(e), e
    else:
        raise AssertionError("a bfloat16 CuPy array was accepted")
# nothing moved: the communicator goes on, and host bfloat16 arrays work on it
y = comm.all_reduce(np.full(8, comm.rank + 1, cc.bfloat16))
assert (y.astype(np.float32) == comm.size * (comm.size + 1) / 2).all(), y
f = comm.all_reduce(cupy.full(8, 1.0, np.float32))
assert (cupy.asnumpy(f) == comm.size).all()
print(f"ok {comm.rank}", flush=True)  # one write: lines of ranks do not interleave
comm.close()
"""


def test_cuda_refuses_bfloat16_cupy_arrays_before_moving_anything():
    """On the CuPy stand-in (tests/standin): the refusal happens in the
    argument checks, before the transport sees the call."""
    p = run_mpi(2, ["-c", CUDA_SCRIPT], timeout=120, **standin_env())
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert p.stdout.count("ok") == 2, p.stdout
