"""Fault scenarios, run under mpiexec by test_faults.py.

    mpiexec [-disable-auto-cleanup] -n N python tests/faults.py SCENARIO TRANSPORT OUTDIR

late:  the last rank never calls the collective; the others must raise
       CollectiveTimeout naming the call (and, on shm, the late rank).
kill:  rank 1 SIGKILLs itself at a random moment inside a stream of
       collectives; every survivor must raise PeerFailure or CollectiveTimeout.
raise: rank 1's transport raises after a random number of messages, inside
       a collective of the stream; rank 1 leaves (as a program that does not
       catch it would) and every survivor must raise PeerFailure or
       CollectiveTimeout.
trainer: rank 1 SIGKILLs itself at a random moment of a DDP training step.
split: rank 1 SIGKILLs itself at once; the others call comm.split, which
       must raise PeerFailure or CollectiveTimeout (not wait in MPI forever).
uncaught: rank 1 raises an uncaught exception while the others wait in a
       barrier: the excepthook that cc.init installs aborts the whole job.
interrupt: (2 ranks) rank 1 is interrupted (KeyboardInterrupt, as Ctrl-C
       raises it) inside a broadcast from it of 8 MB, after it has posted its
       sends; the memory of its buffer then goes (as it does when a process
       exits) while it stays alive, before rank 0 joins the call.  Rank 0
       must raise the library's error naming rank 1 and its
       KeyboardInterrupt, and its next call, a barrier, an error that starts
       with "barrier:" and names the broadcast.
cut:   (tests/test_cluster.py) a stream of all-reduces until an error; the
       test cuts a host's link meanwhile.  Every rank reports its error.
flap:  (tests/test_cluster.py) FLAP_CALLS all-reduces of 1 MB, each result
       checked; the test takes a host's link down for less than the
       timeout meanwhile.  Every rank reports how many results were wrong.
stall: the last rank arrives late, but before the timeout; the others log
       where they wait (COLLECTIVES_STALL_WARN) and finish normally.
slow:  (2 ranks, one slot of 4 KiB per channel, a timeout of 1 s) a message
       of SLOW_SLOTS slots moves one slot per poll of a handle that its owner
       polls every SLOW_NAP s: about 2.4 s, more than twice the timeout, in
       which the peer's blocking call sees progress every few ms and must
       not time out.  Rank 0 is the slow sender, then the slow receiver.
dead:  (tests/test_cluster.py) rank $FAULT_VICTIM SIGKILLs itself after a
       barrier; every other rank waits a second, then sends it four messages
       of 1 MiB (comm.isend, each polled once) and waits for them: each must
       raise PeerFailure or CollectiveTimeout within the timeout (MPICH's ofi
       netmod, unbounded, spins for good in the second MPI_Isend to a dead
       rank on another host).
Every rank writes OUTDIR/rank<r>.json with its pid and what it saw, then
leaves with os._exit (MPI cannot finalize with a dead peer).  The victim of
kill is rank $FAULT_VICTIM (1 where unset); ranks write "running" once their
first calls are done.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives as cc  # noqa: E402

TIMEOUT = 3.0
VICTIM = int(os.environ.get("FAULT_VICTIM", "1"))
FLAP_CALLS = 400
FLAP_TIMEOUT = 10.0  # the flap scenario's: longer than the link is down, and TCP's resends
SLOW_TIMEOUT = 1.0  # the slow scenario's
SLOW_NAP, SLOW_SLOTS = 0.004, 600
SLOW_LIMIT = 15.0  # seconds a slow side polls before it reports "stuck" (its peer gave up)


def write(outdir: str, rank: int, **info) -> None:
    path = os.path.join(outdir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), **info}, f)
    os.replace(path + ".tmp", path)


def stream(comm, calls: list[str]) -> None:
    """``calls``: collectives, each maybe with its algorithm (``all_gather:one_copy``;
    the one-copy ones on arrays of 8 MB, so that a kill lands inside a read;
    ``gather_v`` without counts on blocks of 8 and 4 MB)."""
    n, r = comm.size, comm.rank
    small = np.ones(200_000, np.float32), np.ones((n, 50_000), np.float32)
    large = (np.ones(2_000_000, np.float32), np.ones((n, 500_000), np.float32)) \
        if any(c.endswith(":one_copy") or c == "gather_v" for c in calls) else small
    for i in range(100000):
        call, _, alg = calls[i % len(calls)].partition(":")
        x, blocks = large if alg == "one_copy" else small
        kw = {"algorithm": alg} if alg else {}
        if call == "all_reduce":
            comm.all_reduce(x, **kw)
        elif call == "broadcast":
            comm.broadcast(x, root=i % n, **kw)
        elif call == "all_gather":
            comm.all_gather(x[:x.size // 4], **kw)
        elif call == "reduce_scatter":
            comm.reduce_scatter(blocks, **kw)
        elif call == "all_to_all":
            comm.all_to_all(blocks, **kw)
        elif call == "reduce":
            comm.reduce(x, root=i % n, **kw)
        elif call == "gather":
            comm.gather(x[:x.size // 4], root=i % n, **kw)
        elif call == "all_gather_v":  # no counts: learned in the call
            comm.all_gather_v(x[:x.size // (2 + r % 2)], **kw)
        elif call == "all_to_all_v":  # no recv_counts: learned in the call
            comm.all_to_all_v(blocks.reshape(-1), [blocks.shape[1]] * n, **kw)
        elif call == "gather_v":  # no counts: blocks of 8 and 4 MB (each rank writes its own)
            big = large[0]
            comm.gather_v(big[:big.size // (1 + r % 2)], root=i % n, **kw)
        elif call == "scatter":
            comm.scatter(blocks if r == i % n else None, np.empty(blocks.shape[1], np.float32),
                         root=i % n, **kw)
        elif call == "p2p":
            h = comm.isend(x, (r + 1) % n)
            comm.recv(np.empty_like(x), (r - 1) % n)
            h.wait()
        else:
            comm.barrier()


def slow(comm) -> dict:
    """The slow scenario on ranks 0 and 1: {phase: seconds, "wrong data" or "stuck"}."""
    r = comm.rank
    x = np.arange(SLOW_SLOTS * 4096 // 8, dtype=np.float64)
    out = np.zeros_like(x)
    took = {}

    def polled(h) -> bool:  # each done() moves at most one slot
        end = time.monotonic() + SLOW_LIMIT
        while not h.done():
            if time.monotonic() > end:
                return False
            time.sleep(SLOW_NAP)
        return True
    for phase in ("slow sender", "slow receiver"):
        out[:] = 0
        t0 = time.monotonic()
        moved = True
        if r == 0 and phase == "slow sender":
            moved = polled(comm.isend(x, 1))
        elif r == 0:
            moved = polled(comm.irecv(out, 1))
        elif phase == "slow sender":  # rank 1 blocks while rank 0 trickles
            comm.recv(out, 0)
        else:
            comm.send(x, 0)
        took[phase] = time.monotonic() - t0
        if not moved:
            took[phase] = "stuck"
            break
        if (r == 1) == (phase == "slow sender") and not np.array_equal(out, x):
            took[phase] = "wrong data"
    return took


class InjectedFault(RuntimeError):
    pass


def inject(comm, after: int) -> None:
    """Make this rank's transport raise on its ``after``-th message (or
    exchange), inside whichever collective or send/recv it is in."""
    count = [0]
    for ep in (comm._t.coll, comm._t.p2p):
        for name in ("isend", "irecv", "irecv_reduce", "exchange"):
            real = getattr(ep, name)

            def fail(*a, _real=real, **k):
                count[0] += 1
                if count[0] >= after:
                    raise InjectedFault(f"injected fault at message {count[0]}")
                return _real(*a, **k)
            setattr(ep, name, fail)


def interrupted(comm, outdir: str) -> None:
    """The interrupt scenario (see the module)."""
    import ctypes
    import mmap
    nbytes = 8 << 20
    if comm.rank == 1:
        area = mmap.mmap(-1, nbytes)
        x = np.frombuffer(area, np.uint8)
        x[:] = 1
        ep = comm._t.coll

        def interrupt(*a, **k):
            raise KeyboardInterrupt
        for name in ("waitall", "exchange", "expose"):  # where a call waits or publishes
            if hasattr(ep, name):
                setattr(ep, name, interrupt)
        try:
            comm.broadcast(x, root=1)
        except KeyboardInterrupt:
            address = ctypes.addressof(ctypes.c_char.from_buffer(area))
            ctypes.CDLL(None).munmap(ctypes.c_void_p(address), ctypes.c_size_t(nbytes))
            write(outdir, 1, state="interrupted")
            linger(outdir, comm.size, skip={1})
            os._exit(1)
        write(outdir, 1, state="no interrupt")
        os._exit(1)
    time.sleep(1.0)  # rank 1 has given up and unmapped its buffer
    try:
        comm.broadcast(np.zeros(nbytes, np.uint8), root=1)
    except cc.CollectiveError as e:
        first = e
    else:
        write(outdir, comm.rank, state="no error")
        return
    try:
        comm.barrier()
        after = "no error"
    except cc.CollectiveError as e:
        after = str(e)
    raise _Reported(first, after)


class _Reported(Exception):
    """The interrupt scenario's two errors, for main's report."""

    def __init__(self, first, after: str):
        super().__init__(str(first))
        self.first, self.after = first, after


def _stacks() -> str:
    """Every thread's Python stack, then each OS thread's state, kernel wait
    channel and system call (/proc), which tell a rank blocked inside a C
    call from one that loops."""
    import traceback
    tasks = []
    for tid in sorted(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else ():
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/self/task/{tid}/wchan") as f:
                wchan = f.read().strip()
            with open(f"/proc/self/task/{tid}/syscall") as f:
                call = f.read().split()[0]
        except (OSError, IndexError):
            continue
        tasks.append(f"{tid} {state} {wchan or '-'} syscall {call}")
    python = "\n".join(f"thread {t}:\n" + "".join(traceback.format_stack(f))
                       for t, f in sys._current_frames().items())
    return python[-5000:] + "\ntasks: " + "; ".join(tasks)


def main(scenario: str, transport: str, outdir: str, calls: str = "all_reduce") -> None:
    # The launcher signals the survivors of a death (hydra: SIGUSR1, gforker:
    # SIGINT/SIGQUIT): ignore those so that the library's own detection is
    # what this tests.
    if scenario != "uncaught":
        for sig in (signal.SIGUSR1, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    # a survivor that dies of a signal leaves its stack here (test_faults
    # shows it)
    import faulthandler
    me = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or os.getpid()
    crash = open(os.path.join(outdir, f"crash{me}.txt"), "w")
    faulthandler.enable(file=crash)
    timeout = {"uncaught": 60, "slow": SLOW_TIMEOUT, "flap": FLAP_TIMEOUT}.get(scenario, TIMEOUT)
    comm = cc.init(transport=transport, timeout=timeout)
    r, n = comm.rank, comm.size
    write(outdir, r, state="started")
    t0 = time.monotonic()
    # a rank still inside the scenario well past its timeout reports where it
    # is (every thread's stack), so that a hang shows in the test's message
    watchdog = threading.Timer(timeout + 10, lambda: write(outdir, r, state="hung",
                                                          stacks=_stacks()))
    watchdog.daemon = True
    watchdog.start()
    try:
        if scenario == "late":
            comm.barrier()
            if r == n - 1:
                time.sleep(TIMEOUT + 1)
                linger(outdir, n, skip={n - 1})
                write(outdir, r, state="late")
                os._exit(0)
            comm.all_reduce(np.ones(1000))
            write(outdir, r, state="no error")
        elif scenario == "kill":
            if r == VICTIM:
                delay = random.Random(os.getpid()).uniform(0.05, 0.6)
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            stream(comm, calls.split(","))
            write(outdir, r, state="no error")
        elif scenario == "cut":
            x = np.ones(250_000, np.float32)
            for i in range(10 ** 9):
                comm.all_reduce(x)
                if i == 20:
                    write(outdir, r, state="running")
        elif scenario == "flap":
            x = np.arange(250_000, dtype=np.float32) + r
            want = np.arange(250_000, dtype=np.float32) * n + n * (n - 1) // 2
            wrong = 0
            for i in range(FLAP_CALLS):
                wrong += not np.array_equal(comm.all_reduce(x), want)
                if i == 20:
                    write(outdir, r, state="running")
            write(outdir, r, state="no error", wrong=wrong, seconds=time.monotonic() - t0)
        elif scenario == "raise":
            if r == 1:
                inject(comm, random.Random(os.getpid()).randint(1, 60))
            try:
                stream(comm, calls.split(","))
            except InjectedFault as e:
                write(outdir, r, state="raised", message=str(e))
                os._exit(1)
            write(outdir, r, state="no error")
        elif scenario == "trainer":
            # imported before the victim's timer starts (the trainer's import
            # of ml_dtypes takes about half a second), so that the kill lands
            # in the steps, not in the setup's splits (a death inside
            # MPI_Comm_split itself can hang: docs/reliability.md)
            from trainer.model import ModelConfig
            from trainer.strategies.base import TrainConfig
            from trainer.train import run
            if r == 1:
                delay = random.Random(os.getpid()).uniform(0.3, 1.5)
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            run(TrainConfig(strategy=calls, steps=10000, batch=32, bucket_mb=0.25,
                            model=ModelConfig(d_in=64, width=256, layers=4, d_out=64)),
                comm, progress=False, table=False)
            write(outdir, r, state="no error")
        elif scenario == "split":
            if r == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            comm.split(0)
            write(outdir, r, state="no error")
        elif scenario == "stall":
            if r == n - 1:
                time.sleep(float(os.environ["COLLECTIVES_STALL_WARN"]) + 0.7)
            comm.all_reduce(np.ones(1000))
            write(outdir, r, state="no error")
        elif scenario == "slow":
            took = slow(comm) if r < 2 else {}
            write(outdir, r, state="no error", took=took)
        elif scenario == "interrupt":
            interrupted(comm, outdir)
        elif scenario == "dead":
            comm.barrier()
            if r == VICTIM:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(1.0)
            x, sent = np.ones(1 << 17), []
            for _ in range(4):
                sent.append(comm.isend(x, VICTIM))
                sent[-1].done()  # MPI's progress between the sends, as a wait's polls give
            for h in sent:
                h.wait()
            write(outdir, r, state="no error")
        elif scenario == "uncaught":
            if r == 1:
                raise RuntimeError("an error in rank 1's own code")
            comm.barrier()
            write(outdir, r, state="no error")
    except cc.CollectiveError as e:
        write(outdir, r, state="error", error=type(e).__name__, message=str(e),
              call=e.call, ranks=e.ranks, seconds=time.monotonic() - t0,
              timeout_error=isinstance(e, TimeoutError))
    except _Reported as rep:
        e = rep.first
        write(outdir, r, state="error", error=type(e).__name__, message=str(e),
              call=e.call, ranks=e.ranks, seconds=time.monotonic() - t0,
              timeout_error=isinstance(e, TimeoutError), next_message=rep.after)
    except BaseException as e:  # anything else is a bug: say which, then leave
        if scenario == "uncaught" and r == 1:
            raise  # to the excepthook that cc.init installed, which aborts the job
        import traceback
        write(outdir, r, state="crashed", error=type(e).__name__, message=str(e),
              traceback=traceback.format_exc()[-3000:])
        os._exit(3)
    watchdog.cancel()
    skip = {VICTIM} if scenario in ("kill", "dead") \
        else {1} if scenario in ("raise", "trainer", "split", "interrupt") \
        else set() if scenario in ("slow", "stall") \
        else {n - 1}
    linger(outdir, n, skip=skip)
    os._exit(0)


def linger(outdir: str, n: int, skip: set) -> None:
    """Stay alive until every other survivor has reported: hydra ends the whole
    job as soon as one process leaves without MPI_Finalize.  Gone as well
    once the test has removed ``outdir`` (it has every report: Open MPI's
    launcher can return before the survivors have left, and a linger that
    then read no report waited out its whole time)."""
    end = time.monotonic() + 4 * TIMEOUT + 10
    while time.monotonic() < end and os.path.isdir(outdir):
        states = []
        for r in set(range(n)) - skip:
            try:
                with open(os.path.join(outdir, f"rank{r}.json")) as f:
                    states.append(json.load(f)["state"])
            except (OSError, ValueError):
                states.append(None)
        if all(s not in (None, "started", "running") for s in states):
            return
        time.sleep(0.05)


if __name__ == "__main__":
    main(*sys.argv[1:])
