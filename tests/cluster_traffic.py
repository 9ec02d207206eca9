"""Run under tests/test_cluster.py on real hosts: the library's count of
inter-host bytes beside the kernel's count of the bytes on each host's link.

    python tests/cluster_traffic.py TRANSPORT OUT.json

Per call (every collective at 4 MiB, twice), between two barriers of the
world: the bytes that the ranks of each host sent to and received from
other hosts (comm.traffic's inter_sent_bytes/inter_recv_bytes, summed over
the host's ranks) and the host's link device's tx/rx bytes and packets
and its namespace's retransmitted TCP segments, read by the host's first
rank.  Rank 0 writes {call: {host: {...}}}.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402

DEV = os.environ.get("CLUSTER_DEV", "eth0")
S = 4 << 20
CALLS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
         "gather", "scatter")


WIRE = ("tx", "rx", "tx_packets", "rx_packets", "retrans")


def link() -> tuple[int, ...]:
    """The host's link device's bytes and packets each way, and the TCP
    segments its namespace has retransmitted (/proc/net/snmp is the reading
    process's namespace's)."""
    base = f"/sys/class/net/{DEV}/statistics/"
    got = []
    for name in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
        with open(base + name) as f:
            got.append(int(f.read()))
    with open("/proc/net/snmp") as f:
        tcp = [line.split() for line in f if line.startswith("Tcp:")]
    got.append(int(tcp[1][tcp[0].index("RetransSegs")]))
    return tuple(got)


def call(comm, name: str) -> None:
    n = comm.size
    x = np.ones(S // 4, np.float32)
    blocks = np.ones((n, S // 4 // n), np.float32)
    if name == "all_reduce":
        comm.all_reduce(x)
    elif name == "broadcast":
        comm.broadcast(x, root=n - 1)
    elif name == "reduce":
        comm.reduce(x, root=n - 1)
    elif name == "all_gather":
        comm.all_gather(x[:x.size // n])
    elif name == "reduce_scatter":
        comm.reduce_scatter(blocks)
    elif name == "all_to_all":
        comm.all_to_all(blocks)
    elif name == "gather":
        comm.gather(x[:x.size // n], root=n - 1)
    else:
        comm.scatter(blocks if comm.rank == n - 1 else None, np.empty(blocks.shape[1], np.float32),
                     root=n - 1)


def main(transport: str, out: str) -> int:
    comm = cc.init(transport=transport)
    first = comm.local_rank == 0
    results: dict = {}
    for name in CALLS:
        call(comm, name)  # the first call's connections and buffers are set up
        comm.barrier()
        t = comm.traffic  # a snapshot
        lib0 = t.inter_sent_bytes, t.inter_recv_bytes
        none = (0,) * len(WIRE)
        wire0 = link() if first else none
        comm.barrier()
        for _ in range(2):
            call(comm, name)
        comm.barrier()
        wire1 = link() if first else none
        comm.barrier()
        t = comm.traffic
        lib = (t.inter_sent_bytes - lib0[0], t.inter_recv_bytes - lib0[1])
        mine = {"host": comm.host, "first": first, "sent": lib[0], "recv": lib[1],
                **{k: b - a for k, a, b in zip(WIRE, wire0, wire1)}}
        everyone = _gather(comm, mine)
        hosts: dict = {}
        for m in everyone:
            h = hosts.setdefault(str(m["host"]), {"sent": 0, "recv": 0, **dict.fromkeys(WIRE, 0)})
            h["sent"] += m["sent"]
            h["recv"] += m["recv"]
            if m["first"]:
                h.update({k: m[k] for k in WIRE})
        results[name] = hosts
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump({"transport": comm.transport, "results": results}, f)
    comm.close()
    return 0


def _gather(comm, mine: dict) -> list[dict]:
    """Every rank's figures, through a fixed-size all_gather of int64s."""
    keys = ("host", "first", "sent", "recv", *WIRE)
    row = np.array([int(mine[k]) for k in keys], np.int64)
    got = comm.all_gather(row).reshape(comm.size, len(keys))
    return [dict(zip(keys, map(int, r))) for r in got]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
