"""What a worker remembers for dedup: run ids whose run settled or whose attempt
finished, seen on history or published by the worker itself.

Memory is what bounds it: a run id costs ~130 bytes, so a day of 10,000 runs/s would
take ~100 GB. Run ids are kept in generations (a new one every ``lookback_ms / 8``, or
once the newest holds ``capacity / 8``), each mapping a run id to its highest finished
attempt ``<< 2 | final`` (final: 0 not settled, else its final status's index in
``FINALS``: what a deadline check reports). ``prune`` drops whole generations: those
past the lookback, then the oldest while more than ``capacity`` run ids are held, but
never the newest, nor any while the worker replays history after an assignment. A run
redelivered or re-emitted after it was forgotten that way executes again, with the same
run id (the idempotency key).
"""

from __future__ import annotations

from collections import deque

FINALS = ("", "SUCCEEDED", "DEAD_LETTERED", "CANCELED")
RUN_DONE = frozenset(FINALS[1:])
_FINAL = {status: index for index, status in enumerate(FINALS) if status}
ATTEMPT_DONE = frozenset({"FAILED", "TIMED_OUT"})


class Dedup:
    GENERATIONS = 8

    def __init__(self, lookback_ms: int, capacity: int, *, now_ms: int) -> None:
        self.lookback_ms = lookback_ms
        self.capacity = capacity
        self.span_ms = max(1, lookback_ms // self.GENERATIONS)
        self.newest: dict[str, int] = {}
        self.generations: deque[tuple[int, dict[str, int]]] = deque([(now_ms, self.newest)])
        self.forgotten = 0  # run ids dropped before the lookback, because of ``capacity``

    def __len__(self) -> int:
        return sum(len(g) for _, g in self.generations)

    def note(self, run_id: str, attempt: int, status: str) -> None:
        """Remember an outcome; statuses other than final ones and FAILED/TIMED_OUT are
        ignored."""
        final = _FINAL.get(status, 0)
        if not final and status not in ATTEMPT_DONE:
            return
        # Attempts run one after the other: attempt n finished means every earlier did.
        old = self.newest.get(run_id, 0)
        self.newest[run_id] = max(old >> 2, attempt) << 2 | (final or old & 3)

    def seen(self, run_id: str, attempt: int) -> bool:
        """The run settled, or this attempt (or a later one) finished."""
        for _, generation in reversed(self.generations):
            code = generation.get(run_id)
            if code is not None and (code & 3 or code >> 2 >= attempt):
                return True
        return False

    def status(self, run_id: str) -> tuple[str, int]:
        """(the run's final status, "" while not settled; its highest finished attempt)."""
        final, attempt = 0, 0
        for _, generation in reversed(self.generations):
            code = generation.get(run_id)
            if code is not None:
                final = final or code & 3
                attempt = max(attempt, code >> 2)
        return FINALS[final], attempt

    def prune(self, now_ms: int, *, hold: bool = False) -> int:
        """Drop what is past the lookback, then (unless ``hold``: the worker still
        relies on every run id it read, replaying history after an assignment) the
        oldest generations while over the capacity, never the newest; then start a new
        generation when due. Returns how many run ids were dropped early (over the
        capacity)."""
        generations = self.generations
        # A generation is past the lookback once the one after it started before the cut.
        while len(generations) > 1 and generations[1][0] < now_ms - self.lookback_ms:
            generations.popleft()
        forgotten = 0
        if not hold:
            held = len(self)
            while len(generations) > 1 and held > self.capacity:
                _, dropped = generations.popleft()
                held -= len(dropped)
                forgotten += len(dropped)
        self.forgotten += forgotten
        full = len(self.newest) >= max(1, self.capacity // self.GENERATIONS)
        if full or now_ms - generations[-1][0] >= self.span_ms:
            self.newest = {}
            generations.append((now_ms, self.newest))
        return forgotten
