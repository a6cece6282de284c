"""Every Prometheus metric cronstream exports: the one module that imports prometheus_client.

The names form a closed set, listed in the README ("Metrics"). Each process serves them
on ``--metrics-port`` (0 = do not serve) at ``/metrics`` (``runtime.metrics_server``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from math import inf
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from cronstream.runtime.cardinality import FailureStreaks, TenantLabels
from cronstream.runtime.probes import Probes
from cronstream.schemas.catalog import ROLES
from cronstream.schemas.targets import names as target_types

REGISTRY = CollectorRegistry(auto_describe=True)
M = TypeVar("M", Counter, Gauge, Histogram)


@cache
def labelled(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, looked up once: hot paths count per run."""
    return metric.labels(*values)


class LoopHistogram:
    """A histogram observed by one thread only (a processor's or a worker's main loop),
    once per run: ``observe`` is a bisect and two additions, without the lock and the
    bucket loop of prometheus_client's Histogram (about a tenth of a worker's loop).
    Scrapes, from the HTTP server's thread, read a copy of the counts; the exposition
    is a Histogram's (``_bucket{le}``, ``_count``, ``_sum``).

    With ``labelnames`` it is a family: ``labels(*values)`` makes the series of those
    values (or finds it), a LoopHistogram of its own that the hot path keeps and
    observes, never looking it up per run; the family itself is not observed."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        registry: CollectorRegistry | None,
        labelnames: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = sorted(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0
        self.series: dict[tuple[str, ...], LoopHistogram] = {} if labelnames else {(): self}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> LoopHistogram:
        if not self.labelnames or len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} has labels {self.labelnames}, not {values}")
        found = self.series.get(values)
        if found is None:
            found = LoopHistogram(self.name, self.documentation, self.bounds, None)
            self.series[values] = found
        return found

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: value <= bound
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()):
            counts, total = series.counts.copy(), series.sum
            cumulative, buckets = 0, []
            for bound, count in zip([*self.bounds, inf], counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == inf else repr(bound), float(cumulative)))
            family.add_metric(list(values), buckets, total)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


class Tally:
    """Counter increments made by one thread's hot path, applied in bulk (``apply``):
    a labelled Counter's ``inc`` takes a lock, about 1 µs per run."""

    def __init__(self) -> None:
        self._pending: dict[tuple[Counter, tuple[str, ...]], int] = {}

    def add(self, metric: Counter, *labels: str, count: int = 1) -> None:
        key = (metric, labels)
        self._pending[key] = self._pending.get(key, 0) + count

    def apply(self) -> None:
        pending, self._pending = self._pending, {}
        for (metric, labels), count in pending.items():
            labelled(metric, *labels).inc(count)


SKEW_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)

fires = Counter(
    "cronstream_scheduler_fires",
    "Run requests emitted by the scheduler, by trigger (SCHEDULE, CATCHUP, RETRY)",
    ["trigger"],
    registry=REGISTRY,
)
fire_skew = LoopHistogram(
    "cronstream_scheduler_fire_skew_seconds",
    "Emit time minus due time (slot + the job's jitter) of each fired run",
    SKEW_BUCKETS,
    REGISTRY,
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
partitions_total = Gauge(
    "cronstream_scheduler_partitions",
    "Partitions of the jobs topic (the same in every scheduler: alert when the sum of "
    "cronstream_scheduler_partitions_owned stays below it)",
    registry=REGISTRY,
)
standby_partitions = Gauge(
    "cronstream_scheduler_standby_partitions", "Standby stores", ["state"], registry=REGISTRY
)
standby_behind = Gauge(
    "cronstream_scheduler_standby_behind_ms", "Standby entries behind (ms)", registry=REGISTRY
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
record_faults = Counter(
    "cronstream_record_faults",
    "Records whose handling raised an unexpected error (a bug reached by the record), each "
    "refused or dead-lettered while the process went on (runtime.faults), by role",
    ["role"],
    registry=REGISTRY,
)
FAULT_ROLES = tuple(name for name, role in ROLES.items() if role.faults)


member_ready = Gauge(
    "cronstream_member_ready",
    "1 once the process (scheduler, worker, sink, archiver, admission, API) has its "
    "dependencies and runs; 0 while it waits for them (Kafka, the schema registry or "
    "Cassandra away at start: runtime.waiting)",
    registry=REGISTRY,
)


RUN_STATUSES = (
    "SUCCEEDED",
    "FAILED",
    "RETRIED",
    "TIMED_OUT",
    "CANCELED",
    "DEAD_LETTERED",
    "DUPLICATE",
    "SKIPPED",
)


def zero_counters(role: str) -> None:
    """Create a role's labelled counters at 0 when it starts: Prometheus's ``increase``
    cannot see a series that first appears at 1 (the alerts on dead letters and failures
    would miss the first one)."""
    if role in ROLES and ROLES[role].dead_letters:
        labelled(dead_letters, role)
    if role in FAULT_ROLES:
        labelled(record_faults, role)
    if role == "dependencies":
        for flagged in ("false", "true"):
            labelled(dependency_runs, flagged)
    if role == "worker":
        for status in RUN_STATUSES:
            for target in target_types():  # each registered one (schemas.targets)
                labelled(runs_finished, status, target)


PROBES = Probes(lambda ready: member_ready.set(1 if ready else 0))


def exposition() -> tuple[bytes, str]:
    """Every metric in Prometheus's text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


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
run_duration = LoopHistogram(
    "cronstream_worker_run_duration_seconds",
    "Wall time of one attempt",
    DURATION_BUCKETS,
    REGISTRY,
)
in_flight = Gauge(
    "cronstream_worker_in_flight",
    "Attempts executing now",
    registry=REGISTRY,
)
fire_to_start = LoopHistogram(
    "cronstream_worker_fire_to_start_seconds",
    "Start of an attempt minus the time its run request was fired",
    SKEW_BUCKETS,
    REGISTRY,
)
start_skew = LoopHistogram(
    "cronstream_worker_start_skew_seconds",
    "Start of an attempt minus the time it was due (its slot plus jitter, or its retry "
    "time), by the run's priority (HIGH, NORMAL, LOW): what a user sees as lateness, "
    "lookahead or not; the precision SLA alerts on it (infra/prometheus/rules.yml)",
    SKEW_BUCKETS,
    REGISTRY,
    ["priority"],
)
runs_waiting_destination = Gauge(
    "cronstream_worker_runs_waiting_destination",
    "Runs waiting for a slot of their destination, which holds all of its own "
    "(--destination-slots): it is slow or does not answer",
    registry=REGISTRY,
)
runs_held = Gauge(
    "cronstream_worker_runs_held",
    "Runs read before their due time and held until it (the scheduler's lookahead)",
    registry=REGISTRY,
)
dedup_run_ids = Gauge(
    "cronstream_worker_dedup_run_ids",
    "Run ids remembered as settled or attempted, for dedup (--dedup-capacity bounds it)",
    registry=REGISTRY,
)
deadline_alerts = Counter(
    "cronstream_worker_deadline_alerts",
    "Deadline alerts written to cronstream.alerts, by kind (DEADLINE_MISSED, DEADLINE_CLEARED)",
    ["kind"],
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
worker_tenant_runs = Counter(
    "cronstream_worker_tenant_runs",
    "Attempts finished by tenant and status (SUCCEEDED, FAILED, RETRIED, TIMED_OUT, "
    "CANCELED, DEAD_LETTERED); tenants past the first 100 a worker sees count as _other",
    ["tenant", "status"],
    registry=REGISTRY,
)
worker_tenant_label = TenantLabels()

job_failure_streak = Gauge(
    "cronstream_worker_job_failure_streak",
    "Attempts of a job that failed in a row (FAILED, TIMED_OUT, DEAD_LETTERED; a success "
    "ends the streak and the series), for the jobs of this worker's partitions; at most "
    "100 jobs by name, the others counted in job_id=_other (how many jobs fail)",
    ["job_id"],
    registry=REGISTRY,
)


worker_failure_streaks = FailureStreaks(job_failure_streak)

# -- archiver -------------------------------------------------------------------------------
archiver_outcomes = Counter(
    "cronstream_archiver_outcomes",
    "Outcomes written to the archive table",
    registry=REGISTRY,
)
archiver_files = Counter(
    "cronstream_archiver_files",
    "Data files written to the archive table (one per day and tenant of a flush)",
    registry=REGISTRY,
)
archiver_skipped = Counter(
    "cronstream_archiver_skipped",
    "History records that are no RunOutcome, skipped (the sink dead-letters them)",
    registry=REGISTRY,
)
archiver_flush_seconds = Gauge(
    "cronstream_archiver_flush_seconds",
    "How long the last flush took (data files written, snapshot committed)",
    registry=REGISTRY,
)

# -- admission ------------------------------------------------------------------------------
# Tenants are onboarded by an operator (``cronstream tenants add``), so the tenant label's
# values are bounded by that list; action and verdict are closed sets.
admission_commands = Counter(
    "cronstream_admission_commands",
    "Tenant commands answered, by tenant, action and verdict (accepted/refused)",
    ["tenant", "action", "verdict"],
    registry=REGISTRY,
)
admission_jobs = Gauge(
    "cronstream_admission_jobs",
    "Jobs per tenant as the admission knows them (what its job quota counts)",
    ["tenant"],
    registry=REGISTRY,
)
fires_deferred = Counter(
    "cronstream_fires_deferred",
    "Runs deferred because their tenant was over its fire rate (each leaves later, at "
    "the rate; none is dropped), by tenant: scheduled and catch-up fires, dependency and "
    "flow node runs",
    ["tenant"],
    registry=REGISTRY,
)


def count_deferred(counts: Iterable[tuple[str, int]]) -> None:
    """Add a ``TenantRates.drain_deferred()`` tally (the scheduler's, the dependency
    processor's, the flows coordinator's) to ``fires_deferred``."""
    for tenant, count in counts:
        labelled(fires_deferred, tenant).inc(count)


# -- dependency processor (``after:``) ------------------------------------------------------
dependency_dependents = Gauge(
    "cronstream_dependency_dependents",
    "Dependent jobs (after:) the processor knows",
    registry=REGISTRY,
)
dependency_waiting = Gauge(
    "cronstream_dependency_waiting",
    "Dates dependents wait on: some job they come after succeeded for the date, not all yet",
    registry=REGISTRY,
)
dependency_lag = Gauge(
    "cronstream_dependency_lag",
    "History records the dependency processor has not read yet (dependents run that late)",
    registry=REGISTRY,
)
dependency_runs = Counter(
    "cronstream_dependency_runs",
    "Dependency runs (JOB@dep:<date>) emitted; possible_duplicate=true: emitted again at a "
    "start or after a history read (the workers run a run id once)",
    ["possible_duplicate"],
    registry=REGISTRY,
)
# -- trigger processor: job_id labels name jobs with an event trigger only --------
triggers_records_read = Counter(
    "cronstream_triggers_records_read",
    "Source records read by the trigger processor, by topic",
    ["topic"],
    registry=REGISTRY,
)
triggers_records_matched = Counter(
    "cronstream_triggers_records_matched",
    "Source records that passed a trigger's filter, by job",
    ["job_id"],
    registry=REGISTRY,
)
triggers_runs_emitted = Counter(
    "cronstream_triggers_runs_emitted",
    "Event run requests written, by job (a re-read after a restart writes some again, "
    "flagged possible_duplicate)",
    ["job_id"],
    registry=REGISTRY,
)
triggers_refused = Counter(
    "cronstream_triggers_refused",
    "Matching records dead-lettered instead of run (payload over the limit, or a record "
    "that made the processor raise), by job",
    ["job_id"],
    registry=REGISTRY,
)
triggers_lag = Gauge(
    "cronstream_triggers_lag",
    "Records of a source partition a trigger has not decided yet (the partition's end "
    "minus its next offset), per trigger and source partition owned by this process",
    ["job_id", "topic", "partition"],
    registry=REGISTRY,
)
triggers_rate_holds = Counter(
    "cronstream_triggers_rate_holds",
    "Times a source partition was held back because its tenant's event runs reached its "
    "rate (read on when the rate allows; nothing dropped)",
    ["tenant"],
    registry=REGISTRY,
)
