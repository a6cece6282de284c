"""The per-job failure streak gauge (``runtime.cardinality.FailureStreaks``): a series per
failing job only, ended by a success, bounded in names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from cronstream.runtime.cardinality import FailureStreaks


def _series(registry: CollectorRegistry) -> dict[str, float]:
    return {s.labels["job_id"]: s.value for m in registry.collect() for s in m.samples}


def _streaks(limit: int = 100, track: int = 100_000) -> tuple[FailureStreaks, CollectorRegistry]:
    registry = CollectorRegistry()
    gauge = Gauge("streak", "test", ["job_id"], registry=registry)
    return FailureStreaks(gauge, limit=limit, track=track), registry


def test_failures_in_a_row_count_and_a_success_ends_the_series() -> None:
    streaks, registry = _streaks()
    for status in ("FAILED", "TIMED_OUT", "DEAD_LETTERED"):
        streaks.note("etl", status)
    streaks.note("etl", "CANCELED")  # neither a failure nor a success
    streaks.note("etl", "DUPLICATE")
    streaks.note("healthy", "SUCCEEDED")  # a healthy job has no series
    assert _series(registry) == {"etl": 3.0}
    streaks.note("etl", "SUCCEEDED")
    assert _series(registry) == {}
    streaks.note("etl", "FAILED")
    assert _series(registry) == {"etl": 1.0}


def test_past_the_limit_failing_jobs_are_counted_in_other() -> None:
    streaks, registry = _streaks(limit=2)
    for job in ("a", "b", "c", "d"):
        streaks.note(job, "FAILED")
    assert _series(registry) == {"a": 1.0, "b": 1.0, "_other": 2.0}
    streaks.note("c", "SUCCEEDED")
    assert _series(registry) == {"a": 1.0, "b": 1.0, "_other": 1.0}
    streaks.note("a", "SUCCEEDED")  # a name frees up: the next failure takes it
    streaks.note("d", "FAILED")
    assert _series(registry) == {"b": 1.0, "d": 2.0, "_other": 0.0}


def test_the_jobs_tracked_are_bounded() -> None:
    streaks, registry = _streaks(limit=1, track=2)
    for job in ("a", "b", "c"):
        streaks.note(job, "FAILED")
    assert _series(registry) == {"a": 1.0, "_other": 1.0}  # c is not tracked at all
