"""The streaming copy (transports/copy.py, as collectives/streaming.py uses it)
against np.copyto, in one process."""
import numpy as np
import pytest

from collectives import streaming


@pytest.mark.skipif(not streaming.available, reason="transports._native is not built")
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "complex128"])
@pytest.mark.parametrize("count", [4096, 4097, 100_003, 1 << 20])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_stream_copy_equals_copyto(dtype, count, offset):
    rng = np.random.default_rng(count + offset)
    src = rng.integers(0, 250, count + 8).astype(dtype)[offset:offset + count]
    dst = np.zeros(count + 8, dtype)
    guard = dst.copy()
    streaming.stream_copy(dst[offset:offset + count], src)
    np.testing.assert_array_equal(dst[offset:offset + count], src)
    np.testing.assert_array_equal(dst[:offset], guard[:offset])  # nothing written outside
    np.testing.assert_array_equal(dst[offset + count:], guard[offset + count:])


def test_stream_copy_falls_back_where_it_must():
    a = np.arange(100_000, dtype=np.float64)
    streaming.stream_copy(a[1000:], a[:-1000])  # overlapping: numpy's copy
    np.testing.assert_array_equal(a[1000:], np.arange(99_000, dtype=np.float64))
    b = np.arange(200_000, dtype=np.float32)
    out = np.zeros(100_000, np.float32)
    streaming.stream_copy(out, b[::2])  # strided source
    np.testing.assert_array_equal(out, b[::2])
    small = np.zeros(10, np.int32)
    streaming.stream_copy(small, np.arange(10, dtype=np.int32))
    np.testing.assert_array_equal(small, np.arange(10))


def test_copier_streams_only_large_host_outputs(monkeypatch):
    monkeypatch.setattr(streaming, "STREAM_BYTES", 8 << 20)
    big, small = np.empty(1 << 20, np.float32), np.empty(1 << 10, np.float32)
    want = streaming.stream_copy if streaming.available else np.copyto
    assert streaming.copier(big, 2) is want  # 4 MiB x 2 ranks
    assert streaming.copier(big, 1) is np.copyto
    assert streaming.copier(small, 8) is np.copyto
    monkeypatch.setattr(streaming, "STREAM_BYTES", 0)
    assert streaming.copier(big, 8) is np.copyto


def test_extension_is_built_where_there_is_a_compiler():
    import shutil
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the library copies with numpy")
    assert streaming.available, "transports._native did not build (pip install -e . builds it)"
