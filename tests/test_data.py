"""bench.data, the inputs, references and tolerance of the suite and the benchmark (in process)."""
import functools
import operator

import numpy as np
import pytest

from bench import data
from collectives.ops import DTYPES

PYTHON_OPS = {"sum": sum, "prod": lambda v: functools.reduce(operator.mul, v, 1),
              "max": max, "min": min, "avg": lambda v: sum(v) / len(v)}


def test_ops_for_follows_the_interface():
    """docs/api.md: max and min not for complex, avg for floating and complex only."""
    for dt in DTYPES:
        want = {"f": ["sum", "prod", "max", "min", "avg"], "c": ["sum", "prod", "avg"]}.get(
            dt.kind, ["sum", "prod", "max", "min"])
        assert data.ops_for(dt) == want, dt


@pytest.mark.parametrize("dtype", ["int64", "float64", "complex128"])
def test_reduced_against_python(dtype):
    """The references against a reduction written out by hand (not the op table)."""
    n, count = 5, 40
    for op in data.ops_for(dtype):
        ins = [data.make(dtype, count, r, 3, op).tolist() for r in range(n)]
        want = np.array([PYTHON_OPS[op](col) for col in zip(*ins)]).astype(dtype)
        got = data.reduced(n, dtype, count, op, 3)  # exact but for avg's division
        assert got.dtype == want.dtype and data.mismatches(got, want) == 0, op


def test_narrow_integers_wrap_like_numpy():
    ins = [data.make("int8", 64, r, 1, "prod").astype(np.int64) for r in range(8)]
    want = functools.reduce(operator.mul, ins)
    want = ((want + 128) % 256 - 128).astype(np.int8)
    assert np.array_equal(data.reduced(8, "int8", 64, "prod", 1), want)


@pytest.mark.parametrize("dtype", ["float16", "complex64"])
def test_inputs_are_exact_in_any_order(dtype):
    """Sums and products over 8 ranks come out the same in every order."""
    rng = np.random.default_rng(0)
    for op, uf in (("sum", np.add), ("prod", np.multiply)):
        ins = [data.make(dtype, 500, r, 7, op) for r in range(8)]
        ref = data.reduced(8, dtype, 500, op, 7)
        for _ in range(5):
            order = rng.permutation(8)
            acc = ins[order[0]].copy()
            for r in order[1:]:
                uf(acc, ins[r], out=acc)
            assert np.array_equal(acc, ref), (op, order)


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


def test_tolerance_is_two_ulps_and_integers_exact():
    for dt in ("float16", "float32", "float64"):
        want = np.array([1.5, -3.25, 0.0], dt)
        eps = np.finfo(dt).eps
        near = (want * (1 + eps)).astype(dt)  # one unit off
        far = (want * (1 + 4 * eps)).astype(dt)
        assert data.mismatches(near, want) == 0, dt
        assert data.mismatches(far, want) == 2, dt  # 0 stays 0
    assert data.mismatches(np.array([3, 4], np.int64), np.array([3, 5], np.int64)) == 1
    assert data.mismatches(np.zeros(3), np.zeros(4)) == 4


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
