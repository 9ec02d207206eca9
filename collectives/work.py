"""Handles for non-blocking calls, and the in-order executor behind them.

Collectives of one communicator run one at a time, in the order issued, on a
single worker thread; a blocking call runs in the caller's thread when
nothing is queued, and queues behind the pending ones otherwise.  The worker
waits in the kernel (futex or MPI test-and-sleep), and numpy releases the
GIL while it copies and reduces, so the caller's computation goes on.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable


class Work:
    """A non-blocking call: ``wait()`` returns its result (or raises its error)."""

    def __init__(self, fn: Callable[[], Any], name: str):
        self._fn, self.name = fn, name
        self._event = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._result = self._fn()
        except BaseException as e:  # handed to whoever waits
            self._error = e
        finally:
            self._fn = None
            self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        if not self._event.wait(timeout):
            raise not_complete(self.name, timeout)
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self) -> str:
        return f"<Work {self.name} {'done' if self.done() else 'pending'}>"


def not_complete(name: str, timeout: float) -> TimeoutError:
    """What ``wait(timeout)`` raises when the call has not finished in time
    (the call goes on; waiting again is allowed)."""
    return TimeoutError(f"{name}: not complete after {timeout}s")


class Executor:
    def __init__(self, name: str):
        self._name = name
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Calls queued or running on the worker."""
        return self._pending

    def submit(self, fn: Callable[[], Any], name: str, async_op: bool) -> Any:
        if not async_op and not self._pending:
            return fn()
        w = Work(fn, name)
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=f"collectives-{self._name}")
                self._thread.start()
        self._q.put(w)
        return w if async_op else w.wait()

    def _loop(self) -> None:
        while True:
            w = self._q.get()
            if w is None:
                return
            w._run()
            w = None  # the call's arrays (regions too) go when their owner drops them
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.notify_all()

    def drain(self) -> None:
        """Wait until every queued call has finished."""
        with self._lock:
            while self._pending:
                self._idle.wait()

    def stop(self) -> None:
        self.drain()
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None
