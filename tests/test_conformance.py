"""Every call of docs/api.md against numpy, under real mpiexec.

One job per (world size, transport) runs all the families of
tests/conformance.py, each on the world communicator (every algorithm, dtype,
op, root, count and out mode of its call: all crossed at N <= 3, sampled
above, one op per dtype and algorithm above N = 5) and on a duplicated and
a split communicator (a representative part); each test below checks one family of one job.  The plans themselves are
checked here, in process: every out mode in every plan, the full cross at
N <= 3.
"""
import numpy as np
import pytest

from bench.data import DTYPES, ops_for
from conformance import FAMILIES, FULL_N, SALT, SPECS, SWEEP_N, Recorder, plan
from conftest import CMA, NO_ONE_COPY, NUMPY, TRANSPORTS, WORLD_SIZES, check_family


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_family(conformance, n, transport, family):
    check_family(conformance(n, transport), family)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("n", [2, 3, 5])
def test_family_shm_rendezvous(conformance, n, family):
    """The same cases with shm's single-copy rendezvous on from 4 KiB."""
    check_family(conformance(n, CMA), family)


@pytest.mark.parametrize("family", ["all_reduce", "reduce", "reduce_scatter", "default"])
@pytest.mark.parametrize("n", [3])
def test_family_numpy_reductions(conformance, n, family):
    """The reducing calls with the compiled kernels off (COLLECTIVES_KERNELS=0):
    the numpy fallback gives the same results, half precision included (at
    N = 3, the full cross; test_kernels.py compares the two bit for bit at
    every input count)."""
    check_family(conformance(n, NUMPY), family)


@pytest.mark.parametrize("family", ["default", "all_gather"])
@pytest.mark.parametrize("n", [2, 5])
def test_family_one_copy_off(conformance, n, family):
    """With the one-copy path off (COLLECTIVES_ONE_COPY=0, the fallback where
    process_vm_readv is refused) the library's choices and the staged
    algorithms give the same results (tests/one_copy_check.py checks that
    no one_copy is offered or chosen then, at every size)."""
    check_family(conformance(n, NO_ONE_COPY), family)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_plans(n):
    """Every out mode in every plan; every dtype and root in the full ones; at
    N <= FULL_N every root x op x dtype x out mode; up to SWEEP_N every dtype
    x op per algorithm, above every op per algorithm and every dtype x op over
    five; seeds that tell cases apart."""
    for call, spec in SPECS.items():
        roots = set(range(n)) if spec.rooted else {None}
        for lite in (False, True):
            for a in range(4):
                cases = plan(spec, n, a, lite)
                where = f"{call} n={n} lite={lite} algorithm #{a}"
                assert {c.mode for c in cases} == set(spec.modes), where
                assert len({c.seed for c in cases}) == len(cases), where
                assert all(0 <= c.seed < 100_000 for c in cases), where  # below SALT's steps
                if lite:
                    continue
                assert {c.dtype for c in cases} >= set(DTYPES), where
                assert {c.root for c in cases} == roots, where
                if n <= FULL_N:
                    got = {(c.dtype, c.op, c.root, c.mode) for c in cases}
                    want = {(dt, op, root, mode) for dt in DTYPES
                            for op in (ops_for(dt) if spec.reducing else [None])
                            for root in roots for mode in spec.modes}
                    assert want <= got, f"{where}: missing {sorted(want - got, key=str)[:5]}"
                pairs = {(c.dtype, c.op) for c in cases}
                if n <= SWEEP_N:
                    assert pairs >= every_pair(spec), where
                else:  # every op with some dtype
                    assert {op for _, op in pairs} >= {op for _, op in every_pair(spec)}, where
            if n > SWEEP_N:  # every dtype x op over five algorithms
                over = {(c.dtype, c.op) for a in range(5) for c in plan(spec, n, a, False)}
                assert over >= every_pair(spec), f"{call} n={n}"


def every_pair(spec) -> set:
    return {(np.dtype(dt), op) for dt in DTYPES
            for op in (ops_for(dt) if spec.reducing else [None])}


def test_failures_name_the_communicator():
    class Comm:
        rank, size = 1, 4
    rec = Recorder("split")
    rec.on(Comm(), None, color=1)

    def fails():
        raise AssertionError("wrong")
    rec.check("all_reduce alg=ring", fails)
    rec.check("all_reduce alg=direct", lambda: None)
    assert rec.cases == 2 and rec.salt == SALT["split"] + 100_000
    assert rec.failures == ["[split: rank 1 of 4] all_reduce alg=ring: wrong"]
