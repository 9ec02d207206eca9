"""bench.data, the inputs, references and tolerance of the suite and the benchmark (in process)."""
import functools
import operator

import numpy as np
import pytest

from bench import data
from collectives.dtypes import BFLOAT16
from collectives.ops import DTYPES, UFUNCS, resolve

PYTHON_OPS = {"sum": sum, "prod": lambda v: functools.reduce(operator.mul, v, 1),
              "max": max, "min": min, "avg": lambda v: sum(v) / len(v)}


def test_ops_for_follows_the_interface():
    """docs/api.md: max and min not for complex, avg for floating and complex only."""
    for dt in DTYPES:
        want = {"f": ["sum", "prod", "max", "min", "avg"], "c": ["sum", "prod", "avg"]}.get(
            "f" if dt == BFLOAT16 else dt.kind, ["sum", "prod", "max", "min"])
        assert data.ops_for(dt) == want, dt


@pytest.mark.parametrize("dtype", ["int64", "float64", "complex128"])
def test_reduced_against_python(dtype):
    """The references against a reduction written out by hand (not the op
    table): the same bits where Python combines as numpy does (integers,
    float64 in rank order), within the tolerance for complex (numpy's complex
    multiplication fuses a multiply and an add, Python's does not)."""
    n, count = 5, 40
    for op in data.ops_for(dtype):
        ins = [data.make(dtype, count, r, 3, op).tolist() for r in range(n)]
        want = np.array([PYTHON_OPS[op](col) for col in zip(*ins)]).astype(dtype)
        got = data.reduced(n, dtype, count, op, 3)
        assert type(got) is data.Reference and got.dtype == want.dtype, op
        if dtype == "complex128":
            assert data.mismatches(want, got) == 0, op
        else:
            data.expect_bits(want, got, op)


def test_narrow_integers_wrap_like_numpy():
    ins = [data.make("int8", 64, r, 1, "prod").astype(np.int64) for r in range(8)]
    want = functools.reduce(operator.mul, ins)
    want = ((want + 128) % 256 - 128).astype(np.int8)
    assert np.array_equal(data.reduced(8, "int8", 64, "prod", 1), want)


def _in_order(ins: list, order, op: str, dtype) -> np.ndarray:
    """The reduction in ``order``; half precision in float32, rounded once
    (docs/api.md), written out here apart from bench.data."""
    dt = np.dtype(dtype)
    uf = UFUNCS[resolve(op, dt)]
    half = dt.itemsize == 2 and dt.kind not in "iu"
    acc = ins[order[0]].astype(np.float32) if half else ins[order[0]].copy()
    for r in order[1:]:
        uf(acc, ins[r].astype(np.float32) if half else ins[r], out=acc)
    acc = acc.astype(dt) if half else acc
    if op == "avg":
        np.true_divide(acc, len(ins), out=acc)
    return acc


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64",
                                   "complex128"])
def test_float_inputs_round_differently_in_every_order(dtype):
    """Floating sums, averages and products over 8 ranks are not the same bits
    in another order (so a reduction in the wrong order shows), and stay
    within the tolerance; max and min are exact in every order."""
    rng = np.random.default_rng(0)
    for op in data.ops_for(dtype):
        ins = [data.make(dtype, 500, r, 7, op) for r in range(8)]
        ref = data.reduced(8, dtype, 500, op, 7)
        same = _in_order(ins, range(8), op, dtype)
        if dtype.startswith("complex") and op == "prod":  # layout-dependent bits in numpy
            assert data.mismatches(same, ref) == 0
        else:
            data.expect_bits(same, ref, op)
        for k in range(5):
            order = rng.permutation(8) if k else np.roll(np.arange(8), 3)  # from rank 3
            got = _in_order(ins, order, op, dtype)
            assert data.mismatches(got, ref) == 0, (op, order)
            differ = np.count_nonzero(got != ref)
            if op in ("max", "min"):
                assert differ == 0, (op, order)
            elif dtype not in ("float16", "bfloat16"):  # float32 sums rounded once to
                assert differ > 50, (op, order, differ)  # half show no order; of 500


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64"])
def test_integer_inputs_are_exact_in_any_order(dtype):
    rng = np.random.default_rng(1)
    for op in data.ops_for(dtype):
        ins = [data.make(dtype, 500, r, 7, op) for r in range(8)]
        ref = data.reduced(8, dtype, 500, op, 7)
        for _ in range(3):
            data.expect_bits(_in_order(ins, rng.permutation(8), op, dtype), ref, op)


@pytest.mark.parametrize("dtype", ["float16", "float32", "complex64"])
def test_float_inputs_have_random_mantissas_and_bounded_magnitudes(dtype):
    """Every mantissa bit varies; magnitudes stay in range, so that even float16
    sums and products of 32 ranks are finite and normal."""
    dt = np.dtype(dtype)
    real = np.dtype(dt.char.lower()) if dt.kind == "c" else dt
    bits = np.dtype(f"u{real.itemsize}")
    mant = np.finfo(real).nmant
    for op in data.ops_for(dtype):
        x = data.make(dtype, 4000, 2, 9, op)
        parts = [x.real, x.imag] if dt.kind == "c" else [x]
        low, high = data.RANGES[op == "prod", dt.kind]
        for p in parts:
            assert low <= np.abs(p).min() and np.abs(p).max() <= high, op
            assert 0.3 < (p < 0).mean() < 0.7, op
            m = np.ascontiguousarray(p).view(bits) & ((1 << mant) - 1)
            varying = [k for k in range(mant) if 0 < np.count_nonzero(m >> k & 1) < m.size]
            assert len(varying) == mant, (op, varying)
        if op in ("sum", "prod"):
            tiny = np.finfo(real).tiny
            r = np.abs(data.reduced(32, dtype, 4000, op, 9))
            assert np.isfinite(r).all() and (op == "sum" or r.min() >= tiny), op


def test_make_is_periodic_and_offsets_slice_it():
    long = data.make("float32", data.PERIOD + 20, 2, 4)
    assert np.array_equal(long[data.PERIOD:], long[:20])
    assert np.array_equal(data.make("float32", 20, 2, 4, offset=data.PERIOD - 5),
                          np.concatenate([long[data.PERIOD - 5:data.PERIOD], long[:15]]))
    assert np.array_equal(data.reduced(3, "int32", 30, "max", 4, offset=17),
                          data.reduced(3, "int32", 47, "max", 4)[17:])
    assert not np.array_equal(data.make("int32", 50, 0, 4), data.make("int32", 50, 1, 4))
    assert not np.array_equal(data.make("int32", 50, 0, 4), data.make("int32", 50, 0, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_poison_never_matches(dtype):
    want = data.reduced(4, dtype, 200, "sum", 2)
    assert data.mismatches(data.poison(want), want) == 200
    assert data.mismatches(want.copy(), want) == 0


def test_tolerance():
    """Integers, max, min, one rank and moved data exact; sums within the
    reassociation bound, which a dropped or doubled input exceeds."""
    for dt in ("int8", "uint64"):
        assert all(data.tolerance(8, dt, op) == data.EXACT for op in data.ops_for(dt))
    for dt in ("float16", "complex64"):
        assert data.tolerance(1, dt, "sum") == data.EXACT
    assert data.tolerance(5, "float32", "max") == data.tolerance(5, "float64", "min") \
        == data.EXACT
    eps = float(np.finfo(np.float16).eps)
    assert data.tolerance(8, "float16", "sum") == pytest.approx((0, 1.1 * 7 * 8 * 2 * eps))
    rt, at = data.tolerance(8, "float16", "avg")
    assert rt == pytest.approx(1.1 * eps) and at == pytest.approx(1.1 * 7 * 2 * eps)
    assert data.tolerance(8, "float32", "prod")[0] == pytest.approx(1.1 * 7 * 1.1920929e-07)
    for n in (3, 8):
        ref = data.reduced(n, "float16", 300, "sum", 4)
        short = data.reduced(n - 1, "float16", 300, "sum", 4)  # rank n-1's input missing
        assert data.mismatches(short, ref) == 300, n
    moved = data.make("float32", 50, 1, 2)
    near = np.nextafter(moved, np.float32(np.inf))
    assert data.mismatches(near, moved) == 50  # data moved: exact


def test_references_keep_their_tolerance():
    ref = data.reduced(6, "float32", (6, 40), "sum", 1)
    tol = data.tolerance(6, "float32", "sum")
    assert ref.tol == tol and ref[2].tol == tol and ref.reshape(-1)[7:9].tol == tol
    assert type(data.poison(ref)) is np.ndarray
    assert type(data.make("float32", 5, 0)) is np.ndarray and type(data.stacked(2, "int8", 3)) \
        is np.ndarray


def test_expect_names_what_differs():
    want = np.arange(6, dtype=np.int32)
    data.expect(want.copy(), want)
    got = want.copy()
    got[4] = 9
    with pytest.raises(AssertionError, match=r"1 of 6 elements differ.*index \[4\].*\[9\]"):
        data.expect(got, want, "result")
    with pytest.raises(AssertionError, match="dtype"):
        data.expect(want.astype(np.int64), want)
    with pytest.raises(AssertionError, match="shape"):
        data.expect(want.reshape(2, 3), want)
    ref = data.reduced(4, "float64", 6, "sum", 0)
    near = ref + 1e-15 * np.arange(6)
    data.expect(np.asarray(near), ref)
    with pytest.raises(AssertionError, match=r"5 of 6 elements are not the reference's bits"):
        data.expect_bits(np.asarray(near), ref)
