"""Security checks of the shared-memory transport, run under mpiexec by test_security.py.

    mpiexec -n 2 python tests/security_checks.py segment OUTDIR
    COLLECTIVES_SHM_SLOT_BYTES=4096 mpiexec -n 2 python tests/security_checks.py corrupt OUTDIR

segment: the communicator's segment is set up through a wrapper of its MPI
         communicator that, once every rank has opened the segment and
         before it is unlinked, inspects the file on both ranks: a regular
         file of mode 0600 (under umask 0), owned by this user, that an
         O_EXCL create of the same name cannot take, and that uid 65534
         ('nobody') cannot open (as root only).  Rank 0 then creates segments
         in a world of one: 64 names, all different, every one of their 128
         random bits varying; a file or a symlink planted under the next name
         makes creation fail without touching it.
corrupt: rank 0 sends a message of three slots (4 KiB slots); rank 1 waits
         until they are all in the channel, overwrites a slot header (or the
         channel's head) in the segment, and receives into a view of a buffer
         with guard bytes on both sides.  Each case must raise a
         CollectiveError (not a timeout) naming rank 0 within 2 s, and leave
         the guards intact.
Each rank writes OUTDIR/rank<r>.json.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402
from transports import host_layout, shm  # noqa: E402
from transports.shm import segment as shm_segment  # noqa: E402

NOBODY = 65534
NAME = re.compile(r"collectives-([0-9a-f]{32})")


class Watch:
    """An MPI communicator that runs ``hook(path)`` when the segment's creator
    all-reduces 'every rank has mapped it', i.e. while the file still exists:
    the first all-reduce after each name (later ones, such as the start-up's
    probe of process_vm_readv, come after the unlink)."""

    def __init__(self, comm, hook):
        self._comm, self._hook = comm, hook
        self.names: list[str] = []
        self._hooked = 0  # how many of the names the hook has seen

    def Bcast(self, buf, root=0):  # the start-up exchanges are JSON in byte buffers
        self._comm.Bcast(buf, root=root)
        if getattr(buf, "dtype", None) == np.uint8:
            text = buf.tobytes().decode(errors="replace").strip('"')
            if text.startswith(shm.SHM_PREFIX):
                self.names.append(text)

    def Allreduce(self, mine, every, op):
        if len(self.names) > self._hooked:
            self._hooked = len(self.names)
            self._hook(os.path.join(shm.SHM_DIR, self.names[-1]))
        return self._comm.Allreduce(mine, every, op=op)

    def __getattr__(self, name):
        return getattr(self._comm, name)


def attach_as(uid: int, path: str) -> str:
    """Try to open ``path`` in a child process running as ``uid``."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            code = 4
            for flags, opened in ((os.O_RDWR, 1), (os.O_RDONLY, 2)):
                try:
                    os.close(os.open(path, flags))
                    code = opened
                    break
                except PermissionError:
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {0: "denied", 1: "opened read-write", 2: "opened read-only",
            3: "could not drop privileges", 4: "other error"}.get(
        os.waitstatus_to_exitcode(status), "crashed")


def inspect(path: str, rank: int) -> dict:
    st = os.lstat(path)
    out = {"regular": stat.S_ISREG(st.st_mode), "mode": oct(stat.S_IMODE(st.st_mode)),
           "uid": st.st_uid, "my_uid": os.getuid()}
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        out["excl_create"] = "succeeded"
    except FileExistsError:
        out["excl_create"] = "FileExistsError"
    if rank != 0:  # a process other than the creator
        out["other_user"] = attach_as(NOBODY, path) if os.getuid() == 0 else "skipped: not root"
        if os.getuid() == 0:  # control: the same user opens a file that lets everyone in
            control = path + "-control"
            os.close(os.open(control, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666))
            try:
                out["other_user_control"] = attach_as(NOBODY, control)
            finally:
                os.unlink(control)
    return out


def segment(outdir: str) -> dict:
    os.umask(0)  # the mode must come from the library, not from the umask
    world = MPI.COMM_WORLD.Dup()
    r = world.Get_rank()
    seen: list[dict] = []
    w = Watch(world, lambda path: seen.append(inspect(path, r)))
    pids, local, _ = host_layout(world)
    for _ in range(2):  # two communicators: two names
        t = shm.ShmTransport(w, 10.0, pids, local)
        world.Barrier()  # rank 0 has unlinked it
        seen[-1]["unlinked_after_setup"] = not os.path.lexists(
            os.path.join(shm.SHM_DIR, w.names[-1]))
        t.close()
    res = {"setup": seen, "names": w.names}
    if r == 0:
        res["alone"] = alone()
    world.Free()
    return res


def alone() -> dict:
    """Segments created by rank 0 in a world of one."""
    names: list[str] = []
    solo = Watch(MPI.COMM_SELF, lambda path: names.append(os.path.basename(path)))
    for _ in range(64):
        shm.open_segment(solo, 4096).close()
    bits = [int(NAME.fullmatch(n).group(1), 16) if NAME.fullmatch(n) else None for n in names]
    res = {"count": len(names), "distinct": len(set(names)),
           "well_formed": all(b is not None for b in bits)}
    if res["well_formed"]:
        ones = [sum(b >> i & 1 for b in bits) for i in range(128)]
        res["varying_bits"] = sum(0 < k < len(bits) for k in ones)
    res["planted_file"] = planted(solo, "file")
    res["planted_symlink"] = planted(solo, "symlink")
    return res


def planted(solo: Watch, kind: str) -> dict:
    """Plant a file or a symlink under the name the next creation draws."""
    token = os.urandom(16).hex()
    path = os.path.join(shm.SHM_DIR, shm.SHM_PREFIX + token)
    target = os.path.join(shm.SHM_DIR, "planted-target-" + token)
    with open(target if kind == "symlink" else path, "wb") as f:
        f.write(b"planted")
    if kind == "symlink":
        os.symlink(target, path)

    class Fixed:
        @staticmethod
        def token_hex(n):
            return token
    real, shm_segment.secrets = shm_segment.secrets, Fixed
    try:
        shm.open_segment(solo, 4096).close()
        outcome = "created"
    except cc.CollectiveError as e:
        outcome = f"CollectiveError: {e}"
    finally:
        shm_segment.secrets = real
    with open(path, "rb") as f:
        content = f.read()
    res = {"outcome": outcome, "untouched": content == b"planted",
           "still_a_link": os.path.islink(path) if kind == "symlink" else None}
    for p in (path, target):
        if os.path.lexists(p):
            os.unlink(p)
    return res


# -- corrupted headers ---------------------------------------------------------------

M = 10000         # message bytes: slots of 4096, 4096, 1808 with 4 KiB slots
G = 4096          # guard bytes on each side of the receive buffer
TAG, OTHER = 6, 5
GUARD = 0xA5
TOTAL, TAG_F, OFF, NBYTES, KIND = 1, 0, 2, 3, 4
WHERE = "where"   # a rendezvous slot's data: (process id, address)
P2P, COLL = 1, 0

# name -> (endpoint, [(slot, field, value)], how rank 1 receives)
#   receive "posted": recv of tag TAG (p2p) / gather at root 1 (coll);
#   "unexpected": recv of another tag, so the message is buffered as unexpected
CASES = {
    "total larger than the receive": (P2P, [(0, TOTAL, M + 4096)], "posted"),
    "total negative": (P2P, [(0, TOTAL, -1)], "posted"),
    "first slot at an offset": (P2P, [(0, OFF, 4096)], "posted"),
    "nbytes beyond the slot": (P2P, [(0, NBYTES, 4096 + 64)], "posted"),
    "nbytes negative": (P2P, [(0, NBYTES, -4096)], "posted"),
    "nbytes 2**62": (P2P, [(0, NBYTES, 1 << 62)], "posted"),
    "unknown kind": (P2P, [(0, KIND, 7)], "posted"),
    "external kind on shm": (P2P, [(0, KIND, shm.EXTERNAL)], "posted"),
    "rendezvous naming another process": (P2P, [(0, KIND, shm.RENDEZVOUS), (0, NBYTES, 16),
                                                (0, WHERE, (1, 4096))], "posted"),
    "rendezvous to a bad address": (P2P, [(0, KIND, shm.RENDEZVOUS), (0, NBYTES, 16),
                                          (0, WHERE, ("rank 0", 8))], "posted"),
    "second slot replays offset 0": (P2P, [(1, OFF, 0)], "posted"),
    "second slot skips ahead": (P2P, [(1, OFF, 8192)], "posted"),
    "offset negative": (P2P, [(1, OFF, -4096)], "posted"),
    "second slot changes tag": (P2P, [(1, TAG_F, TAG + 1)], "posted"),
    "second slot changes total": (P2P, [(1, TOTAL, 2 * M)], "posted"),
    "offset+nbytes beyond total": (P2P, [(2, NBYTES, 4096)], "posted"),
    "offset beyond total": (P2P, [(1, OFF, 2 * M)], "posted"),
    "head claims more slots than exist": (P2P, "head", "posted"),
    "unexpected message of 2**40 bytes": (P2P, [(0, TOTAL, 1 << 40)], "unexpected"),
    "unexpected message of 2**41 bytes": (P2P, [(0, TOTAL, 1 << 41)], "unexpected"),
    "unexpected message of negative size": (P2P, [(0, TOTAL, -M)], "unexpected"),
    "unexpected message runs past total": (P2P, [(2, NBYTES, 4096)], "unexpected"),
    "collective: tag of another call": (COLL, [(0, TAG_F, 99)], "posted"),
    "collective: total 2**40": (COLL, [(0, TOTAL, 1 << 40)], "posted"),
    "collective: offset+nbytes beyond total": (COLL, [(2, NBYTES, 4096)], "posted"),
    "collective: unknown kind": (COLL, [(1, KIND, -3)], "posted"),
}


def corrupt(outdir: str, timeout: float = 10.0) -> dict:
    r = MPI.COMM_WORLD.Get_rank()
    res = {}
    x = (np.arange(M) % 251).astype(np.uint8)
    for name, (ctx, change, how) in CASES.items():
        comm = cc.init(transport="shm", timeout=timeout)
        assert comm._t.slot_bytes == 4096, "run with COLLECTIVES_SHM_SLOT_BYTES=4096"
        if r == 0:
            if ctx == P2P:
                comm.send(x, 1, tag=TAG)
            else:  # the root refuses the block: this rank's send is never taken
                try:     # (gather's sends complete once received), and it learns of it
                    assert comm.gather(x, root=1, algorithm="linear") is None
                except cc.CollectiveError:
                    pass
        else:
            res[name] = tamper_and_receive(comm, ctx, change, how)
        MPI.COMM_WORLD.Barrier()
        comm.close()
    return res


def tamper_and_receive(comm, ctx: int, change, how: str) -> dict:
    t = comm._t
    ch = t.seg.channel(ctx, 0, 1)
    u32 = t.seg.u32
    end = time.monotonic() + 5
    while (u32[ch.head] - u32[ch.tail]) & shm.MASK < 3:  # the whole message is in
        if time.monotonic() > end:
            return {"outcome": "the message never arrived"}
        time.sleep(0.001)
    tail = u32[ch.tail]
    if change == "head":
        u32[ch.head] = (tail + ch.nslots + 1) & shm.MASK
    else:
        for slot, field, value in change:
            k = (tail + slot) & (ch.nslots - 1)
            if field == WHERE:
                pid, addr = value
                pid = t.liveness.pids[0] if pid == "rank 0" else pid
                ch.data[k][:16].view(np.int64)[:] = (pid, addr)
            else:
                ch.hdr[k][field] = value
    rows = 2 if ctx == COLL else 1
    big = np.full(rows * M + 2 * G, GUARD, np.uint8)
    out = big[G:G + rows * M]
    t0 = time.monotonic()
    res = {}
    try:
        if ctx == COLL:
            comm.gather(np.zeros(M, np.uint8), out=out.reshape(2, M), root=1, algorithm="linear")
        elif how == "posted":
            comm.recv(out, 0, tag=TAG)
        else:  # the corrupt message arrives while another tag is awaited
            comm.recv(out, 0, tag=OTHER)
        res["outcome"] = "no error"
    except cc.CollectiveError as e:
        res.update(outcome=type(e).__name__, message=str(e), ranks=e.ranks)
    except Exception as e:  # noqa: BLE001 - reported, the test fails on it
        res.update(outcome=type(e).__name__, message=str(e))
    res["seconds"] = time.monotonic() - t0
    res["guards_intact"] = bool((big[:G] == GUARD).all() and (big[G + rows * M:] == GUARD).all())
    return res


def main(scenario: str, outdir: str) -> int:
    res = {"segment": segment, "corrupt": corrupt}[scenario](outdir)
    with open(os.path.join(outdir, f"rank{MPI.COMM_WORLD.Get_rank()}.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
