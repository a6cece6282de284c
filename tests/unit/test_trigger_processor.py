"""The trigger processor's handling of records and its commit procedure, on
fakes (``tests.fakes``): built without Kafka (``object.__new__``, as
``tests.processors`` builds the others), the parts a record and a checkpoint use set by
hand. The real broker's side is ``tests/integration/test_triggers.py``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import DeadLetter, JobDefinition, Priority, RunRequest, Trigger
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.triggers import Checkpoint, PartitionTrigger
from cronstream.streams.triggers.owned import Owned
from cronstream.streams.triggers.processor import TriggerProcessor
from cronstream.streams.triggers.rules import TriggerDefinitions
from cronstream.streams.triggers.store import CheckpointStore
from cronstream.streams.triggers.values import SourceValues
from tests.fakes import FakeMessage, FakeProducer, FakeRegistry
from tests.processors import SETTINGS, TOPICS, decoded, fake_publisher, new_codec

SOURCE = "orders"


class Member:
    """The group member's commits, as they were asked for."""

    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []

    def commit(self, offsets: list[TopicPartition], *, wait: bool, then: str = "") -> bool:
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        return True


def job(job_id: str, **on: Any) -> JobDefinition:
    return job_from_spec(
        {
            "id": job_id,
            "target": "http",
            "url": "https://x.example/h",
            "on": {"topic": SOURCE, **on},
        },
        max_payload_bytes=65536,
    )


class Harness:
    def __init__(self, *jobs: JobDefinition, max_payload: int = 400, replay_until: int = 0) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        p = self.processor = object.__new__(TriggerProcessor)
        p.settings, p.topics, p.codec = SETTINGS, TOPICS, self.codec
        p.publisher = fake_publisher(self.codec, self.producer)
        p.values = SourceValues(FakeRegistry())
        p.max_payload = max_payload
        definitions = p.definitions = object.__new__(TriggerDefinitions)
        definitions.active = {j.job_id: TriggerDefinitions._active(j) for j in jobs}
        store = p.store = object.__new__(CheckpointStore)
        store.topic, store.publisher, store.stored = "x.triggers-checkpoints", p.publisher, {}
        p.rates, p.faults, p.tally = TenantRates(0), RecordFaults("triggers"), metrics.Tally()
        p.clock = lambda: 1_800_000_000.0
        self.member = p.member = Member()  # type: ignore[assignment]
        owned = Owned(SOURCE, 0, position=0, replay_until=replay_until)
        for j in jobs:
            owned.triggers[j.job_id] = PartitionTrigger(
                definitions.active[j.job_id].rule,
                0,
                max_payload_bytes=max_payload,
                checkpoint=Checkpoint(resume_offset=0),
                replay_until=replay_until,
            )
        p.owned = {(SOURCE, 0): owned}
        self.offset = 0

    def read(self, *values: Any) -> None:
        """Records of ``orders`` partition 0, each value as JSON, in offset order."""
        messages: list[ConsumedMessage] = []
        for value in values:
            messages.append(
                FakeMessage(
                    SOURCE,
                    0,
                    self.offset,
                    json.dumps(value).encode(),
                    b"cust-1",
                    timestamp_ms=1_000 + self.offset,
                )
            )
            self.offset += 1
        self.processor._handle(messages)

    def runs(self) -> list[RunRequest]:
        return decoded(self.codec, self.producer, TOPICS.runs(Priority.NORMAL), RunRequest)

    def letters(self) -> list[DeadLetter]:
        return decoded(self.codec, self.producer, TOPICS.dlq, DeadLetter)


def test_every_trigger_of_a_partition_decides_each_record_a_paused_job_runs_nothing() -> None:
    h = Harness(
        job("big", filter="value.n >= 2"),
        replace(job("quiet"), paused=True),
        job("picked", fields={"n": "value.n", "who": "key"}),
        replay_until=1,
    )
    h.read({"n": 0}, {"n": 1}, {"n": 2}, {"n": 3})
    runs = h.runs()
    assert [r.run_id for r in runs] == [
        "picked@evt:orders:0:0",
        "picked@evt:orders:0:1",
        "big@evt:orders:0:2",
        "picked@evt:orders:0:2",
        "big@evt:orders:0:3",
        "picked@evt:orders:0:3",
    ]
    assert {r.trigger for r in runs} == {Trigger.EVENT}
    assert [r.possible_duplicate for r in runs[:3]] == [True, False, False]  # before offset 1
    assert json.loads(runs[0].payload or "") == {"n": 0, "who": "cust-1"}
    assert json.loads(runs[2].payload or "")["value"] == {"n": 2}  # the whole record
    assert runs[2].scheduled_at.timestamp() * 1000 == 1_002  # the record's time
    assert h.processor.owned[(SOURCE, 0)].position == 4


def test_refused_records_are_dead_lettered_and_the_other_triggers_go_on() -> None:
    h = Harness(job("small"), job("boom"), job("fine", fields={"n": "value.n"}))
    broken = h.processor.owned[(SOURCE, 0)].triggers["boom"]

    def raises(_record: Any) -> Any:
        raise ZeroDivisionError("a bug this record reaches")

    broken.step = raises  # type: ignore[method-assign,assignment]
    h.read({"n": 1, "text": "x" * 500})  # the whole record is over the 400-byte limit
    letters = h.letters()
    assert {(d.job_id, d.stage, d.source_topic, d.source_offset) for d in letters} == {
        ("small", "triggers", SOURCE, 0),
        ("boom", "triggers", SOURCE, 0),
    }
    reasons = {d.job_id: d.reason for d in letters}
    assert "over the 400-byte limit" in reasons["small"]
    assert "ZeroDivisionError" in reasons["boom"]
    assert [r.run_id for r in h.runs()] == ["fine@evt:orders:0:0"]


def test_the_commit_procedure_flushes_stores_changed_checkpoints_then_commits_the_lowest() -> None:
    h = Harness(job("pairs", batch=2), job("each"))
    h.read({"n": 0}, {"n": 1}, {"n": 2})  # pairs: 0-1 run, 2 waits in an open batch
    h.producer.down = True  # 2. not acknowledged: nothing stored, nothing committed
    h.processor.checkpoint([(SOURCE, 0)])
    assert h.member.commits == []
    assert not h.producer.on("x.triggers-checkpoints")
    h.producer.down = False
    h.processor.checkpoint([(SOURCE, 0)])
    stored = {r.key: json.loads(r.value or b"") for r in h.producer.on("x.triggers-checkpoints")}
    assert stored == {
        # the batch 0-1 emitted ends before the resume offset: nothing to skip, forgotten
        b"pairs|orders|0": {"resume": 2, "clock": 1002, "windows": [], "through": []},
        b"each|orders|0": {"resume": 3, "clock": 1002, "windows": [], "through": []},
    }
    assert all(r.flushed for r in h.producer.produced)  # 2. and 4.: before the commit
    assert h.member.commits == [[(SOURCE, 0, 2)]]  # 5. the open batch is read again
    h.processor.checkpoint([(SOURCE, 0)])  # nothing changed: nothing stored again
    assert len(h.producer.on("x.triggers-checkpoints")) == 2
    assert h.member.commits[-1] == [(SOURCE, 0, 2)]


class Consumer:
    """The source consumer's pause, resume and seek, as they were asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.calls += [("pause", tp.partition) for tp in tps]

    def resume(self, tps: list[TopicPartition]) -> None:
        self.calls += [("resume", tp.partition) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.calls.append(("seek", tp.offset))


def test_a_tenants_event_runs_over_its_rate_hold_the_partition_and_none_is_dropped() -> None:
    """At 2 runs/s, five records: two run, the partition is held at the third (paused,
    seeked back to it, read no further); when the first two are a second old it is released and read again
    from there: two more run, held at the fifth. Every record runs once, in order."""
    h = Harness(replace(job("acme/each"), tenant="acme"))
    p = h.processor
    p.rates = TenantRates(2)
    p.consumer = Consumer()  # type: ignore[assignment]
    owned = p.owned[(SOURCE, 0)]
    owned.tenants = ("acme",)
    now = [1_800_000_000.0]
    p.clock = lambda: now[0]
    h.read(*({"n": n} for n in range(5)))
    assert [r.run_id for r in h.runs()] == ["acme/each@evt:orders:0:0", "acme/each@evt:orders:0:1"]
    assert (owned.position, owned.held_until) == (2, 1_800_000_001_000)
    assert p.consumer.calls == [("pause", 0), ("seek", 2)]  # type: ignore[attr-defined]
    h.read({"n": 5})  # fetched before the pause took: not read while held
    assert len(h.runs()) == 2
    now[0] += 1.0
    p._release(p._now_ms())
    assert p.consumer.calls[2:] == [("resume", 0), ("seek", 2)]  # type: ignore[attr-defined]
    h.offset = 2  # read again from the record held
    h.read(*({"n": n} for n in range(2, 5)))
    assert [r.run_id.rpartition(":")[2] for r in h.runs()] == ["0", "1", "2", "3"]
    assert owned.position == 4
    assert owned.held_until > 0
