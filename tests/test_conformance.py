"""Every call of API.md against numpy, under real mpiexec.

One job per (world size, transport) runs all the families of
tests/conformance.py (every algorithm x dtype x op x root x count x out
mode of each call); each test below checks one family of one job.
"""
import pytest

from conformance import FAMILIES
from conftest import CMA, TRANSPORTS, WORLD_SIZES, check_family


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
