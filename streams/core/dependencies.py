"""Dependent jobs' core (``after:``): a job that runs once each job (or flow) it
names has succeeded for one logical date. Pure: the processor gives it the dependent
jobs' definitions and the history topic's outcomes, and emits the runs it returns.

- **The logical date** of a run is the UTC date of its ``scheduled_at``: its slot (a
  retry, a catch-up, a backfill keep it), a manual run's trigger instant, an event
  run's record time, a dependency run's date.
- **An upstream succeeded for D** when history has a SUCCEEDED outcome of it scheduled
  on D, whatever its trigger, except the records that do not say its work is done: a
  flow's schedule run (target ``flow``: it only published the flow's start) and a flow's
  node runs (trigger FLOW, settled by a worker). A flow succeeded for D when the flows
  coordinator recorded its run's end SUCCEEDED (trigger FLOW, worker
  ``flows-coordinator``). A failure counts for nothing: the dependent waits, and a later
  success for that date (a retry, a rerun, a backfill) completes it.
- **The run** is ``JOB@dep:<date>`` (``schemas.ids``), scheduled at the date's midnight
  UTC (a job after it has the same date), trigger DEPENDENCY, once per date: the dates
  fired are remembered, and a dependent's own ``@dep:`` outcomes in history (any status)
  mark theirs fired too, so the state can be rebuilt by reading the history topic
  again. Its payload is the job's, else ``{"date": "2026-11-22", "after": [...]}``.
- **From when**: a dependent fires for the dates from its definition's ``updated_at``
  (UTC date) on; a date before is never fired by a re-read or a backfill of its
  upstream jobs. Being defined when its upstream jobs already succeeded for that day
  fires it at once (``define`` returns the run).

Bounded: the most recent ``MAX_DATES`` dates per upstream job and per dependent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime

from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.events import JobDefinition, RunOutcome, RunStatus, Trigger
from cronstream.schemas.ids import DEPENDENCY, dependency_run_id
from cronstream.schemas.instants import to_ms

MAX_DATES = 400


@dataclass(frozen=True, slots=True)
class DependencyRun:
    job_id: str
    run_id: str
    day: date
    scheduled_ms: int  # the date's midnight UTC
    payload: str


@dataclass(frozen=True, slots=True)
class _Dependent:
    after: tuple[str, ...]
    since: date
    payload: str | None


def success_of(outcome: RunOutcome) -> tuple[str, date] | None:
    """(job id, logical date) when ``outcome`` says that job's work for that date is
    done; None when it says nothing of the kind (see the module's text)."""
    if outcome.status is not RunStatus.SUCCEEDED or outcome.target_type == "flow":
        return None
    if outcome.trigger is Trigger.DEADLINE:
        return None
    if outcome.trigger is Trigger.FLOW and outcome.worker != FLOWS_APP:
        return None  # a node of a flow run
    return outcome.job_id, outcome.scheduled_at.astimezone(UTC).date()


class Dependencies:
    """Every dependent job's progress (see the module's text)."""

    def __init__(self) -> None:
        self.dependents: dict[str, _Dependent] = {}
        self.waiting: dict[str, set[str]] = {}  # upstream job -> the dependents after it
        self.done: dict[str, set[date]] = {}  # upstream job -> the dates it succeeded
        self.fired: dict[str, set[date]] = {}  # dependent -> the dates it ran

    def define(self, job: JobDefinition) -> list[DependencyRun]:
        """A job defined or changed: a dependent when it has ``after``. Returns the runs
        of the dates its upstream jobs had completed already (from its ``since``)."""
        before = self.dependents.pop(job.job_id, None)
        self._unwait(job.job_id, set(before.after if before else ()) - set(job.after))
        if not job.after:
            return []
        since = job.updated_at.astimezone(UTC).date()
        self.dependents[job.job_id] = _Dependent(job.after, since, job.payload)
        for upstream in job.after:
            self.waiting.setdefault(upstream, set()).add(job.job_id)
        days = sorted(set.intersection(*(self.done.get(u, set()) for u in job.after)))
        return [run for day in days if (run := self._fire(job.job_id, day)) is not None]

    def interest(self) -> set[str]:
        """The jobs whose history records this core uses: the dependents (their own
        ``@dep:`` runs mark dates fired) and the jobs they wait for."""
        return set(self.dependents) | set(self.waiting)

    def unknown(self, job: JobDefinition) -> set[str]:
        """What of ``job``'s history this core has not kept, were it defined now: the
        jobs it comes after that nobody waits for yet, and itself if it is no dependent
        yet (its fired dates). A processor reads history again for them."""
        if not job.after:
            return set()
        own = set() if job.job_id in self.dependents else {job.job_id}
        return own | {upstream for upstream in job.after if upstream not in self.waiting}

    def waiting_dates(self) -> int:
        """(dependent, date) pairs that wait: some job it comes after succeeded for the
        date (from its ``since``), and it has not run for it."""
        count = 0
        for job_id, dependent in self.dependents.items():
            fired = self.fired.get(job_id, set())
            days = set().union(*(self.done.get(u, set()) for u in dependent.after))
            count += sum(1 for day in days if day >= dependent.since and day not in fired)
        return count

    def forget(self, job_id: str) -> None:
        """A job deleted (what it fired stays remembered)."""
        before = self.dependents.pop(job_id, None)
        self._unwait(job_id, set(before.after if before else ()))

    def _unwait(self, job_id: str, upstreams: set[str]) -> None:
        for upstream in upstreams:
            waiting = self.waiting.get(upstream, set())
            waiting.discard(job_id)
            if not waiting:  # nobody waits for it: its dates are not kept
                self.waiting.pop(upstream, None)
                self.done.pop(upstream, None)

    def observe(self, outcome: RunOutcome) -> list[DependencyRun]:
        """One history record: the runs of the dependents it completes a date for."""
        self._note_fired(outcome)
        success = success_of(outcome)
        if success is None or success[0] not in self.waiting:
            return []
        upstream, day = success
        _add_bounded(self.done.setdefault(upstream, set()), day)
        runs = (self._fire(dependent, day) for dependent in sorted(self.waiting[upstream]))
        return [run for run in runs if run is not None]

    def _note_fired(self, outcome: RunOutcome) -> None:
        job_id = outcome.job_id
        head = f"{job_id}@{DEPENDENCY}"
        if job_id in self.dependents and outcome.run_id.startswith(head):
            try:
                day = date.fromisoformat(outcome.run_id[len(head) :])
            except ValueError:
                return  # not a run id this core wrote
            _add_bounded(self.fired.setdefault(job_id, set()), day)

    def _fire(self, job_id: str, day: date) -> DependencyRun | None:
        dependent = self.dependents[job_id]
        fired = self.fired.setdefault(job_id, set())
        if day < dependent.since or day in fired:
            return None
        if not all(day in self.done.get(upstream, ()) for upstream in dependent.after):
            return None
        _add_bounded(fired, day)
        payload = dependent.payload
        if payload is None:
            payload = json.dumps(
                {"date": day.isoformat(), "after": list(dependent.after)}, separators=(",", ":")
            )
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return DependencyRun(
            job_id=job_id,
            run_id=dependency_run_id(job_id, day),
            day=day,
            scheduled_ms=to_ms(midnight),
            payload=payload,
        )


def _add_bounded(days: set[date], day: date) -> None:
    days.add(day)
    if len(days) > MAX_DATES:
        days.discard(min(days))
