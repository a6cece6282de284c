"""The dependency processor's handling of records (``streams.dependencies.processor``), on fakes:
jobs records judged (a refusal dead-lettered, the last good definition kept, a paused or
deleted dependent forgotten), history read again (a run found with its own outcome is
not owed, whichever is read first), and the run requests it writes. Its reading of the
topics, commits and restarts are in tests/integration/test_dependencies.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cronstream.schemas.events import (
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
)
from cronstream.streams.dependencies.processor import (
    DependencyConfig,
    DependencyProcessor,
    read_from_ms,
)
from cronstream.streams.dependencies.reading import judge
from tests.factories import definition, outcome
from tests.fakes import FakeMessage, FakeProducer
from tests.hostile import FUZZ, INSTANTS, NAMES, OUTCOMES, jobs
from tests.processors import SETTINGS, TOPICS, decoded, fake_publisher, new_codec

DEFINED = datetime(2026, 11, 22, 1, tzinfo=UTC)
AT = datetime(2026, 11, 22, 3, tzinfo=UTC)
RUN_ID = "report@dep:2026-11-22"


def dependent(job_id: str = "report", **changes: Any) -> JobDefinition:
    """A job run after ``a`` and ``b`` (no schedule of its own), defined at ``DEFINED``."""
    fields: dict[str, Any] = {
        "schedule": None,
        "after": ("a", "b"),
        "priority": Priority.HIGH,
        "updated_at": DEFINED,
    }
    return definition(job_id, **fields | changes)


class Harness:
    """A processor without clients: its state (``fresh``), a fake publisher."""

    def __init__(self, rate: float = 0.0) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        p = self.processor = object.__new__(DependencyProcessor)
        p.settings, p.topics, p.codec = SETTINGS, TOPICS, self.codec
        p.config = DependencyConfig(group="g", name="d", tenant_fire_rate=rate)
        p.publisher = fake_publisher(self.codec, self.producer)
        p.fresh()
        self.offset = 0

    def message(self, topic: str, key: str, value: bytes | None) -> FakeMessage:
        self.offset += 1
        return FakeMessage(topic, 0, self.offset, value, key.encode())

    def put(self, job: JobDefinition, key: str | None = None) -> None:
        value = self.codec.encode(TOPICS.jobs, job)
        self.processor._definition(self.message(TOPICS.jobs, key or job.job_id, value))

    def delete(self, job_id: str) -> None:
        self.processor._definition(self.message(TOPICS.jobs, job_id, None))

    def history(
        self, job_id: str, run_id: str | None = None, status: RunStatus = RunStatus.SUCCEEDED
    ) -> None:
        ran = outcome(
            run_id or f"{job_id}@{AT.isoformat()}",
            status=status,
            scheduled_at=AT,
            target_type="http",
        )
        value = self.codec.encode(TOPICS.history, ran)
        self.processor._observed(self.message(TOPICS.history, job_id, value))

    def letters(self) -> list[DeadLetter]:
        return decoded(self.codec, self.producer, TOPICS.dlq, DeadLetter)

    def requests(self) -> list[RunRequest]:
        return decoded(self.codec, self.producer, TOPICS.runs(Priority.HIGH), RunRequest)


def test_a_run_whose_own_outcome_is_read_too_is_not_owed_whichever_comes_first() -> None:
    """Reading history again (a start, a new dependent), the partitions come in any
    order: the dependent's own outcome may be read after the successes that fire it."""
    after = Harness()
    after.put(dependent())
    after.history("a")
    after.history("b")
    assert list(after.processor.pending) == [RUN_ID]
    after.history("report", RUN_ID, RunStatus.FAILED)  # it ran (any status)
    assert after.processor.pending == {}
    before = Harness()
    before.put(dependent())
    before.history("report", RUN_ID, RunStatus.DUPLICATE)
    before.history("a")
    before.history("b")
    assert before.processor.pending == {}


def test_a_refused_dependent_is_dead_lettered_and_its_last_good_definition_stays() -> None:
    h = Harness()
    h.put(dependent())
    h.put(dependent(after=("a", "report")))  # names itself
    h.put(dependent(), key="other")  # a key that is not its job id
    h.put(dependent("acme/report", tenant="acme", after=("acme/a", "beta/b")))
    reasons = [(letter.stage, letter.job_id, letter.reason) for letter in h.letters()]
    assert reasons == [
        ("dependencies", "report", "invalid dependent job: after names the job itself"),
        ("dependencies", "other", "record key 'other' differs from job_id 'report'"),
        (
            "dependencies",
            "acme/report",
            "invalid dependent job: trigger policy: after names "
            "jobs that are not the tenant's own: beta/b",
        ),
    ]
    assert h.processor.jobs == {"report": dependent()}
    h.history("a")
    h.history("b")
    assert list(h.processor.pending) == [RUN_ID]  # after a and b, as before the refusal


def test_before_the_commit_a_refusal_is_not_dead_lettered_again() -> None:
    h = Harness()
    h.processor.letters = False
    h.put(dependent(after=("report",)))
    assert h.letters() == []
    assert h.processor.jobs == {}


def test_a_deleted_paused_or_no_longer_dependent_job_is_forgotten_with_what_it_owed() -> None:
    for change in ({"paused": True}, {"after": ()}, None):
        h = Harness()
        h.put(dependent())
        h.history("a")
        h.history("b")
        assert list(h.processor.pending) == [RUN_ID]
        if change is None:
            h.delete("report")
        else:
            h.put(dependent(**change))
        assert (h.processor.pending, h.processor.jobs) == ({}, {})
        assert h.processor.deps.interest() == set()


def test_an_undecodable_definition_changes_nothing_here() -> None:
    h = Harness()
    h.put(dependent())
    h.processor._definition(h.message(TOPICS.jobs, "report", b"\x00\x00\x00\x00\x09junk"))
    assert h.processor.jobs == {"report": dependent()}
    assert h.letters() == []  # the scheduler dead-letters it
    assert judge(h.codec, "report", b"junk", max_payload_bytes=100).unreadable


def test_a_new_dependent_asks_for_its_jobs_history_to_be_read_again() -> None:
    h = Harness()
    h.put(dependent())
    assert h.processor.late == {"report", "a", "b"}
    midnight_less_an_hour = int(datetime(2026, 11, 21, 23, tzinfo=UTC).timestamp() * 1000)
    assert h.processor.late_from_ms == midnight_less_an_hour  # defined 2026-11-22 01:00
    h.processor.late.clear()
    h.put(dependent("mail", after=("report", "a"), updated_at=datetime(2026, 11, 20, tzinfo=UTC)))
    assert h.processor.late == {"mail", "report"}  # a's dates are kept already
    assert h.processor.late_from_ms == midnight_less_an_hour - 2 * 86_400_000  # the earliest


def test_runs_are_written_as_dependency_run_requests_of_the_job() -> None:
    h = Harness()
    h.put(dependent())
    h.history("a")
    h.history("b")
    h.processor._emit(h.processor.pending.values(), flagged=True)
    h.processor.publisher.flush()
    (request,) = h.requests()
    assert (request.run_id, request.job_id, request.trigger) == (
        RUN_ID,
        "report",
        Trigger.DEPENDENCY,
    )
    assert request.scheduled_at == datetime(2026, 11, 22, tzinfo=UTC)
    assert request.possible_duplicate
    assert json.loads(request.payload or "") == {"date": "2026-11-22", "after": ["a", "b"]}
    assert request.target == dependent().target
    (record,) = h.producer.on(TOPICS.runs(Priority.HIGH))
    assert record.key == b"report"
    assert dict(record.headers)["trigger"] == b"DEPENDENCY"


def test_a_definition_the_core_raises_on_is_dead_lettered_and_dropped() -> None:
    h = Harness()
    h.put(dependent("mail", after=("x",)))

    def broken(job: JobDefinition) -> list[object]:
        raise ZeroDivisionError("a bug")

    h.processor.deps.define = broken  # type: ignore[method-assign,assignment]
    h.put(dependent())
    (letter,) = h.letters()
    assert (letter.stage, letter.job_id) == ("dependencies", "report")
    assert "ZeroDivisionError: a bug" in letter.reason
    assert list(h.processor.jobs) == ["mail"]  # the others go on


@FUZZ
@given(jobs(), st.lists(NAMES, max_size=4), st.lists(OUTCOMES, max_size=6), st.data())
def test_hostile_definitions_and_outcomes_are_used_or_refused_never_raised_on(
    job: JobDefinition, after: list[str], outcomes: list[RunOutcome], data: st.DataObject
) -> None:
    """Schema-valid hostile dependents (any after:, with a schedule or not, any instant)
    and outcomes of the jobs they name: each one is used, or refused as bad input."""
    h = Harness()
    job = replace(
        job, after=tuple(after), schedule=data.draw(st.sampled_from([None, job.schedule]))
    )
    h.put(job)
    for hostile in outcomes:
        named = data.draw(st.sampled_from([hostile.job_id, job.job_id, *after]))
        outcome = replace(hostile, job_id=named, scheduled_at=data.draw(INSTANTS))
        value = h.codec.encode(TOPICS.history, outcome)
        h.processor._observed(h.message(TOPICS.history, named, value))
    h.processor._emit(h.processor.pending.values(), flagged=False)
    assert h.processor.faults.streak == 0
    assert read_from_ms(job) >= 1


def test_a_tenants_dependency_runs_leave_at_its_fire_rate_held_never_dropped() -> None:
    """Ten dependents of one tenant's job, all due at its success, at 2 runs/s: 2 go at
    once, the rest are held and leave 2 a second on the virtual clock; while any is held
    the commit stays at the offsets read before them (a crash decides them again); a
    dependent deleted meanwhile runs nothing; operators' jobs are not held."""
    h = Harness(rate=2)
    p = h.processor
    clock = [AT]
    p.clock = lambda: clock[0]
    for i in range(10):
        h.put(dependent(f"acme/r{i}", tenant="acme", after=("acme/a",)))
    h.put(dependent("ops", after=("a",)))
    p.positions = {(TOPICS.history, 0): 5}
    p._emit([], flagged=False)
    assert p.clear == {(TOPICS.history, 0): 5}  # nothing held yet
    h.history("acme/a")
    h.history("a")
    p.positions = {(TOPICS.history, 0): 9}
    p._emit(list(p.pending.values()), flagged=False)
    p.pending.clear()
    p.publisher.flush()
    assert sorted(r.job_id for r in h.requests()) == ["acme/r0", "acme/r1", "ops"]
    assert len(p.held) == 8
    assert p.clear == {(TOPICS.history, 0): 5}, "a commit would claim the held runs"
    h.delete("acme/r9")
    for second in range(1, 6):
        clock[0] = AT + timedelta(seconds=second)
        p._emit([], flagged=False)
    p.publisher.flush()
    emitted = [r.job_id for r in h.requests()]
    assert sorted(emitted) == sorted([f"acme/r{i}" for i in range(9)] + ["ops"])
    assert len(emitted) == len(set(emitted))
    assert not p.held
    assert p.clear == {(TOPICS.history, 0): 9}  # all out: the commit may move
