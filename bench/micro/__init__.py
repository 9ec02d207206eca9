"""pytest-benchmark micro-benchmarks of single-process hot paths (not in the default run)."""
