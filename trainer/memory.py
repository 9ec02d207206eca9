"""python -m trainer memory: ZeRO model-state memory per device, any Ψ, N, K."""
from __future__ import annotations

import argparse
import json

from .claims import GB, zero_table


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer memory",
                                description="Model-state memory per device (GB = 1e9 bytes) "
                                            "for DDP and each ZeRO stage, fp16 or bf16 mixed precision.")
    p.add_argument("--params", type=float, required=True, help="Ψ, e.g. 7.5e9 (required)")
    p.add_argument("--ranks", type=int, required=True,
                   help="N, data-parallel degree (required)")
    p.add_argument("--k", type=float, default=12,
                   help="optimizer bytes per parameter (default %(default)g, Adam's)")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of a table (default: a table)")
    a = p.parse_args(argv)
    if a.params <= 0 or a.ranks < 1 or a.k < 0:
        p.error("--params must be > 0, --ranks >= 1, --k >= 0")
    rows = zero_table(a.params, a.ranks, a.k)
    if a.json:
        print(json.dumps({"params": a.params, "ranks": a.ranks, "k": a.k,
                          "gb_per_device": {name: b / GB for name, _, b in rows}}))
        return 0
    print(f"# model states per device: Ψ={a.params:g}  N={a.ranks}  K={a.k:g}")
    print(f"{'stage':<20} {'formula':<14} {'GB':>10}")
    for name, formula, b in rows:
        print(f"{name:<20} {formula:<14} {b / GB:10.2f}")
    return 0
