"""The flows coordinator's step (streams.flows.coordinator.Coordinator) on a fake
registry: what it keeps in its table and what it sends for each event."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cronstream.producers.flows import flow_from_spec
from cronstream.runtime.settings import Settings
from cronstream.schemas.alerts import Alert
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import RegistryUnavailable, SpecError
from cronstream.schemas.events import (
    ControlCommand,
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
    Trigger,
)
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.serde import Codec
from cronstream.streams.flows.coordinator import Coordinator
from cronstream.streams.flows.rows import JsonRows
from tests.fakes import FakeRegistry

SETTINGS = Settings.from_env({"CRONSTREAM_TOPIC_PREFIX": "acme"})
TOPICS = Topics(SETTINGS)
SLOT = datetime(2026, 11, 25, 2, tzinfo=UTC)
RUN = "etl@2026-11-25T02:00:00.000Z"


class Known:
    def __init__(self, **flows: Any) -> None:
        self.flows = flows


def _coordinator(registry: FakeRegistry | None = None) -> tuple[Coordinator, Codec]:
    flow = flow_from_spec(
        {
            "id": "etl",
            "nodes": [
                {"name": "a", "target": "python", "callable": "m:f", "priority": "high"},
                {"name": "b", "after": ["a"], "target": "python", "callable": "m:g"},
                {"name": "c", "after": ["b"], "target": "python", "callable": "m:h"},
            ],
        },
        max_payload_bytes=65536,
    )
    codec = Codec(registry or FakeRegistry())
    return Coordinator(SETTINGS, codec, Known(etl=flow)), codec


def _event(
    kind: FlowEventKind, run_id: str | None = None, status: str | None = None, flow_run: str = RUN
) -> FlowEvent:
    return FlowEvent(
        flow_id="etl",
        flow_run_id=flow_run,
        kind=kind,
        scheduled_at=SLOT,
        at=SLOT,
        run_id=run_id,
        status=status,
    )


def test_a_start_sends_the_root_node_run_and_keeps_the_run() -> None:
    coordinator, codec = _coordinator()
    row, sends = coordinator.step(None, _event(FlowEventKind.START))
    assert row is not None
    assert row["states"] == {"a": "RUNNING", "b": "PENDING", "c": "PENDING"}
    ((topic, key, value, headers),) = sends
    assert (topic, key) == (TOPICS.runs(Priority.HIGH), "etl")
    run = codec.decode(value, RunRequest)
    assert (run.run_id, run.job_id, run.trigger, run.scheduled_at) == (
        f"{RUN}/a",
        "etl",
        Trigger.FLOW,
        SLOT,
    )
    assert run.target.callable == "m:f"
    assert ("run_id", f"{RUN}/a".encode()) in headers


def test_a_dead_letter_records_the_rest_upstream_failed_and_the_flow_failed_once() -> None:
    coordinator, codec = _coordinator()
    row, _ = coordinator.step(None, _event(FlowEventKind.START))
    failed = _event(FlowEventKind.OUTCOME, f"{RUN}/a", "DEAD_LETTERED")
    row, sends = coordinator.step(row, failed)
    records = [codec.decode(v, RunOutcome) for t, _, v, _ in sends if t == TOPICS.history]
    assert [(r.run_id, r.status.value) for r in records] == [
        (f"{RUN}/b", "UPSTREAM_FAILED"),
        (f"{RUN}/c", "UPSTREAM_FAILED"),
        (RUN, "FAILED"),
    ]
    assert records[-1].error == "flow run ended: 1 failed, 2 upstream_failed"
    replayed, again = coordinator.step(row, failed)  # a replay: the same records, again
    assert replayed == row
    assert {topic for topic, *_ in again} == {TOPICS.history}
    records_again = [codec.decode(value, RunOutcome) for _, _, value, _ in again]
    assert [(r.run_id, r.status) for r in records_again] == [(r.run_id, r.status) for r in records]


def test_an_outcome_replayed_after_its_row_was_written_records_the_flow_end_again() -> None:
    """A coordinator stopped (gracefully: faust cancels the agent) or killed after the
    event's row reached the changelog and before its sends did: the next one handles the
    event again and must send what it caused, though the row says it happened (the flow
    run was left RUNNING in history after a graceful coordinator restart)."""
    coordinator, codec = _coordinator()
    row, _ = coordinator.step(None, _event(FlowEventKind.START))
    for node in "ab":
        row, _ = coordinator.step(row, _event(FlowEventKind.OUTCOME, f"{RUN}/{node}", "SUCCEEDED"))
    last = _event(FlowEventKind.OUTCOME, f"{RUN}/c", "SUCCEEDED")
    row, first = coordinator.step(row, last)
    assert row is not None
    assert row["status"] == "SUCCEEDED"
    replayed, again = coordinator.step(row, last)
    assert replayed == row
    ends = [codec.decode(v, RunOutcome) for t, _, v, _ in (*first, *again) if t == TOPICS.history]
    assert [(r.run_id, r.status.value) for r in ends] == [(RUN, "SUCCEEDED")] * 2
    retrying = replace(last, status="FAILED", retrying=True)
    assert coordinator.step(row, retrying) == (row, [])  # not final: not a replay


def test_a_start_for_a_flow_nobody_defined_records_the_flow_run_failed() -> None:
    coordinator, codec = _coordinator()
    event = FlowEvent(
        flow_id="ghost",
        flow_run_id="ghost@manual:k",
        kind=FlowEventKind.START,
        scheduled_at=SLOT,
        at=SLOT,
    )
    row, ((topic, _, value, _),) = coordinator.step(None, event)
    assert row is None
    record = codec.decode(value, RunOutcome)
    assert (topic, record.status.value, record.error) == (
        TOPICS.history,
        "FAILED",
        "no flow 'ghost' is defined",
    )


def test_an_outcome_of_a_run_it_never_started_is_ignored() -> None:
    coordinator, _ = _coordinator()
    assert coordinator.step(None, _event(FlowEventKind.OUTCOME, f"{RUN}/a", "SUCCEEDED")) == (
        None,
        [],
    )


def _policy(policy: str) -> tuple[Coordinator, Codec, JsonRows]:
    flow = flow_from_spec(
        {
            "id": "etl",
            "concurrency": policy,
            "nodes": [
                {"name": "a", "target": "python", "callable": "m:f"},
                {"name": "b", "after": ["a"], "target": "python", "callable": "m:g"},
            ],
        },
        max_payload_bytes=65536,
    )
    codec = Codec(FakeRegistry())
    coordinator = Coordinator(SETTINGS, codec, Known(etl=flow))
    return coordinator, codec, JsonRows({})


def _what(codec: Codec, sends: list[Any]) -> list[tuple[str, str, str]]:
    """(kind, run id, status or reason) of each record sent."""
    out = []
    for topic, _, value, _ in sends:
        if topic == TOPICS.history:
            r = codec.decode(value, RunOutcome)
            out.append(("history", r.run_id, r.status.value))
        elif topic == TOPICS.control:
            c = codec.decode(value, ControlCommand)
            out.append(("cancel", c.run_id, c.reason or ""))
        else:
            out.append(("run", codec.decode(value, RunRequest).run_id, ""))
    return out


def _start(key: str) -> FlowEvent:
    return _event(FlowEventKind.START, flow_run=f"etl@manual:{key}")


def _done(key: str, node: str, status: str = "SUCCEEDED") -> FlowEvent:
    run = f"etl@manual:{key}"
    return _event(FlowEventKind.OUTCOME, f"{run}/{node}", status, flow_run=run)


def test_forbid_records_a_run_that_starts_while_another_runs_skipped() -> None:
    coordinator, codec, rows = _policy("forbid")
    assert _what(codec, coordinator.handle(rows, _start("k1"))) == [("run", "etl@manual:k1/a", "")]
    assert _what(codec, coordinator.handle(rows, _start("k2"))) == [
        ("history", "etl@manual:k2", "SKIPPED")
    ]
    assert coordinator.handle(rows, _start("k2")) == []  # its start again: still skipped
    coordinator.handle(rows, _done("k1", "a"))
    ended = _what(codec, coordinator.handle(rows, _done("k1", "b")))
    assert ended == [("history", "etl@manual:k1", "SUCCEEDED")]
    assert _what(codec, coordinator.handle(rows, _start("k3"))) == [("run", "etl@manual:k3/a", "")]


def test_queue_starts_a_waiting_run_when_the_one_before_ends() -> None:
    coordinator, codec, rows = _policy("queue")
    coordinator.handle(rows, _start("k1"))
    assert coordinator.handle(rows, _start("k2")) == []  # queued
    assert coordinator.handle(rows, _start("k3")) == []  # queued behind k2
    assert rows.get("etl@manual:k2")["status"] == "QUEUED"  # type: ignore[index]
    coordinator.handle(rows, _done("k1", "a"))
    assert _what(codec, coordinator.handle(rows, _done("k1", "b", "DEAD_LETTERED"))) == [
        ("history", "etl@manual:k1", "FAILED"),
        ("run", "etl@manual:k2/a", ""),
    ]
    coordinator.handle(rows, _done("k2", "a"))
    assert _what(codec, coordinator.handle(rows, _done("k2", "b"))) == [
        ("history", "etl@manual:k2", "SUCCEEDED"),
        ("run", "etl@manual:k3/a", ""),
    ]


def test_replace_cancels_the_running_run_and_starts_the_new_one() -> None:
    coordinator, codec, rows = _policy("replace")
    coordinator.handle(rows, _start("k1"))
    assert _what(codec, coordinator.handle(rows, _start("k2"))) == [
        ("cancel", "etl@manual:k1/a", "replaced by flow run etl@manual:k2 (concurrency replace)"),
        ("history", "etl@manual:k1", "CANCELED"),
        ("run", "etl@manual:k2/a", ""),
    ]
    # The cancelled node's outcome comes back: the replaced run stays as it ended.
    assert coordinator.handle(rows, _done("k1", "a", "CANCELED")) == []
    coordinator.handle(rows, _done("k2", "a"))
    assert _what(codec, coordinator.handle(rows, _done("k2", "b"))) == [
        ("history", "etl@manual:k2", "SUCCEEDED")
    ]


def test_a_flow_file_refuses_an_unknown_concurrency_policy() -> None:
    with pytest.raises(SpecError, match="concurrency 'sometimes' must be one of allow, forbid"):
        flow_from_spec(
            {
                "id": "x",
                "concurrency": "sometimes",
                "nodes": [{"name": "a", "target": "python", "callable": "m:f"}],
            },
            max_payload_bytes=100,
        )


def _alerts(codec: Codec, sends: list[Any]) -> list[tuple[str, str, str]]:
    out = []
    for topic, _, value, _ in sends:
        if topic == TOPICS.alerts:
            alert = codec.decode(value, Alert)
            out.append((alert.kind.value, alert.run_id, alert.last_status))
    return out


def test_a_flow_runs_deadline_alerts_once_and_clears_when_the_run_succeeds() -> None:
    coordinator, codec, rows = _policy("allow")
    coordinator.handle(rows, _start("k1"))
    due = _event(FlowEventKind.DEADLINE, flow_run="etl@manual:k1")
    assert _alerts(codec, coordinator.handle(rows, due)) == [
        ("DEADLINE_MISSED", "etl@manual:k1", "RUNNING")
    ]
    assert coordinator.handle(rows, due) == []  # a check fired again: quiet
    coordinator.handle(rows, _done("k1", "a"))
    assert _alerts(codec, coordinator.handle(rows, _done("k1", "b"))) == [
        ("DEADLINE_CLEARED", "etl@manual:k1", "SUCCEEDED")
    ]
    # A run that succeeded in time, and one never started, are told apart.
    coordinator.handle(rows, _start("k2"))
    coordinator.handle(rows, _done("k2", "a"))
    coordinator.handle(rows, _done("k2", "b"))
    assert coordinator.handle(rows, _event(FlowEventKind.DEADLINE, flow_run="etl@manual:k2")) == []
    assert _alerts(
        codec, coordinator.handle(rows, _event(FlowEventKind.DEADLINE, flow_run="etl@manual:k9"))
    ) == [("DEADLINE_MISSED", "etl@manual:k9", "NOT_STARTED")]


class _Table(dict[str, str]):
    """The coordinator's table on fakes: ``written`` fails once if a row of ``refused``
    was set since the last call (the broker refused it)."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused, self.since = refused, set[str]()

    def __setitem__(self, key: str, value: str) -> None:
        self.since.add(key)
        super().__setitem__(key, value)

    async def written(self) -> None:
        since, self.since = self.since, set()
        if self.refused in since:
            self.refused = ""
            raise RuntimeError("the broker refused a row")


class _Poisoned(Coordinator):
    """A coordinator that fails on every event of one flow run (a bug)."""

    poison = ""

    def handle(self, rows: JsonRows, event: FlowEvent) -> list[Any]:
        if event.flow_run_id == self.poison:
            raise ValueError("a bug")
        return super().handle(rows, event)


class _Out:
    def __init__(self, sent: list[tuple[str, bytes]], topic: str) -> None:
        self.sent, self.topic = sent, topic

    async def send(self, key: bytes, value: bytes, headers: Any) -> None:
        self.sent.append((self.topic, value))


class _Message:
    tp, offset, key = ("acme.flows.events", 0), 0, b"etl"


class _FaustEvent:
    message = _Message()

    def __init__(self, value: bytes) -> None:
        self.value = value


@pytest.mark.parametrize("failure", ["refused once", "poison"])
def test_a_failed_batch_is_handled_again_event_by_event(failure: str) -> None:
    """A batch that fails (the broker refused a row once): each event is handled alone,
    one stepped already as a replay (its starts sent again, flagged). A bug on one event
    does not fail the batch: that event is dead-lettered (``runtime.faults``), the
    others go on."""
    import asyncio

    from cronstream.streams.flows.app import _Runner

    flow = _coordinator()[0].definitions
    codec = Codec(FakeRegistry())
    coordinator = _Poisoned(SETTINGS, codec, flow)
    first, other = "etl@2026-11-25T01:00:00.000Z", "etl@2026-11-25T03:00:00.000Z"
    table = _Table(other if failure == "refused once" else "")
    if failure == "poison":
        coordinator.poison = other
    sent: list[tuple[str, bytes]] = []
    runner = _Runner(coordinator, codec, table, {t: _Out(sent, t) for t in TOPICS.names()})
    events = [
        _FaustEvent(codec.encode(TOPICS.flow_events, _event(FlowEventKind.START, flow_run=r)))
        for r in (first, other)
    ]
    asyncio.run(runner.handle_batch(events))
    requests = [codec.decode(v, RunRequest) for t, v in sent if t == TOPICS.runs(Priority.HIGH)]
    if failure == "refused once":
        assert sorted(r.run_id for r in requests) == [f"{first}/a", f"{other}/a"]
        assert all(r.possible_duplicate for r in requests)  # stepped in the failed batch first
    else:  # the bug on one event is that event's dead letter: the batch did not fail
        assert [(r.run_id, r.possible_duplicate) for r in requests] == [(f"{first}/a", False)]
        assert [codec.decode(v, DeadLetter).run_id for t, v in sent if t == TOPICS.dlq] == [other]


class _Outage(FakeRegistry):
    """A registry that does not answer its first ``down`` questions."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    def schema_by_id(self, schema_id: int) -> tuple[str, str]:
        if self.down > 0:
            self.down -= 1
            raise RegistryUnavailable("schema registry at http://registry unreachable")
        return super().schema_by_id(schema_id)


def test_an_event_waits_out_a_registry_outage_and_is_stepped_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flow event whose writer schema the coordinator has not seen, read while the
    registry does not answer: it waits and is stepped once the registry is back (it
    was skipped, and its flow run never went on)."""
    import asyncio

    from cronstream.runtime.kafka import stall
    from cronstream.streams.flows.app import _Runner

    monkeypatch.setattr(stall, "FIRST_DELAY_S", 0.01)
    registry = _Outage(down=0)
    coordinator, writer = _coordinator(registry)
    value = writer.encode(TOPICS.flow_events, _event(FlowEventKind.START))
    registry.down = 3
    reader = Codec(registry)
    sent: list[tuple[str, bytes]] = []
    runner = _Runner(coordinator, reader, _Table(""), {t: _Out(sent, t) for t in TOPICS.names()})
    asyncio.run(runner.handle_batch([_FaustEvent(value)]))
    assert registry.down == 0
    assert [
        reader.decode(v, RunRequest).run_id for t, v in sent if t == TOPICS.runs(Priority.HIGH)
    ] == [f"{RUN}/a"]
    assert [t for t, _ in sent if t == TOPICS.dlq] == []


def test_an_undecodable_flow_event_is_dead_lettered_and_the_batch_goes_on() -> None:
    import asyncio

    from cronstream.streams.flows.app import _Runner

    coordinator, codec = _coordinator()
    sent: list[tuple[str, bytes]] = []
    runner = _Runner(coordinator, codec, _Table(""), {t: _Out(sent, t) for t in TOPICS.names()})
    good = codec.encode(TOPICS.flow_events, _event(FlowEventKind.START))
    asyncio.run(runner.handle_batch([_FaustEvent(b"not avro at all"), _FaustEvent(good)]))
    (letter,) = [codec.decode(v, DeadLetter) for t, v in sent if t == TOPICS.dlq]
    assert letter.reason.startswith("undecodable flow event: ")
    assert (letter.stage, letter.source_value) == ("flows-coordinator", b"not avro at all")
    assert [
        codec.decode(v, RunRequest).run_id for t, v in sent if t == TOPICS.runs(Priority.HIGH)
    ] == [f"{RUN}/a"]


def test_a_tenants_node_runs_wait_for_its_fire_rate_and_none_is_dropped() -> None:
    """A flow of 30 root nodes started for tenant acme at 10/s: the event waits until
    the rate allows its last node run (10 at once, then one per 100 ms: 2 s on the
    virtual clock) and then sends all 30; the next flow run waits 3 s more. An
    operator's flow run (tenant default) does not wait."""
    import asyncio

    from cronstream.streams.core.rates import TenantRates
    from cronstream.streams.flows.app import _Runner

    wide = flow_from_spec(
        {
            "id": "etl",
            "nodes": [{"name": f"n{i}", "target": "python", "callable": "m:f"} for i in range(30)],
        },
        max_payload_bytes=65536,
    )
    codec = Codec(FakeRegistry())
    coordinator = Coordinator(SETTINGS, codec, Known(etl=wide))
    sent: list[tuple[str, bytes]] = []
    runner = _Runner(
        coordinator,
        codec,
        _Table(""),
        {t: _Out(sent, t) for t in TOPICS.names()},
        rates=TenantRates(10),
    )
    clock, waits = [1_800_000_000_000], list[float]()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock[0] += int(seconds * 1000)

    runner.clock = lambda: clock[0]
    runner.sleep = sleep

    def start(flow_run: str, tenant: str) -> None:
        event = FlowEvent(
            flow_id="etl",
            flow_run_id=flow_run,
            kind=FlowEventKind.START,
            scheduled_at=SLOT,
            at=SLOT,
            tenant=tenant,
        )
        asyncio.run(runner.handle_batch([_FaustEvent(codec.encode(TOPICS.flow_events, event))]))

    start("etl@manual:1", "acme")
    assert waits == [2.0]
    start("etl@manual:2", "acme")
    assert waits == [2.0, 3.0]
    start("etl@manual:3", "default")
    assert waits == [2.0, 3.0]
    requests = [codec.decode(v, RunRequest) for t, v in sent if t == TOPICS.runs(Priority.NORMAL)]
    assert len({r.run_id for r in requests}) == len(requests) == 90
