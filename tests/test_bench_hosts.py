"""The benchmark on an emulated 2 x 2 layout (tests/emulate.py): its hosts
comparison (bench/hosts.py) has hier, the flat mpi transport and MPI's own
call at every size, every result right, and the bytes between hosts that
docs/algorithms.md gives: 2(H-1)/H * S/L per rank for hier_slices, and for
the flat ring on ranks a a b b, 2(N-1)/N * S sent by the two ranks whose
right-hand neighbour is on the other host."""
import json
import os
import tempfile

from emulate import run_layout

S = 2 << 20  # hier_slices, and the flat ring on 4 ranks


def test_hosts_comparison_2x2():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "b.json")
        size = f"{S // 1024}K"
        p = run_layout("aabb", ["-m", "bench", "all_reduce", "-b", "8", "-e", size,
                                "-f", str(S // 8), "-n", "3", "-w", "1", "--check",
                                "--hosts", "only", "--json", out], timeout=300,
                      COLLECTIVES_ADAPT="0")  # the table's hier_slices, whose bytes are known
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        with open(out) as f:
            doc = json.load(f)
    assert "on 2 hosts (2 + 2 ranks)" in p.stdout
    assert set(doc) == {"collective", "hosts"}, doc.keys()
    cmp = doc["hosts"]
    assert cmp["ranks_per_host"] == [2, 2] and cmp["rounds"] >= 1
    rows = {(r["bytes"], r["transport"]): r for r in cmp["rows"]}
    assert set(rows) == {(b, t) for b in (8, S) for t in ("hier", "mpi", "MPI")}
    for r in cmp["rows"]:
        assert len(r["times_us"]) == cmp["rounds"] and r["time_us"] > 0
        if r["transport"] == "MPI":
            assert r["inter_bytes"] is None and r["wrong"] is None
        else:
            assert r["wrong"] == 0 and r["intra_bytes"] > 0
    H, L, N = 2, 2, 4
    big = rows[S, "hier"]
    assert big["algorithm"] == "hier_slices"
    assert big["inter_max"] == 2 * (H - 1) * S // (H * L)
    assert big["inter_bytes"] == N * big["inter_max"]
    flat = rows[S, "mpi"]
    assert flat["algorithm"] == "ring"
    assert flat["inter_max"] == 2 * (N - 1) * S // N  # ranks 1 and 3 send all across
    assert flat["inter_bytes"] == 2 * flat["inter_max"]
    assert rows[8, "hier"]["algorithm"] == "recursive_doubling"
    assert rows[8, "hier"]["inter_max"] == 8  # each rank's round with its partner on the other host
    assert rows[8, "hier"]["inter_bytes"] == N * 8


def test_hosts_only_on_one_host_is_refused():
    p = run_layout("aa", ["-m", "bench", "all_reduce", "--hosts", "only", "-b", "8", "-e", "8"],
                   timeout=120)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "--hosts only needs ranks on several hosts" in p.stderr
