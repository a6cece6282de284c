"""The worker's run pool: results and errors come back with their token; calls not
started when it shuts down never run."""

from __future__ import annotations

import threading
from queue import SimpleQueue

from cronstream.consumers.executors.pool import Done, RunPool


def _boom(n: int) -> int:
    raise ValueError(f"boom {n}")


def test_results_and_errors_come_back_with_their_token() -> None:
    done: SimpleQueue[Done[str]] = SimpleQueue()
    pool: RunPool[str] = RunPool(4, done)
    for n in range(20):
        if n % 5 == 0:
            pool.submit(f"t{n}", _boom, n)
        else:
            pool.submit(f"t{n}", pow, n, 2)
    got = {}
    for _ in range(20):
        token, result, error = done.get(timeout=5)
        got[token] = (result, error)
    pool.shutdown()
    for n in range(20):
        result, error = got[f"t{n}"]
        if n % 5 == 0:
            assert result is None
            assert isinstance(error, ValueError)
            assert str(error) == f"boom {n}"
        else:
            assert (result, error) == (n * n, None)


def test_shutdown_drops_the_calls_not_started() -> None:
    done: SimpleQueue[Done[int]] = SimpleQueue()
    pool: RunPool[int] = RunPool(1, done)
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def hold() -> bool:
        started.set()
        return release.wait(5)

    pool.submit(0, hold)  # occupies the only thread
    assert started.wait(5)
    for n in range(1, 4):
        pool.submit(n, ran.append, n)
    pool.shutdown()
    release.set()
    assert done.get(timeout=5)[0] == 0
    for thread in pool._threads:
        thread.join(5)
        assert not thread.is_alive()
    assert ran == []
    assert done.empty()


def test_an_added_thread_takes_over_from_one_stuck_in_a_call() -> None:
    done: SimpleQueue[Done[str]] = SimpleQueue()
    pool: RunPool[str] = RunPool(1, done)
    stuck = threading.Event()
    pool.submit("stuck", stuck.wait, 30)
    pool.submit("next", pow, 3, 2)
    assert done.empty()  # the only thread is stuck: "next" waits
    pool.add_thread()
    assert done.get(timeout=5) == ("next", 9, None)
    assert len(pool) == 2
    stuck.set()
    assert done.get(timeout=5) == ("stuck", True, None)
    pool.shutdown()
