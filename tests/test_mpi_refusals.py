"""The mpi transport where MPI refuses a call that involves a peer (Open
MPI's fault-tolerant mode fails the posting of a send or receive, and a
probe, to or from a failed process with MPI_ERR_PROC_FAILED).

Under mpiexec at N = 2: rank 0's endpoints see rank 1 through a stand-in
for the MPI communicator whose Isend, Irecv and Iprobe to or from rank 1
raise MPI's error.  Every place that posts or probes (``isend``,
``irecv``, ``irecv_reduce``, ``probe``, a collective's look at its peers,
``strays``) raises a CollectiveError naming rank 1, a PeerFailure where
the error's class says the process failed, never MPI's own exception; a
notice to rank 1 that cannot be posted is dropped.  The stand-in then goes
and both ranks end with a collective whose result is checked."""
from __future__ import annotations

from emulate import run_script

SCRIPT = r"""
import json, sys
import numpy as np
from mpi4py import MPI
import collectives as cc
from transports import mpi as tmpi
from transports.errors import CollectiveError, PeerFailure

out_path, transport = sys.argv[1], sys.argv[2]
comm = cc.init(transport)
r = comm.rank
# the class MPI gives a failed process where it has one (Open MPI), else
# a generic failure
failed = sorted(tmpi._PROC_FAILED)
code = failed[0] if failed else MPI.ERR_OTHER
want = PeerFailure if failed else CollectiveError


class Refusing:
    # the communicator, but every call to or from rank 1 fails
    def __init__(self, comm):
        self.comm = comm

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def _refuse(self, peer):
        if peer == 1:
            raise MPI.Exception(code)

    def Isend(self, buf, dest, tag=0):
        self._refuse(dest)
        return self.comm.Isend(buf, dest, tag)

    def Irecv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        self._refuse(source)
        return self.comm.Irecv(buf, source, tag)

    def Iprobe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        self._refuse(source)
        return self.comm.Iprobe(source, tag, status)


got = {}
comm.barrier()
if r == 0:
    t = comm._t
    eps = (t.coll, t.p2p)
    real = [ep.comm for ep in eps] + [t.notices.comm]
    for ep in eps:
        ep.comm = Refusing(ep.comm)
    t.notices.comm = Refusing(t.notices.comm)
    ep = t.coll
    x = np.ones(4)
    for name, call in [("isend", lambda: ep.isend(x, 1)),
                       ("irecv", lambda: ep.irecv(np.empty(4), 1)),
                       ("irecv_reduce", lambda: ep.irecv_reduce(np.ones(4), 1, np.add)),
                       ("p2p isend", lambda: t.p2p.isend(x, 1, 7)),
                       ("probe", lambda: ep.probe([1])),
                       ("iprobe", lambda: ep._iprobe(1, 0, MPI.Status())),
                       ("_probe", lambda: ep._probe()),
                       ("strays", lambda: ep.strays() or None),
                       ("notify", lambda: t.notify(1, "a word to a rank that takes none"))]:
        try:
            call()
            got[name] = "returned"
        except BaseException as e:
            got[name] = [type(e).__name__, isinstance(e, want), list(getattr(e, "ranks", [])),
                         str(e)[:200]]
    for ep, c in zip(eps, real):
        ep.comm = c
    t.notices.comm = real[-1]
    t.notices.told = False
comm.barrier()
y = comm.all_reduce(np.full(5, r + 1.0))
got["all_reduce"] = y.tolist()
if r == 0:
    got["want"] = want.__name__
    with open(out_path, "w") as f:
        json.dump(got, f)
comm.close()
"""


def test_refused_posts_and_probes_raise_a_collective_error(tmp_path):
    got = run_script(tmp_path, SCRIPT, "mpi", n=2)
    for name in ("isend", "irecv", "irecv_reduce", "p2p isend", "probe", "iprobe", "_probe"):
        kind, wanted, ranks, words = got[name]
        assert wanted and ranks == [1], (name, got[name], got["want"])
        assert "rank" in words and "1" in words, (name, words)
    # at close, a failed peer takes no word; a notice to it is dropped
    assert got["strays"] == "returned", got["strays"]
    assert got["notify"] == "returned", got["notify"]
    assert got["all_reduce"] == [3.0] * 5
