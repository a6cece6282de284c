"""The precision metric: a worker counts each started run's lateness, its start
minus its due time, in its priority's series of ``cronstream_worker_start_skew_seconds``,
on which the precision alert pages (infra/prometheus/rules_test.yml: runs started 2 s
after their due time raise it)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.runtime import metrics
from cronstream.schemas.events import Priority, Target
from tests.processors import WORKER_SETTINGS
from tests.unit.test_worker_parts import TOPICS, Parts, outcomes_of, run

NAME = "cronstream_worker_start_skew_seconds"


class _Done:
    kind = "python"

    def execute(self, _target: Target, _context: RunContext) -> str:
        return "ok"


def _late_by_1_to_2_5_s() -> dict[str, float]:
    """Per priority: starts counted in the (1 s, 2.5 s] bucket, and in all."""

    def sample(suffix: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(f"{NAME}{suffix}", labels) or 0.0

    return {
        f"{p.value} {what}": value
        for p in Priority
        for what, value in (
            (
                "late",
                sample("_bucket", priority=p.value, le="2.5")
                - sample("_bucket", priority=p.value, le="1.0"),
            ),
            ("all", sample("_count", priority=p.value)),
        )
    }


def test_a_run_started_2_s_after_its_due_time_counts_in_its_priority_series_alone() -> None:
    parts = Parts()
    parts.own(TOPICS.runs(Priority.HIGH))
    # Plaintext settings: the attempts' producer needs no stack's password (a fresh clone).
    attempts = Attempts(
        WORKER_SETTINGS,
        WorkerConfig(group="g", concurrency=2),
        outbox=parts.outbox,
        dedup=parts.dedup,
        cancels={},
        tally=metrics.Tally(),
    )
    attempts.executors["python"] = _Done()
    before = _late_by_1_to_2_5_s()
    late = replace(
        run("j@late", priority=Priority.HIGH), due_at=datetime.now(UTC) - timedelta(seconds=2)
    )
    manual = run("j@manual", priority=Priority.HIGH)  # no due time: not counted
    outcomes_of(attempts, parts, late, manual)
    after = _late_by_1_to_2_5_s()
    changed = {key: after[key] - before[key] for key in after if after[key] != before[key]}
    assert changed == {"HIGH late": 1.0, "HIGH all": 1.0}
    # Every priority's series exists from the worker's start, at 0 before its first run.
    assert metrics.REGISTRY.get_sample_value(f"{NAME}_count", {"priority": "LOW"}) is not None
