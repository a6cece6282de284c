"""The scheduler processor's parts on fakes: reading definitions for the core, what the
emitter writes for a fire and a misfire record, and the checkpoint's metadata."""

from __future__ import annotations

import pytest

from cronstream.runtime import metrics
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition.cron import cron_times
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import (
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    MisfireKind,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
    to_ms,
)
from cronstream.schemas.ids import run_id_for, slot_run_id
from cronstream.schemas.serde import Codec
from cronstream.streams.core.misfire import Fire, Record
from cronstream.streams.core.schedule import Kind, jitter_offset
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.definitions import Definitions, Prepared
from cronstream.streams.scheduler.emitter import Emitter
from tests.factories import T0, definition
from tests.fakes import FakeProducer, FakeRegistry

SETTINGS = Settings.from_env({})
TOPICS = Topics(SETTINGS)
SLOT = to_ms(T0)


@pytest.fixture
def codec() -> Codec:
    return Codec(FakeRegistry())


@pytest.mark.parametrize(
    ("schedule", "kind", "timing"),
    [
        (CronSchedule(expression="*/5 * * * *"), Kind.CRON, {}),
        (IntervalSchedule(every_ms=60_000, anchor=T0), Kind.INTERVAL, {"every_ms": 60_000}),
        (OnceSchedule(at=T0), Kind.ONCE, {"at_ms": SLOT}),
        (None, Kind.MANUAL, {}),
    ],
)
def test_a_definition_reads_as_the_core_schedule(
    codec: Codec, schedule: object, kind: Kind, timing: dict[str, int]
) -> None:
    job = definition(
        schedule=schedule,
        timezone="Europe/Paris",
        jitter_ms=7,
        paused=True,
        start_at=T0,
        misfire=MisfirePolicy(policy=MisfireKind.ALL, max_catchup=4),
    )
    raw = codec.encode(TOPICS.jobs, job)
    core = Definitions(codec).schedule("j", raw)
    assert core.kind is kind
    assert core.job_id == "j"
    assert core.body is raw
    assert (core.jitter, core.paused, core.start_ms) == (jitter_offset("j", 7), True, SLOT)
    assert (core.misfire.policy, core.misfire.max_catchup) == ("ALL", 4)
    if kind is Kind.CRON:
        assert core.times is cron_times("*/5 * * * *", "Europe/Paris")
    for name, value in timing.items():
        assert getattr(core, name) == value


def test_jobs_sharing_a_misfire_policy_share_one_object(codec: Codec) -> None:
    definitions = Definitions(codec)
    a = definitions.schedule("a", codec.encode(TOPICS.jobs, definition("a")))
    b = definitions.schedule("b", codec.encode(TOPICS.jobs, definition("b")))
    assert a.misfire is b.misfire


@pytest.mark.parametrize(
    ("key", "job", "reason"),
    [
        ("other", definition("j"), "differs from job_id"),
        ("j", definition(schedule=IntervalSchedule(every_ms=0, anchor=T0)), "not positive"),
    ],
)
def test_a_definition_the_core_cannot_use_is_refused(
    codec: Codec, key: str, job: JobDefinition, reason: str
) -> None:
    with pytest.raises(DecodeError, match=reason):
        Definitions(codec).schedule(key, codec.encode(TOPICS.jobs, job))


def emitter(codec: Codec, producer: FakeProducer) -> Emitter:
    publisher = Publisher(SETTINGS, codec=codec, producer=producer)
    return Emitter(publisher, topics=TOPICS, definitions=Definitions(codec), name="s1")


def test_a_fire_writes_the_run_request_with_the_events_own_headers(codec: Codec) -> None:
    producer = FakeProducer()
    job = definition(priority=Priority.HIGH, payload='{"a":1}')
    core = Definitions(codec).schedule("j", codec.encode(TOPICS.jobs, job))
    fire = Fire(
        job_id="j",
        slot_ms=SLOT,
        due_ms=SLOT + 5,
        trigger="CATCHUP",
        job=core,
        possible_duplicate=True,
    )
    emitter(codec, producer).emit([fire], SLOT + 20)
    (record,) = producer.on(TOPICS.runs(Priority.HIGH))
    run = codec.decode(record.value, RunRequest)
    assert run.run_id == run_id_for("j", T0) == slot_run_id("j", SLOT)[0]
    assert (run.trigger, run.possible_duplicate, run.attempt) == (Trigger.CATCHUP, True, 1)
    assert (run.payload, to_ms(run.fired_at)) == ('{"a":1}', SLOT + 20)
    assert record.headers == run.headers()  # the fast path writes what the event would
    assert record.key == b"j"
    assert type(core.body) is Prepared  # decoded once, kept for the next fire


def test_after_a_rewind_fires_due_within_the_lookahead_are_flagged(codec: Codec) -> None:
    """A rewind reloads the partitions from their checkpoint while runs emitted ahead may
    be out already: the fires due up to the rewind's now plus the lookahead are flagged
    ``possible_duplicate``, the later ones are not."""
    producer = FakeProducer()
    core = Definitions(codec).schedule("j", codec.encode(TOPICS.jobs, definition()))
    out = emitter(codec, producer)
    out.flag_through(SLOT + 1000)  # rewound at SLOT with a 1 s lookahead
    due = (SLOT + 1000, SLOT + 2000)
    fires: list[Fire | Record] = [
        Fire(job_id="j", slot_ms=at, due_ms=at, trigger="SCHEDULE", job=core) for at in due
    ]
    out.emit(fires, SLOT)
    records = producer.on(TOPICS.runs(Priority.NORMAL))
    flags = [codec.decode(r.value, RunRequest).possible_duplicate for r in records]
    assert flags == [True, False]
    assert all(r.headers == codec.decode(r.value, RunRequest).headers() for r in records)


def test_a_misfire_record_is_a_history_outcome_with_the_slots_run_id(codec: Codec) -> None:
    producer = FakeProducer()
    record = Record(job_id="j", slot_ms=SLOT, status="MISSED", reason="outage")
    emitter(codec, producer).emit([record], SLOT + 99)
    (written,) = producer.on(TOPICS.history)
    outcome = codec.decode(written.value, RunOutcome)
    assert (outcome.run_id, outcome.status, outcome.error) == (
        run_id_for("j", T0),
        RunStatus.MISSED,
        "outage",
    )
    assert outcome.worker == "s1"
    assert written.headers == outcome.headers()


def test_a_misfire_record_carries_its_jobs_tenant(codec: Codec) -> None:
    """The tenant's history lists its own MISSED/SKIPPED slots (they were once all
    written under tenant "default")."""
    producer = FakeProducer()
    raw = codec.encode(TOPICS.jobs, definition("acme/x", tenant="acme"))
    core = Definitions(codec).schedule("acme/x", raw)
    emitter(codec, producer).emit(
        [
            Record(
                job_id="acme/x", slot_ms=SLOT, status="SKIPPED", reason="misfire=skip", job=core
            ),
            Record(
                job_id="acme/x",
                slot_ms=SLOT + 1000,
                status="MISSED",
                reason="old",
                job=core,
                slots=5,
                last_ms=SLOT + 5000,
            ),
        ],
        SLOT + 99,
    )
    outcomes = [codec.decode(r.value, RunOutcome) for r in producer.on(TOPICS.history)]
    assert [(o.job_id, o.status, o.tenant) for o in outcomes] == [
        ("acme/x", RunStatus.SKIPPED, "acme"),
        ("acme/x", RunStatus.MISSED, "acme"),
    ]


def test_a_summary_record_names_its_count_and_first_and_last_slot(codec: Codec) -> None:
    producer = FakeProducer()
    core = Definitions(codec).schedule("j", codec.encode(TOPICS.jobs, definition("j")))
    last = SLOT + 2_591_929_000
    before = (
        metrics.REGISTRY.get_sample_value(
            "cronstream_scheduler_misfires_total", {"status": "MISSED"}
        )
        or 0.0
    )
    summary = Record(
        job_id="j",
        slot_ms=SLOT,
        status="MISSED",
        job=core,
        slots=2_591_930,
        last_ms=last,
        reason="misfire=all ran the latest 10 (2,591,930)",
    )
    emitter(codec, producer).emit([summary], last + 70_000)
    (written,) = producer.on(TOPICS.history)
    outcome = codec.decode(written.value, RunOutcome)
    assert outcome.run_id == run_id_for("j", T0)  # the first slot's run id
    assert outcome.error == (
        "2,591,930 slots from 2026-11-22T10:00:00.000Z to 2026-12-22T09:58:49.000Z not run, "
        "recorded once here: misfire=all ran the latest 10 (2,591,930)"
    )
    assert written.headers == [
        *outcome.headers(),
        ("slots", b"2591930"),
        ("last_slot", b"2026-12-22T09:58:49.000Z"),
    ]
    after = metrics.REGISTRY.get_sample_value(
        "cronstream_scheduler_misfires_total", {"status": "MISSED"}
    )
    assert after == before + 2_591_930  # the metric counts slots, not records


def test_the_checkpoint_survives_its_metadata_and_a_bad_one_is_ignored() -> None:
    point = Checkpoint(fired_through=SLOT, jobs_offset=12, timers_from=3, timers_offset=9)
    assert Checkpoint.from_metadata(point.to_metadata()) == point
    assert Checkpoint.from_metadata("not json") is None
    assert Checkpoint.from_metadata("") is None


def test_a_definition_with_an_unknown_zone_is_refused_whatever_its_schedule(codec: Codec) -> None:
    """Found by make chaos: an interval job took an update naming the zone "America"."""
    from cronstream.schemas.errors import ZoneError

    every = IntervalSchedule(every_ms=60_000, anchor=T0)
    raw = codec.encode(TOPICS.jobs, definition(schedule=every, timezone="America"))
    with pytest.raises(ZoneError):
        Definitions(codec).schedule("j", raw)
