"""The one-copy path (transports/shm/one_copy.py) where process_vm_readv works,
and its fallback to the staged algorithms where it is turned off or refused
(tests/one_copy_check.py).  Its results are checked by the conformance
families (every shm job runs ``one_copy`` with the other algorithms), its
bytes by test_traffic.py, a rank killed inside a read by test_faults.py."""
import json
import os
import tempfile

import pytest

from launch import run_mpi


@pytest.mark.parametrize("mode,n", [("on", 3), ("off", 2), ("refused", 3)])
def test_offered_and_chosen_only_where_it_runs(mode, n):
    env = {"COLLECTIVES_ONE_COPY": "0"} if mode == "off" else {}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_mpi(n, ["tests/one_copy_check.py", mode, out], timeout=300, **env)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    assert not res["failures"], "\n".join(res["failures"])


def _huge_pages_here() -> str:
    """Why this machine cannot show huge pages to _thp ('' where it can)."""
    import mmap

    import numpy as np

    from transports.shm import _thp
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return "transparent huge pages are off"
    except OSError:
        return "no transparent huge pages"
    m = mmap.mmap(-1, 6 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    a = np.frombuffer(m, np.uint8)
    start = (-a.ctypes.data) % (2 << 20)
    m.madvise(mmap.MADV_HUGEPAGE, start, 4 << 20)
    a[start:start + (4 << 20)] = 1
    share = _thp.huge_share(a[start:start + (4 << 20)])
    works = _thp._works
    del a
    m.close()
    if not works:
        return "the kernel has no PAGEMAP_SCAN (Linux 6.7 and later)"
    return "" if share > 0 else "the kernel granted no huge page"


def test_huge_share_reads_the_page_tables():
    """transports/shm/_thp.py: 2 MiB on huge pages and 2 MiB forbidden them give
    half; views count their own bytes; nothing, or no array, gives 0."""
    import mmap

    import numpy as np

    from transports.shm import _thp
    why = _huge_pages_here()
    if why:
        pytest.skip(why)
    mb = 1 << 20
    m = mmap.mmap(-1, 6 * mb, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    a = np.frombuffer(m, np.uint8)
    s = (-a.ctypes.data) % (2 * mb)
    m.madvise(mmap.MADV_HUGEPAGE, s, 2 * mb)
    m.madvise(mmap.MADV_NOHUGEPAGE, s + 2 * mb, 2 * mb)
    a[s:s + 4 * mb] = 1
    assert _thp.huge_share(a[s:s + 4 * mb]) == 0.5
    assert _thp.huge_share(a[s + mb:s + 2 * mb]) == 1.0
    assert _thp.huge_share(a[s + 2 * mb:s + 4 * mb]) == 0.0
    assert _thp.huge_bytes(a.ctypes.data + s + mb, 2 * mb) == mb
    assert _thp.huge_share(a[:0]) == 0.0 and _thp.huge_share(None) == 0.0
    del a
    m.close()


def test_in_place_all_to_all_reads_where_huge_pages_back_every_source():
    """At N = 2 below its process_vm_readv threshold, all_to_all's in_place
    reads the peer's x where it lies when huge pages back both ranks' x,
    and takes the staged path (on both ranks) where they back neither or
    only one (tests/huge_check.py); every result right."""
    why = _huge_pages_here()
    if why:
        pytest.skip(why)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = run_mpi(2, ["tests/huge_check.py", out], timeout=120)
        assert p.returncode == 0 and os.path.exists(out), p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            res = json.load(f)
    assert not res["failures"], "\n".join(res["failures"])
    cases = res["cases"]
    assert min(cases["both"]["shares"]) >= 0.75, cases  # asked for, granted here
    assert cases["neither"]["shares"] == [0.0, 0.0] and cases["one"]["shares"][1] == 0.0, cases
    assert not cases["both"]["staged"], cases
    assert cases["neither"]["staged"] and cases["one"]["staged"], cases
