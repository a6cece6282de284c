"""Runs emitted ahead of their due time, remembered until it comes.

With a lookahead of L ms the scheduler emits each run request up to L ms before it is
due (``SchedulerConfig.lookahead_ms``); the worker holds it until its due time. A job
paused or deleted in between would still run: the processor asks ``AheadRuns`` for the
job's runs not yet due and cancels them through the control topic (the worker records
a paused job's run SKIPPED, as the scheduler would have).

Memory: one entry per run emitted in the last L ms (at 10,000 fires/s and L = 1 s,
10,000 entries); entries are dropped once due.
"""

from __future__ import annotations

from collections import deque


class AheadRuns:
    def __init__(self) -> None:
        self._by_job: dict[str, list[tuple[int, str]]] = {}
        # (due, job id) in the order emitted, nearly due order: what ``prune`` walks.
        self._order: deque[tuple[int, str]] = deque()

    def __len__(self) -> int:
        return len(self._order)

    def add(self, job_id: str, due_ms: int, run_id: str) -> None:
        runs = self._by_job.get(job_id)
        if runs is None:
            self._by_job[job_id] = [(due_ms, run_id)]
        else:
            runs.append((due_ms, run_id))
        self._order.append((due_ms, job_id))

    def take(self, job_id: str, now_ms: int) -> list[str]:
        """The run ids of ``job_id`` emitted ahead and due after ``now_ms``, forgotten."""
        runs = self._by_job.pop(job_id, [])
        return [run_id for due, run_id in runs if due > now_ms]

    def prune(self, now_ms: int) -> None:
        """Forget the runs due by ``now_ms`` (the worker starts them, whatever comes)."""
        order, by_job = self._order, self._by_job
        while order and order[0][0] <= now_ms:
            _, job_id = order.popleft()
            runs = by_job.get(job_id)
            if runs is None:
                continue
            if runs[0][0] <= now_ms:
                kept = [entry for entry in runs if entry[0] > now_ms]
                if kept:
                    by_job[job_id] = kept
                else:
                    del by_job[job_id]
