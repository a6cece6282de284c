"""Dependent jobs' core (streams.core.dependencies, ``after:``): a dependent runs once per
date, when each job it names succeeded for that date and not before; what counts as a
success (flows included); rebuilding from history; and, over random histories, once and
only when complete."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.events import JobDefinition, RunOutcome, RunStatus, Target, Trigger
from cronstream.streams.core.dependencies import MAX_DATES, Dependencies, DependencyRun, success_of

EXAMPLES = int(os.environ.get("CRONSTREAM_HYPOTHESIS_EXAMPLES", "200"))
DAY = date(2026, 11, 22)
DEFINED = datetime(2026, 11, 20, 9, tzinfo=UTC)


def dependent(
    job_id: str = "report",
    after: tuple[str, ...] = ("a", "b"),
    *,
    defined: datetime = DEFINED,
    payload: str | None = None,
) -> JobDefinition:
    return JobDefinition(
        job_id=job_id, target=Target(type="http"), updated_at=defined, after=after, payload=payload
    )


def outcome(
    job_id: str,
    day: date = DAY,
    status: RunStatus = RunStatus.SUCCEEDED,
    *,
    hour: int = 2,
    trigger: Trigger = Trigger.SCHEDULE,
    run_id: str | None = None,
    target_type: str | None = "http",
    worker: str | None = "w1",
) -> RunOutcome:
    at = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
    return RunOutcome(
        run_id=run_id or f"{job_id}@{at.isoformat()}",
        job_id=job_id,
        status=status,
        scheduled_at=at,
        recorded_at=at,
        trigger=trigger,
        target_type=target_type,
        worker=worker,
    )


def fed(deps: Dependencies, *outcomes: RunOutcome) -> list[DependencyRun]:
    return [run for o in outcomes for run in deps.observe(o)]


def test_a_dependent_runs_once_both_upstream_jobs_succeeded_for_the_day_and_not_before() -> None:
    deps = Dependencies()
    assert deps.define(dependent()) == []
    assert fed(deps, outcome("a"), outcome("b", status=RunStatus.FAILED)) == []
    assert fed(deps, outcome("b", status=RunStatus.DEAD_LETTERED)) == []
    (run,) = fed(deps, outcome("b", hour=23, trigger=Trigger.RETRY))
    assert run == DependencyRun(
        job_id="report",
        run_id="report@dep:2026-11-22",
        day=DAY,
        scheduled_ms=int(datetime(2026, 11, 22, tzinfo=UTC).timestamp() * 1000),
        payload='{"date":"2026-11-22","after":["a","b"]}',
    )
    assert fed(deps, outcome("a", hour=5), outcome("b", hour=6)) == []  # once per date


def test_each_date_is_its_own() -> None:
    deps = Dependencies()
    deps.define(dependent())
    later = DAY + timedelta(days=1)
    assert fed(deps, outcome("a", DAY), outcome("b", later)) == []
    assert [r.day for r in fed(deps, outcome("a", later), outcome("b", DAY))] == [later, DAY]


def test_any_trigger_of_an_upstream_success_counts_for_its_date() -> None:
    deps = Dependencies()
    deps.define(dependent())
    runs = fed(
        deps,
        outcome("a", trigger=Trigger.CATCHUP),
        outcome("b", trigger=Trigger.MANUAL, run_id="b@manual:k1"),
    )
    assert [r.run_id for r in runs] == ["report@dep:2026-11-22"]


def test_a_flow_counts_when_its_run_ended_not_when_it_started_or_a_node_succeeded() -> None:
    deps = Dependencies()
    deps.define(dependent(after=("a", "etl")))
    fed(deps, outcome("a"))
    start = outcome("etl", target_type="flow")  # its schedule run published the start
    node = outcome("etl", trigger=Trigger.FLOW, run_id="etl@x/extract", target_type="http")
    assert (success_of(start), success_of(node)) == (None, None)
    assert fed(deps, start, node) == []
    end = outcome("etl", trigger=Trigger.FLOW, target_type=None, worker=FLOWS_APP)
    assert [r.day for r in fed(deps, end)] == [DAY]


def test_a_date_before_the_definition_never_fires() -> None:
    deps = Dependencies()
    deps.define(dependent(defined=datetime(2026, 11, 22, 23, tzinfo=UTC)))
    before = DAY - timedelta(days=1)
    assert fed(deps, outcome("a", before), outcome("b", before)) == []  # a backfill, say
    assert len(fed(deps, outcome("a"), outcome("b"))) == 1


def test_a_dependent_defined_after_its_upstream_succeeded_runs_at_once() -> None:
    deps = Dependencies()
    deps.define(dependent("first"))
    assert len(fed(deps, outcome("a"), outcome("b"))) == 1
    (run,) = deps.define(dependent("second"))
    assert run.run_id == "second@dep:2026-11-22"


def test_a_changed_definition_keeps_the_progress_and_what_fired() -> None:
    deps = Dependencies()
    deps.define(dependent())
    fed(deps, outcome("a"))
    deps.define(dependent(after=("a", "b", "c"), payload='{"p":1}'))
    assert fed(deps, outcome("b")) == []
    (run,) = fed(deps, outcome("c"))
    assert run.payload == '{"p":1}'
    assert deps.define(dependent(after=("a", "b"))) == []  # fired already for the date
    deps.forget("report")
    assert (deps.waiting, deps.done) == ({}, {})


def test_a_chain_of_dependents_shares_the_date() -> None:
    deps = Dependencies()
    deps.define(dependent("report"))
    deps.define(dependent("mail", after=("report",)))
    (report,) = fed(deps, outcome("a"), outcome("b"))
    done = outcome("report", run_id=report.run_id, trigger=Trigger.DEPENDENCY, hour=0)
    (mail,) = fed(deps, done)
    assert (mail.run_id, mail.day) == ("mail@dep:2026-11-22", DAY)


def test_state_rebuilt_from_history_does_not_fire_again_what_ran() -> None:
    history = [
        outcome("a"),
        outcome("b"),
        outcome(
            "report",
            status=RunStatus.FAILED,
            run_id="report@dep:2026-11-22",
            trigger=Trigger.DEPENDENCY,
            hour=0,
        ),
    ]
    deps = Dependencies()
    deps.define(dependent())
    # read again from the start of the topic: the dependent's own outcome says it ran
    assert [r.run_id for r in fed(deps, *history)] == ["report@dep:2026-11-22"]
    rebuilt = Dependencies()
    rebuilt.define(dependent())
    assert fed(rebuilt, history[2], *history[:2]) == []
    owed = Dependencies()
    owed.define(dependent())
    assert len(fed(owed, *history[:2])) == 1  # no outcome of its own yet: it is owed


def test_what_the_core_reads_of_history_and_what_it_has_not_kept() -> None:
    deps = Dependencies()
    assert deps.interest() == set()
    assert deps.unknown(dependent()) == {"report", "a", "b"}
    deps.define(dependent())
    assert deps.interest() == {"report", "a", "b"}
    assert deps.unknown(dependent(after=("a", "c"))) == {"c"}  # a change: itself is known
    assert deps.unknown(dependent("mail", after=("report",))) == {"mail", "report"}
    assert deps.unknown(replace(dependent("x"), after=())) == set()  # no dependent


def test_waiting_dates_count_the_dates_some_but_not_all_upstream_jobs_completed() -> None:
    deps = Dependencies()
    deps.define(dependent(defined=datetime(2026, 11, 21, tzinfo=UTC)))
    assert deps.waiting_dates() == 0
    fed(deps, outcome("a"), outcome("a", DAY + timedelta(days=1)))
    fed(deps, outcome("a", DAY - timedelta(days=5)))  # before since: never runs, never waits
    assert deps.waiting_dates() == 2
    fed(deps, outcome("b"))  # fired for DAY
    assert deps.waiting_dates() == 1


def test_dates_kept_are_bounded() -> None:
    deps = Dependencies()
    deps.define(dependent(after=("a", "b"), defined=datetime(2000, 1, 1, tzinfo=UTC)))
    fed(deps, *(outcome("a", DAY - timedelta(days=n)) for n in range(MAX_DATES + 100)))
    assert len(deps.done["a"]) == MAX_DATES
    assert min(deps.done["a"]) == DAY - timedelta(days=MAX_DATES - 1)


histories = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 4),
        st.sampled_from([RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STARTED]),
    ),
    max_size=40,
)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(histories, st.integers(0, 3))
def test_over_any_history_each_date_fires_once_and_only_when_complete(
    rows: list[tuple[str, int, RunStatus]], since: int
) -> None:
    deps = Dependencies()
    start = DAY - timedelta(days=4)
    deps.define(
        dependent(defined=datetime.combine(start + timedelta(days=since), datetime.min.time(), UTC))
    )
    succeeded: set[tuple[str, date]] = set()
    fired: list[date] = []
    for job, offset, status in rows:
        day = start + timedelta(days=offset)
        if status is RunStatus.SUCCEEDED:
            succeeded.add((job, day))
        for run in deps.observe(outcome(job, day, status)):
            assert {("a", run.day), ("b", run.day)} <= succeeded  # not before
            fired.append(run.day)
    assert len(fired) == len(set(fired))  # once
    owed = {d for (j, d) in succeeded if j == "a" and ("b", d) in succeeded}
    assert set(fired) == {d for d in owed if d >= start + timedelta(days=since)}


def test_runs_render_their_default_payload_as_json() -> None:
    deps = Dependencies()
    deps.define(replace(dependent(), after=("a",)))
    (run,) = fed(deps, outcome("a"))
    assert json.loads(run.payload) == {"date": "2026-11-22", "after": ["a"]}
