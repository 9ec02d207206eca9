"""The compiled pieces, both optional: where they do not build, the library
uses numpy instead.
- collectives/_ntcopy.c: a copy with streaming stores (collectives/streaming.py).
- collectives/_kernels.c: one-pass k-input reductions for every op and dtype,
  and a streaming copy, for SSE2, AVX2 and AVX-512, chosen at run time
  (collectives/kernels.py).  -ffp-contract=off: float32/float64 reductions
  must be numpy's sequence of binary ops bit for bit, never fused.  Its
  loops are in collectives/_kernels_body.h, which _kernels.c includes once per
  instruction set; package_data puts it in source distributions."""
from setuptools import Extension, setup

setup(package_data={"collectives": ["_kernels_body.h"]}, ext_modules=[
    Extension("collectives._ntcopy", ["collectives/_ntcopy.c"], optional=True),
    Extension("collectives._kernels", ["collectives/_kernels.c"],
              depends=["collectives/_kernels_body.h"],
              extra_compile_args=["-ffp-contract=off"], optional=True),
])
