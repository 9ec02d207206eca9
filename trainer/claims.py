"""The textbook figures each strategy is measured against (docs/trainer.md).

Ψ parameters, b bytes per element on the wire (fp16 and bf16: 2), N ranks,
K bytes of optimizer state per parameter (fp32 master + two Adam moments: 12).

Traffic is per rank per step.  For the collective strategies it is the bytes
a rank *sends* (it receives as many): a ring all-reduce sends 2(N-1)/N·Ψ·b.
For the parameter server it is what a rank sends *and* receives, the way the
server's load is usually quoted: 2(N-1)·Ψ·b at the server, 2·Ψ·b at a worker
per round; with staleness S over T steps the weights go out T - S times
(``ps_rounds``), not T.
"""
from __future__ import annotations

GB = 1e9


def traffic_convention(strategy: str) -> str:
    return "sent+recv" if strategy == "ps" else "sent"


def ps_rounds(steps: int | None, staleness: int = 0) -> float:
    """The parameter server's messages per step and worker, each way: (T
    gradients up, T - S weight versions down) / T.  In round r a worker takes
    version r - S, so versions 1..S are taken by no one and the server sends
    versions S+1..T-1 and the final one: the last S versions are never sent
    (at least the final one is).  ``steps`` None: a round of the steady
    state, (1, 1)."""
    if steps is None:
        return 1.0
    sent = max(steps - 1 - staleness, 0) + 1
    return (steps + sent) / (2 * steps)


def traffic(strategy: str, n: int, psi: float, b: int = 2, rank: int = 0,
            accum: int = 1, staleness: int = 0, steps: int | None = None) -> float:
    """Predicted bytes per rank per step (see traffic_convention); the
    parameter server's over ``steps`` steps with ``staleness`` (ps_rounds),
    where ``steps`` is given."""
    if n == 1:
        return 0.0
    f = (n - 1) / n * psi * b
    if strategy in ("ddp", "zero1"):
        return 2 * f
    if strategy == "zero2":    # reduce-scatter every micro-batch, one all-gather
        return (accum + 1) * f
    if strategy == "zero3":    # all-gather forward and backward, reduce-scatter, per micro-batch
        return 3 * accum * f
    if strategy == "ps":
        per_worker = 2 * psi * b * ps_rounds(steps, staleness)
        return (n - 1) * per_worker if rank == 0 else per_worker
    raise ValueError(f"unknown strategy {strategy!r}")


def memory(strategy: str, n: int, psi: float, k: int = 12, rank: int = 0,
           staleness: int = 0) -> float:
    """Predicted model-state bytes per rank: half (fp16 or bf16) params (2Ψ), half grads
    (2Ψ), optimizer states (KΨ), each divided by N where partitioned."""
    if strategy == "ddp" or n == 1:
        return (2 + 2 + k) * psi
    if strategy == "zero1":
        return 2 * psi + 2 * psi + k * psi / n
    if strategy == "zero2":
        return 2 * psi + (2 + k) * psi / n
    if strategy == "zero3":
        return (2 + 2 + k) * psi / n
    if strategy == "ps":       # the server keeps the S+1 versions a worker may still take
        return (2 * (staleness + 1) + 2 + k) * psi if rank == 0 else 4 * psi
    raise ValueError(f"unknown strategy {strategy!r}")


def zero_table(psi: float, n: int, k: int = 12) -> list[tuple[str, str, float]]:
    """(stage, formula, bytes per device) as in table 1 of the ZeRO paper."""
    return [
        ("baseline (DDP)", "(2+2+K)Ψ", memory("ddp", n, psi, k)),
        ("ZeRO-1 (P_os)", "2Ψ+2Ψ+KΨ/N", memory("zero1", n, psi, k)),
        ("ZeRO-2 (P_os+g)", "2Ψ+(2+K)Ψ/N", memory("zero2", n, psi, k)),
        ("ZeRO-3 (P_os+g+p)", "(2+2+K)Ψ/N", memory("zero3", n, psi, k)),
    ]


def inter_traffic(strategy: str, host_of: list[int], psi: float, b: int = 2, rank: int = 0,
                  accum: int = 1, hierarchical: bool = False, staleness: int = 0,
                  steps: int | None = None) -> float | None:
    """Predicted bytes that rank ``rank`` moves to other hosts per step (the
    convention of ``traffic``), ranks on hosts ``host_of`` (docs/hosts.md).

    The parameter server's messages are to and from rank 0: a worker on
    another host than the server's moves all of its 2·Ψ·b across, the server
    2·Ψ·b per such worker (times ``ps_rounds`` with staleness over
    ``steps``).  The flat ring sends everything to the next rank, so a rank
    moves all of its bytes across or none, as its right-hand neighbour is on
    another host or not.  The hierarchical algorithms (on
    hosts of L ranks each) move across the textbook bytes of H ranks, one per
    host, shared by the L ranks of a host.  None where there is no such
    figure (another algorithm, or hierarchical on hosts of unequal sizes)."""
    n, hosts = len(host_of), max(host_of) + 1
    if hosts == 1:
        return 0.0
    away = [h != host_of[rank] for h in host_of]
    if strategy == "ps":
        per_worker = 2 * psi * b * ps_rounds(steps, staleness)
        if rank == 0:
            return per_worker * sum(away)
        return per_worker if away[0] else 0.0
    if not hierarchical:
        return traffic(strategy, n, psi, b, rank, accum) if away[(rank + 1) % n] else 0.0
    sizes = {host_of.count(h) for h in range(hosts)}
    if len(sizes) > 1:
        return None
    return traffic(strategy, hosts, psi, b, 0, accum) / sizes.pop()
