"""Every Prometheus metric cronstream exports: the one module that imports prometheus_client.

The names form a closed set, listed in the README ("Metrics"). Each process serves them
on ``--metrics-port`` (0 = do not serve) at ``/metrics``.
"""

from __future__ import annotations

from functools import cache
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)
M = TypeVar("M", Counter, Gauge, Histogram)


@cache
def labelled(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, looked up once: hot paths count per run."""
    return metric.labels(*values)


SKEW_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)

fires = Counter(
    "cronstream_scheduler_fires",
    "Run requests emitted by the scheduler, by trigger (SCHEDULE, CATCHUP, RETRY)",
    ["trigger"],
    registry=REGISTRY,
)
fire_skew = Histogram(
    "cronstream_scheduler_fire_skew_seconds",
    "Emit time minus due time (slot + the job's jitter) of each fired run",
    buckets=SKEW_BUCKETS,
    registry=REGISTRY,
)
misfires = Counter(
    "cronstream_scheduler_misfires",
    "Slots not run, recorded in history, by status (MISSED, SKIPPED)",
    ["status"],
    registry=REGISTRY,
)
wheel_items = Gauge(
    "cronstream_scheduler_wheel_items",
    "Entries in the timing wheel by tier (near: due within the horizon; far: later)",
    ["tier"],
    registry=REGISTRY,
)
jobs_loaded = Gauge(
    "cronstream_scheduler_jobs_loaded",
    "Job definitions held by this scheduler process",
    registry=REGISTRY,
)
partitions_owned = Gauge(
    "cronstream_scheduler_partitions_owned",
    "Jobs partitions this scheduler owns, by state (loading, live)",
    ["state"],
    registry=REGISTRY,
)
timers_pending = Gauge(
    "cronstream_scheduler_timers_pending",
    "Retry/delay timers held until due",
    registry=REGISTRY,
)
checkpoint_failures = Counter(
    "cronstream_scheduler_checkpoint_failures",
    "Checkpoint commits the group refused (rebalance in progress, fenced)",
    registry=REGISTRY,
)
dead_letters = Counter(
    "cronstream_dead_letters",
    "Records sent to the DLQ, by stage (scheduler, worker, sink)",
    ["stage"],
    registry=REGISTRY,
)


def serve(port: int) -> None:
    """Serve /metrics on 127.0.0.1:port in a daemon thread (port 0: do nothing)."""
    if port:
        start_http_server(port, addr="127.0.0.1", registry=REGISTRY)


# -- workers ------------------------------------------------------------------------------
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

runs_started = Counter(
    "cronstream_worker_runs_started",
    "Attempts started, by target type",
    ["target"],
    registry=REGISTRY,
)
runs_finished = Counter(
    "cronstream_worker_runs_finished",
    "Attempts finished, by outcome (SUCCEEDED, FAILED, RETRIED, TIMED_OUT, CANCELED, "
    "DEAD_LETTERED, DUPLICATE) and target type",
    ["status", "target"],
    registry=REGISTRY,
)
run_duration = Histogram(
    "cronstream_worker_run_duration_seconds",
    "Wall time of one attempt",
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
in_flight = Gauge(
    "cronstream_worker_in_flight",
    "Attempts executing now",
    registry=REGISTRY,
)
fire_to_start = Histogram(
    "cronstream_worker_fire_to_start_seconds",
    "Start of an attempt minus the time its run request was fired",
    buckets=SKEW_BUCKETS,
    registry=REGISTRY,
)
dedup_run_ids = Gauge(
    "cronstream_worker_dedup_run_ids",
    "Run ids remembered as settled or attempted, for dedup (--dedup-capacity bounds it)",
    registry=REGISTRY,
)
dedup_forgotten = Counter(
    "cronstream_worker_dedup_forgotten",
    "Run ids dropped from dedup before the lookback because of --dedup-capacity",
    registry=REGISTRY,
)
consumer_lag = Gauge(
    "cronstream_worker_consumer_lag",
    "Run requests not yet read, per execution topic partition",
    ["topic", "partition"],
    registry=REGISTRY,
)

# -- history sink -------------------------------------------------------------------------
WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

sink_outcomes = Counter(
    "cronstream_sink_outcomes_written",
    "Outcomes written to Cassandra (every table acknowledged) and committed",
    registry=REGISTRY,
)
sink_rows = Counter(
    "cronstream_sink_rows_written",
    "Rows written to Cassandra, by table",
    ["table"],
    registry=REGISTRY,
)
sink_write_latency = Histogram(
    "cronstream_sink_write_latency_seconds",
    "Time from sending one batch of rows to Cassandra's acknowledgement",
    buckets=WRITE_BUCKETS,
    registry=REGISTRY,
)
sink_write_failures = Counter(
    "cronstream_sink_write_failures",
    "Batches Cassandra did not acknowledge (retried with backoff), by error type",
    ["error"],
    registry=REGISTRY,
)
sink_cassandra_up = Gauge(
    "cronstream_sink_cassandra_up",
    "1 while the sink's writes succeed, 0 while it backs off (alert on 0 for minutes)",
    registry=REGISTRY,
)
sink_consumer_lag = Gauge(
    "cronstream_sink_consumer_lag",
    "Outcomes on history not yet written, per partition",
    ["partition"],
    registry=REGISTRY,
)
