"""collectives.kernels (the C reduction kernels, collectives/_kernels.c) against
numpy, in one process, on every path this machine has: "numpy" (the
fallback) and each instruction set the processor runs."""
import functools
import shutil

import numpy as np
import pytest

from collectives import kernels

PATHS = kernels.isas()
OPS = ("sum", "prod", "max", "min")
UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
KS = (1, 2, 3, 4, 8)
SIZES = (0, 1, 7, 63, 64, 65, 1000, (1 << 20) + 3)
F32 = np.dtype(np.float32)
HALF = tuple(d for d in (np.dtype(np.float16), kernels.bfloat16) if d is not None)


@pytest.fixture(autouse=True)
def restore_path():
    before = kernels.isa()
    yield
    kernels.use(before)


def cases():
    for dt in kernels.DTYPES:
        for op in OPS:
            if not (dt.kind == "c" and op in ("max", "min")):
                yield pytest.param(dt, op, id=f"{dt}-{op}")


@functools.lru_cache(maxsize=2)
def pool(dt: np.dtype) -> np.ndarray:
    """Nine random arrays of dtype dt, long enough for every size and offset:
    integers of every bit pattern, floats of either sign around 1."""
    rng = np.random.default_rng(dt.num)
    n = SIZES[-1] + 8
    if dt.kind in "iu":
        return rng.integers(0, 256, (9, n * dt.itemsize), dtype=np.uint8).view(dt)
    x = rng.uniform(-2.0, 2.0, (9, n * (2 if dt.kind == "c" else 1)))
    return x.astype(np.float64 if dt.kind == "c" else np.float32).view(
        np.complex128 if dt.kind == "c" else np.float32).astype(dt)


def references(xs, op: str, ks, divisor=None):
    """For each k in ks (ascending), the reduction of xs[:k] as the library's
    reductions call numpy: ``uf(x0, x1, out=acc)``, then ``uf(acc, x,
    out=acc)`` (numpy's complex multiply gives other bits into a new array);
    half types in float32, rounded once."""
    dt, uf = xs[0].dtype, UFUNCS[op]
    half = dt in HALF
    acc = np.empty(xs[0].shape, F32 if half else dt)
    wide = (lambda x: x.astype(F32)) if half else (lambda x: x)
    for k in range(1, max(ks) + 1):
        if k == 1:
            acc[...] = wide(xs[0])
        elif k == 2 and not half:
            uf(xs[0], xs[1], out=acc)
        else:
            uf(acc, wide(xs[k - 1]), out=acc)
        if k in ks:
            r = acc if divisor is None else np.true_divide(acc, divisor)
            yield r.astype(dt)


def reference(xs, op: str, divisor=None) -> np.ndarray:
    return next(references(xs, op, (len(xs),), divisor))


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit for bit, except that a NaN need only be a NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    parts = 2 if got.dtype.kind == "c" else 1
    bits = np.dtype(f"u{got.dtype.itemsize // parts}")
    g, w = got.view(bits), want.view(bits)
    if np.array_equal(g, w):
        return
    assert got.dtype.kind not in "iu", f"{what}: {np.flatnonzero(g != w).size} elements differ"
    gf, wf = (got.view(got.real.dtype), want.view(want.real.dtype)) if parts == 2 else (got, want)
    gn, wn = np.isnan(gf.astype(np.float64)), np.isnan(wf.astype(np.float64))
    np.testing.assert_array_equal(gn, wn, err_msg=f"{what}: NaN positions")
    bad = np.flatnonzero(g[~gn] != w[~wn])
    assert not bad.size, f"{what}: {bad.size} elements differ, first at {bad[0]}: " \
                         f"{gf[~gn][bad[0]]!r} != {wf[~wn][bad[0]]!r}"


@pytest.mark.parametrize("dt,op", list(cases()))
def test_reduce_equals_numpy_on_every_path(dt, op):
    """Every k and size, aligned and not; the misaligned run streams its stores."""
    data = pool(dt)
    for n in SIZES:
        for off_in, off_out, stream in ((0, 0, None), (1, 3, 1)):
            xs = [data[j, off_in:off_in + n] for j in range(max(KS))]
            for k, want in zip(KS, references(xs, op, KS)):
                for path in PATHS:
                    kernels.use(path)
                    buf = np.zeros(n + 4, dt)
                    out = buf[off_out:off_out + n]
                    assert kernels.reduce_into(out, xs[:k], op, stream_bytes=stream) is out
                    assert_same(out, want, f"{path} k={k} n={n} offsets={off_in},{off_out}")
                    assert not buf[:off_out].any() and not buf[off_out + n:].any(), \
                        f"{path} k={k} n={n}: wrote outside out"


@pytest.mark.parametrize("dt", [d for d in kernels.DTYPES if d.kind in "fc" or d in HALF], ids=str)
def test_divisor_divides_in_the_same_pass(dt):
    data = pool(dt)
    for k, n in ((1, 65), (3, 1000), (4, 7)):
        xs = [data[j, :n] for j in range(k)]
        want = reference(xs, "sum", divisor=3)
        for path in PATHS:
            kernels.use(path)
            out = kernels.reduce_into(np.empty(n, dt), xs, "sum", divisor=3)
            assert_same(out, want, f"{path} k={k} n={n}")


SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.5, 3e38, -3e38, 1e-40, 65504.0]


@pytest.mark.parametrize("dt", [d for d in kernels.DTYPES if d.kind == "f" or d in HALF], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_nan_inf_and_signed_zeros(dt, op):
    """Every ordered pair and triple of special values, as numpy has them
    (for max/min: NaN propagates, and of -0.0 and +0.0 the later wins)."""
    with np.errstate(all="ignore"):
        s = np.array(SPECIALS, np.float64).astype(dt)
    m = len(s)
    for k in (2, 3):
        grid = np.indices((m,) * k).reshape(k, -1)
        xs = [np.ascontiguousarray(s[g]) for g in grid]
        with np.errstate(all="ignore"):
            want = reference(xs, op)
        for path in PATHS:
            kernels.use(path)
            with np.errstate(all="ignore"):
                out = kernels.reduce_into(np.empty(m ** k, dt), xs, op)
            assert_same(out, want, f"{path} k={k}")
    if op in ("max", "min"):  # the sign of a zero is bit for bit numpy's
        z = np.array([0.0, -0.0], dt)
        for path in PATHS:
            kernels.use(path)
            out = kernels.reduce_into(np.empty(2, dt), [z, z[::-1].copy()], op)
            np.testing.assert_array_equal(np.signbit(out), [True, False], err_msg=path)


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_half_types_round_once_to_nearest_even(dt):
    """Every bit pattern of the half type through float32 and back: added to
    a shifted copy of itself, divided by 3 (every rounding case, subnormals
    and overflow included), and ties that round down and up."""
    every = np.arange(1 << 16, dtype=np.uint16).view(dt)
    other = np.roll(every, 12345)
    ties = np.array([1.0, 1.0078125, 2.0 ** -24], np.float32).astype(dt)
    tie_steps = np.array([2.0 ** -8, 2.0 ** -8, 2.0 ** -24], np.float32).astype(dt)
    checks = [([every, other], None), ([every], 3.0), ([every, other, every], 3.0),
              ([every], 1.0), ([ties, tie_steps], None), ([ties, tie_steps], 2.0)]
    for xs, divisor in checks:
        with np.errstate(all="ignore"):
            want = reference(xs, "sum", divisor)
        for path in PATHS:
            kernels.use(path)
            with np.errstate(all="ignore"):
                out = kernels.reduce_into(np.empty(xs[0].size, dt), xs, "sum", divisor=divisor)
            assert_same(out, want, f"{path} k={len(xs)} divisor={divisor}")


def test_once_rounding_differs_from_pairwise_half_arithmetic():
    """Three float16 ones plus 2^-11 each: pairwise float16 adds round every
    step back to 1.0, one float32 sum rounded once does not."""
    one, step = np.ones(4, np.float16), np.full(4, 2.0 ** -11, np.float16)
    for path in PATHS:
        kernels.use(path)
        out = kernels.reduce_into(np.empty(4, np.float16), [one, step, step, step], "sum")
        np.testing.assert_array_equal(out, np.float16(1.0 + 2.0 ** -9), err_msg=path)
    assert ((one + step) + step + step == 1.0).all()  # what numpy's float16 ufuncs give


@pytest.mark.parametrize("dt", ["float32", "float16", "int16", "complex128"]
                         + (["bfloat16"] if kernels.bfloat16 is not None else []))
@pytest.mark.parametrize("stream", [None, 1])
def test_out_may_be_any_input(dt, stream):
    dt = np.dtype(kernels.bfloat16 if dt == "bfloat16" else dt)
    data = pool(dt)
    n = 1000
    for j in (0, 1, 3):
        for path in PATHS:
            kernels.use(path)
            xs = [data[i, :n].copy() for i in range(4)]
            want = reference(xs, "sum")
            kernels.reduce_into(xs[j], xs, "sum", stream_bytes=stream)
            assert_same(xs[j], want, f"{path} out is inputs[{j}]")
            acc = data[0, :n].copy()
            kernels.reduce_into(acc, [acc, data[1, :n]], np.add, stream_bytes=stream)
            assert_same(acc, reference([data[0, :n], data[1, :n]], "sum"), f"{path} acc += x")


@pytest.mark.parametrize("dt", ["float32", "int8", "float16"], ids=str)
def test_many_inputs(dt):
    """More inputs than the C side keeps on its stack (8), and inputs as the
    rows of one array."""
    dt = np.dtype(dt)
    xs = [pool(dt)[j % 9, j:j + 1000] for j in range(17)]
    want = reference(xs, "sum")
    for path in PATHS:
        kernels.use(path)
        assert_same(kernels.reduce_into(np.empty(1000, dt), xs, "sum"), want, path)
        assert_same(kernels.reduce_into(np.empty(1000, dt), np.array(xs), "sum"), want, path)


def test_partial_overlap_is_refused_on_every_path():
    a = np.arange(2000, dtype=np.float32)
    for path in PATHS:
        kernels.use(path)
        with pytest.raises(ValueError, match="overlaps"):
            kernels.reduce_into(a[1:1001], [a[:1000], a[1000:]], "sum")
        with pytest.raises(ValueError, match="overlaps"):
            kernels.reduce_into(a[:1000], [a[500:1500]], "max")


def test_streaming_threshold(monkeypatch):
    """Outputs at or over streaming.STREAM_BYTES stream (the default path),
    smaller ones and a threshold of 0 do not; all give the same bits."""
    dt = np.dtype(np.float32)
    xs = [pool(dt)[j, 5:5 + 70_000] for j in range(3)]
    want = reference(xs, "sum")
    for limit in (1 << 10, 280_000, 280_001, 0):
        monkeypatch.setattr(kernels.streaming, "STREAM_BYTES", limit)
        for path in PATHS:
            kernels.use(path)
            out = np.empty(70_000, dt)[1:]
            xs1 = [x[1:] for x in xs]
            assert_same(kernels.reduce_into(out, xs1, "sum"), want[1:], f"{path} limit={limit}")


def test_ops_as_ufuncs_names_and_enum():
    from collectives.ops import Op
    x, y = np.arange(10, dtype=np.int32), np.full(10, 4, np.int32)
    for path in PATHS:
        kernels.use(path)
        for op in (np.maximum, "max", Op.MAX):
            np.testing.assert_array_equal(kernels.reduce_into(np.empty(10, np.int32), [x, y], op),
                                          np.maximum(x, y))


def test_bad_input_raises_on_every_path():
    f = np.zeros(8, np.float32)
    bad = [
        (TypeError, lambda: kernels.reduce_into([0.0] * 8, [f], "sum")),
        (TypeError, lambda: kernels.reduce_into(f.copy(), [f, np.zeros(8, np.float64)], "sum")),
        (TypeError, lambda: kernels.reduce_into(f.copy(), [f, [0.0] * 8], "sum")),
        (TypeError, lambda: kernels.reduce_into(np.zeros(8, bool), [np.zeros(8, bool)], "sum")),
        (TypeError, lambda: kernels.reduce_into(np.zeros(4, np.complex64),
                                                [np.zeros(4, np.complex64)] * 2, "max")),
        (TypeError, lambda: kernels.reduce_into(np.zeros(8, np.int32),
                                                [np.zeros(8, np.int32)], "sum", divisor=2)),
        (ValueError, lambda: kernels.reduce_into(f.copy(), [f, np.zeros(9, np.float32)], "sum")),
        (ValueError, lambda: kernels.reduce_into(f.copy(), [], "sum")),
        (ValueError, lambda: kernels.reduce_into(f.copy(), [f], "avg")),
        (ValueError, lambda: kernels.reduce_into(f.copy(), [f], np.subtract)),
        (ValueError, lambda: kernels.reduce_into(f.copy(), [np.zeros(16, np.float32)[::2]], "sum")),
        (ValueError, lambda: kernels.reduce_into(np.zeros(16, np.float32)[::2], [f], "sum")),
        (ValueError, lambda: kernels.reduce_into(np.frombuffer(bytes(32), np.float32), [f], "sum")),
    ]
    for path in PATHS:
        kernels.use(path)
        for i, (error, call) in enumerate(bad):
            with pytest.raises(error):
                call()


def test_paths_and_their_switches(monkeypatch):
    assert PATHS[0] == "numpy" and kernels.isa() in PATHS
    kernels.use("best")
    assert kernels.isa() == PATHS[-1]
    with pytest.raises(ValueError):
        kernels.use("avx1024")
    monkeypatch.setenv("COLLECTIVES_KERNELS", "0")
    kernels._use_from_env()
    assert kernels.isa() == "numpy"
    monkeypatch.setenv("COLLECTIVES_KERNELS", "1")
    for cap in PATHS:
        monkeypatch.setenv("COLLECTIVES_KERNELS_ISA", cap)
        kernels._use_from_env()
        assert kernels.isa() == cap
    monkeypatch.setenv("COLLECTIVES_KERNELS_ISA", "avx512bf16")
    kernels._use_from_env()
    assert kernels.isa() == PATHS[-1]  # a cap over the processor's best is its best
    if "avx512bf16" in PATHS:  # a cap below it takes the best under the cap
        monkeypatch.setenv("COLLECTIVES_KERNELS_ISA", "avx512")
        kernels._use_from_env()
        assert kernels.isa() == "avx512"
    monkeypatch.setenv("COLLECTIVES_KERNELS_ISA", "mmx")
    with pytest.raises(ValueError):
        kernels._use_from_env()


def test_the_processor_features_are_found():
    try:
        flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if "sse2" not in PATHS:
        pytest.skip("not an x86 build of the extension")
    assert ({"avx2", "f16c"} <= flags) == ("avx2" in PATHS)
    avx512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
    assert avx512 == ("avx512" in PATHS)
    assert (avx512 and "avx512_bf16" in flags) == ("avx512bf16" in PATHS)


def test_extension_is_built_where_there_is_a_compiler():
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the library reduces with numpy")
    assert kernels._kernels is not None, "collectives._kernels did not build (pip install -e . builds it)"

