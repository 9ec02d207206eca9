"""The compiled pieces, both optional: where they do not build, the library
uses numpy instead.
- transports/_native.c (transports._native): the one streaming copy
  (transports/copy.py) and the shm transport's compiled exchange
  (transports/shm/exchange.py, Exchange.fused), which reduces with a kernel
  it is handed through the interface of transports/native_api.h.
- collectives/_kernels.c (collectives._kernels): one-pass k-input
  reductions for every op and dtype, for SSE2, AVX2 and AVX-512, chosen at
  run time (collectives/kernels.py), and their capsules for the exchange.
  -ffp-contract=off: float32/float64 reductions must be numpy's sequence of
  binary ops bit for bit, never fused.  Its loops are in
  collectives/_kernels_body.h, which _kernels.c includes once per
  instruction set.  package_data puts the headers in source distributions."""
from setuptools import Extension, setup

setup(package_data={"collectives": ["_kernels_body.h"], "transports": ["native_api.h"]},
      ext_modules=[
    Extension("transports._native", ["transports/_native.c"],
              depends=["transports/native_api.h"], optional=True),
    Extension("collectives._kernels", ["collectives/_kernels.c"],
              depends=["collectives/_kernels_body.h", "transports/native_api.h"],
              include_dirs=["transports"],
              extra_compile_args=["-ffp-contract=off"], optional=True),
])
