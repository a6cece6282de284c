"""Fuzz: the scheduler loads any schema-valid definition, however hostile, or
dead-letters it as invalid; loading it, and firing what it schedules for two minutes,
never raises (nor counts as a record fault)."""

from __future__ import annotations

from hypothesis import given

from cronstream.schemas.events import JobDefinition
from tests.hostile import FUZZ, jobs
from tests.processors import NOW_MS, TOPICS, SchedulerHarness


@FUZZ
@given(jobs())
def test_a_hostile_definition_is_loaded_and_fired_or_dead_lettered(job: JobDefinition) -> None:
    h = SchedulerHarness()
    h.put(job.job_id, h.codec.encode(TOPICS.jobs, job))
    h.fire_until(NOW_MS + 120_000)
    assert h.definitions.faults.streak == 0, [x.reason for x in h.letters()]
    loaded = job.job_id in h.owned[0].core.jobs
    assert loaded or h.letters(), "neither loaded nor dead-lettered"
