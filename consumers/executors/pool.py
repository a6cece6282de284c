"""The threads that execute attempts for a worker.

A worker's main loop is single-threaded and is what limits runs per second, so handing
an attempt to a thread must cost it little: ``submit`` puts one tuple on a queue, and a
thread puts ``(token, result, error)`` on the worker's ``done`` queue when the call
returns. ``concurrent.futures.ThreadPoolExecutor`` builds a Future (a Condition and its
lock), runs callbacks and adjusts its thread count on every submit, and its threads
contend on the Future's condition; measured in the no-op drain, that was about a tenth
of the worker's CPU.

The threads are daemons: a python callable that ignores its deadline and cancel flag
cannot be stopped (``consumers.executors.python``), and must not keep a stopping worker
process alive either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Done = tuple[T, Any, BaseException | None]  # (token, result, error)
Call = tuple[T, Callable[..., Any], tuple[Any, ...]]  # (token, callable, arguments)


class RunPool(Generic[T]):
    def __init__(self, threads: int, done: SimpleQueue[Done[T]], *, name: str = "run") -> None:
        self.done = done
        self._work: SimpleQueue[Call[T] | None] = SimpleQueue()  # None: a thread ends
        self._name = name
        self._threads: list[threading.Thread] = []
        for _ in range(threads):
            self.add_thread()

    def add_thread(self) -> None:
        """Start one more thread (the worker replaces a thread stuck in a call it gave
        up on, so that stuck calls do not use up its concurrency)."""
        thread = threading.Thread(
            target=self._loop, name=f"{self._name}_{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def __len__(self) -> int:
        return len(self._threads)

    def submit(self, token: T, call: Callable[..., Any], *args: Any) -> None:
        """Run ``call(*args)`` on a free thread; ``(token, result, None)`` or
        ``(token, None, exception)`` goes on ``done`` when it returns or raises."""
        self._work.put((token, call, args))

    def _loop(self) -> None:
        work, done = self._work, self.done
        while True:
            item = work.get()
            if item is None:
                return
            token, call, args = item
            try:
                result = call(*args)
            except BaseException as exc:  # handed to the worker, which decides
                done.put((token, None, exc))
            else:
                done.put((token, result, None))
            del item, token, call, args

    def shutdown(self) -> None:
        """Drop the calls not started yet (their runs are not committed: the next owner
        reads them again), and let each thread end after its current call, without
        waiting for it."""
        while True:
            try:
                self._work.get_nowait()
            except Empty:
                break
        for _ in self._threads:
            self._work.put(None)
