"""A small data-parallel trainer written on the public API of ``collectives``.

Strategies: a parameter server (``ps``), ``ddp``, and ZeRO stages 1-3
(``zero1``, ``zero2``, ``zero3``), each in its own module.  Mixed precision as
in the ZeRO paper: half-precision parameters and gradients (fp16, with dynamic
loss scaling, or bf16: ``--dtype``), fp32 master weights and Adam moments
(K = 12 bytes per parameter).  Every strategy
measures the bytes its collectives move (``comm.traffic``) and the model
states it holds, beside the formulas of docs/trainer.md.

    mpiexec -n 4 python -m trainer --strategy zero2 --steps 100
    python -m trainer memory --params 7.5e9 --ranks 64 --k 12
    python -m trainer scaling --strategy ddp
"""
