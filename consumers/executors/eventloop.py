"""One event loop on a daemon thread, for the attempts that wait on sockets (http).

A run thread per attempt in flight costs the worker a thread switch, a request object
and a blocking socket call per run; an attempt on this loop is a coroutine beside the
others (an http run cost the worker 1,362 us of CPU on a thread). The worker's
loop hands an attempt over with ``submit``: one append to a deque, and a wake-up of the
event loop only when it is not already due to look (so a batch of starts costs one
wake-up, not one each). A finished attempt puts ``(token, result, error)`` on the
worker's ``done`` queue, as a run thread does (``consumers.executors.pool``, whose
``Done`` it is), so the worker collects both the same way.

uvloop runs the loop where it is installed (about half the CPU of asyncio's own loop per
request); asyncio's otherwise.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Coroutine
from queue import SimpleQueue
from typing import Any, Generic, TypeVar

from cronstream.consumers.executors.pool import Done

T = TypeVar("T")
R = TypeVar("R")
Attempt = Coroutine[Any, Any, Any]


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; asyncio's still works
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread(Generic[T]):
    def __init__(self, name: str) -> None:
        self.loop = new_loop()
        self._incoming: deque[tuple[T, Attempt, SimpleQueue[Done[T]]]] = deque()
        self._woken = False  # a drain is scheduled on the loop and has not begun
        self._tasks: set[asyncio.Task[None]] = set()  # held until done (asyncio keeps weak refs)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, token: T, attempt: Attempt, done: SimpleQueue[Done[T]]) -> None:
        """Run ``attempt`` (a coroutine, not started) on the loop; ``(token, result,
        None)`` or ``(token, None, exception)`` goes on ``done`` when it ends. Called from
        another thread."""
        self._incoming.append((token, attempt, done))
        if not self._woken:
            self._woken = True
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._woken = False  # before taking: an append after this wakes the loop again
        incoming, tasks = self._incoming, self._tasks
        while incoming:
            token, attempt, done = incoming.popleft()
            task = self.loop.create_task(_finish(token, attempt, done))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def call(self, coroutine: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """``coroutine`` run on the loop, waited for by the calling thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        """Stop the loop (what is in flight is dropped: the worker is stopping)."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


async def _finish(token: T, attempt: Attempt, done: SimpleQueue[Done[T]]) -> None:
    try:
        result = await attempt
    except BaseException as exc:  # handed to the worker, which decides
        done.put((token, None, exc))
    else:
        done.put((token, result, None))
