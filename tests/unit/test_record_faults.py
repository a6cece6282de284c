"""One record cannot stop a processor: the rule of ``runtime.faults``, and each
processor refusing or dead-lettering a record its handling raised on while the next
record goes on. Faults are injected (a handler patched to raise for one record): the
fuzz suite (``test_fuzz_*``) looks for real ones."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.worker import attempts as attempts_module
from cronstream.producers.admission.core import Admission
from cronstream.producers.flows import flow_from_spec
from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError, RepeatedFault
from cronstream.runtime.faults import REASON_CHARS, RecordFaults
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.events import (
    CronSchedule,
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
)
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.tenancy import RefusalCode, TenantAction, TenantCommand
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.flows.coordinator import Coordinator
from tests.factories import definition, outcome, run_request
from tests.processors import (
    NOW,
    NOW_MS,
    RUNS,
    TOPICS,
    AdmissionHarness,
    ArchiverHarness,
    FlowsHarness,
    SchedulerHarness,
    SinkHarness,
    WorkerHarness,
)


def faults_counted(role: str) -> float:
    value = metrics.REGISTRY.get_sample_value("cronstream_record_faults_total", {"role": role})
    return value or 0.0


def fail(faults: RecordFaults, tenant: str | None = "acme", key: str = "k", n: int = 1) -> None:
    for i in range(n):
        try:
            raise ValueError(f"bad {i}")
        except ValueError as exc:
            faults.fault(exc, topic="t", partition=0, offset=i, key=key, tenant=tenant)


# -- the rule -------------------------------------------------------------------------------
def test_one_source_however_many_faults_never_stops_the_process() -> None:
    faults = RecordFaults("test-one")
    fail(faults, "acme", n=1000)
    assert faults.streak == 1000
    assert faults_counted("test-one") == 1000


def test_twenty_in_a_row_from_three_sources_stop_it_naming_the_count() -> None:
    faults = RecordFaults("test-three")
    fail(faults, "a", n=17)
    fail(faults, "b")
    fail(faults, "c")  # 19 in a row from three tenants: still up
    with pytest.raises(RepeatedFault, match="20 records in a row failed, from 3 sources"):
        fail(faults, "a")


def test_a_success_ends_the_streak() -> None:
    faults = RecordFaults("test-ok")
    for tenant in ("a", "b", "c") * 6:
        fail(faults, tenant)
    faults.ok()
    fail(faults, "a", n=2)
    assert (faults.streak, faults.sources) == (2, {"tenant a"})


def test_operators_records_count_their_job_ids_as_sources() -> None:
    """Tenant ``default`` (the operators') is trusted: its distinct jobs are distinct
    sources, so a single-tenant deployment's bug stops the process too; one job's
    records failing again and again do not."""
    one_job = RecordFaults("test-default")
    fail(one_job, "default", key="nightly", n=100)
    faults = RecordFaults("test-default")
    for i in range(19):
        fail(faults, "default", key=f"job-{i % 3}")
    with pytest.raises(RepeatedFault):
        fail(faults, "default", key="job-0")


@pytest.mark.parametrize(
    "exc",
    [
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        PublishError("delivery failed"),
        RegistryUnavailable("registry down"),
        ConnectionResetError("reset"),
        OSError(28, "No space left on device"),
        MemoryError(),
        TimeoutError("slow"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_infrastructure_is_never_a_records_fault(exc: BaseException) -> None:
    faults = RecordFaults("test-infra", infrastructure=(LookupError,))
    for error in (exc, KeyError("a role's own outage type")):
        with pytest.raises(type(error)) as raised:
            faults.fault(error, topic="t", partition=0, offset=1, tenant="acme")
        assert raised.value is error
    assert faults.streak == 0
    assert faults_counted("test-infra") == 0


def test_the_reason_names_the_error_redacted_and_cut_short() -> None:
    faults = RecordFaults("test-reason")
    try:
        raise ValueError("https://bob:hunter2@example.com/x?token=abc \x1b[31m" + "y" * 5000)
    except ValueError as exc:
        fault = faults.fault(exc, topic="t", partition=3, offset=9, key=b"k", tenant="acme")
    assert fault.reason.startswith("internal error on this record: ValueError: https://***@")
    assert "hunter2" not in fault.reason
    assert "abc" not in fault.reason
    assert "\x1b" not in fault.reason
    assert len(fault.reason) <= REASON_CHARS + 40
    letter = fault.letter("sink", value=b"v")
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("t", 3, 9)
    assert (letter.source_key, letter.source_value, letter.reason) == (b"k", b"v", fault.reason)


def test_a_traceback_once_per_code_site(caplog: pytest.LogCaptureFixture) -> None:
    faults = RecordFaults("test-trace")
    with caplog.at_level(logging.ERROR, logger="cronstream.faults"):
        fail(faults, n=5)
    assert len(caplog.records) == 5
    assert [r.exc_info is not None for r in caplog.records] == [True] + [False] * 4
    assert "t[0]@3 key b'k'" in caplog.records[3].getMessage()


# -- the processors -------------------------------------------------------------------------
def job(job_id: str) -> JobDefinition:
    """Due every minute: the scheduler fires it within ``fire_until``'s two minutes."""
    return definition(job_id, schedule=CronSchedule(expression="* * * * *"))


def put(command_id: str, job_id: str = "x") -> TenantCommand:
    return TenantCommand(
        command_id=command_id,
        action=TenantAction.PUT,
        job_id=job_id,
        job=job(job_id),
        issued_at=NOW,
    )


def test_the_admission_refuses_a_command_it_raises_on_and_decides_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decide = Admission.decide

    def poisoned(self: Admission, tenant: str, command: TenantCommand, **kw: Any) -> Any:
        if command.command_id == "poison":
            self.observe(f"{tenant}/{command.job_id}", command.job)  # changed, then raised
            raise ValueError("Invalid IPv6 URL")
        return decide(self, tenant, command, **kw)

    monkeypatch.setattr(Admission, "decide", poisoned)
    h = AdmissionHarness()
    before = faults_counted("admission")
    refused = h.send("acme", put("poison", "bad"))
    assert (refused.accepted, refused.command_id, refused.action) == (
        False,
        "poison",
        TenantAction.PUT,
    )
    assert refused.reason == "internal error on this record: ValueError: Invalid IPv6 URL"
    assert refused.code is RefusalCode.INTERNAL
    assert "acme/bad" not in h.processor.admission.jobs  # the view as it was
    assert h.send("acme", put("next")).accepted
    assert h.processor.admission.counts["acme"] == 1
    assert faults_counted("admission") == before + 1


def test_the_scheduler_dead_letters_a_definition_its_core_raises_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = PartitionScheduler.put

    def poisoned(self: PartitionScheduler, schedule: Any, *, now: int) -> Any:
        if schedule.job_id == "poison":
            original(self, schedule, now=now)  # the job half in the core, then a bug
            raise OverflowError("date value out of range")
        return original(self, schedule, now=now)

    monkeypatch.setattr(PartitionScheduler, "put", poisoned)
    h = SchedulerHarness()
    h.put("poison", h.codec.encode(TOPICS.jobs, job("poison")))
    h.put("x", h.codec.encode(TOPICS.jobs, job("x")))
    (letter,) = h.letters()
    assert letter.reason == "internal error on this record: OverflowError: date value out of range"
    assert (letter.source_topic, letter.source_offset, letter.job_id) == (TOPICS.jobs, 1, "poison")
    assert letter.source_value == h.codec.encode(TOPICS.jobs, job("poison"))
    assert set(h.owned[0].core.jobs) == {"x"}  # dropped whole; the next one loaded
    h.fire_until(NOW_MS + 120_000)
    fired = [r for r in h.producer.produced if r.topic == TOPICS.runs(Priority.NORMAL)]
    assert {r.key for r in fired} == {b"x"}


def test_the_scheduler_dead_letters_a_definition_whose_reading_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = SchedulerHarness()
    schedule = h.definitions.schedule

    def poisoned(key: str, raw: bytes) -> Any:
        if key == "poison":
            raise IndexError("list index out of range")
        return schedule(key, raw)

    monkeypatch.setattr(h.definitions, "schedule", poisoned)
    h.put("poison", h.codec.encode(TOPICS.jobs, job("poison")))
    h.put("x", h.codec.encode(TOPICS.jobs, job("x")))
    (letter,) = h.letters()
    assert "IndexError: list index out of range" in letter.reason
    assert set(h.owned[0].core.jobs) == {"x"}
    assert h.definitions.faults.sources == set()  # the next definition ended the streak


def test_the_worker_dead_letters_a_run_request_reading_raises_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = WorkerHarness()
    poison = h.codec.encode(RUNS, run_request("j@poison"))
    decode = h.codec.decode_run
    monkeypatch.setattr(h.codec, "decode_run", _raising_for(decode, poison, KeyError("schema")))
    try:
        h.read(poison)
        h.read(h.codec.encode(RUNS, run_request("j@good")))
        h.run_all()
    finally:
        h.close()
    (letter,) = h.letters()
    assert (letter.source_topic, letter.source_offset) == (RUNS, 1)
    assert letter.reason == "internal error on this record: KeyError: 'schema'"
    # A short run: its final outcome alone (no STARTED record: --started-after).
    assert [(o.run_id, o.status) for o in h.outcomes()] == [("j@good", RunStatus.SUCCEEDED)]
    assert h.consumer.commits[-1][0][0][:3] == (RUNS, 0, 3)  # past both


def _raising_for(call: Any, poison: bytes, exc: Exception) -> Any:
    def wrapped(value: bytes) -> Any:
        if value == poison:
            raise exc
        return call(value)

    return wrapped


def test_the_worker_dead_letters_a_run_it_raises_on_before_its_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    context = RunContext

    def poisoned(**fields: Any) -> Any:
        if fields["run_id"] == "j@poison":
            raise UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed")
        return context(**fields)

    monkeypatch.setattr(attempts_module, "RunContext", poisoned)
    h = WorkerHarness()
    try:
        h.read(h.codec.encode(RUNS, run_request("j@poison", trigger=Trigger.MANUAL)))
        h.read(h.codec.encode(RUNS, run_request("j@good")))
        h.run_all()
    finally:
        h.close()
    statuses = [(o.run_id, o.status) for o in h.outcomes()]
    assert ("j@poison", RunStatus.DEAD_LETTERED) in statuses
    assert ("j@good", RunStatus.SUCCEEDED) in statuses
    (letter,) = h.letters()
    assert (letter.run_id, letter.source_topic, letter.source_offset) == ("j@poison", RUNS, 1)
    assert letter.reason.startswith("internal error on this record: UnicodeEncodeError")
    assert h.consumer.commits[-1][0][0][:3] == (RUNS, 0, 3)


def test_the_sink_dead_letters_a_record_whose_rows_raise_but_not_cassandra_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cassandra import OperationTimedOut

    h = SinkHarness()
    tables = h.sink.tables
    assert tables is not None
    rows = tables.rows

    def poisoned(o: RunOutcome) -> Any:
        if o.run_id == "j@poison":
            raise TypeError("an int is required")
        if o.run_id == "j@down":
            raise OperationTimedOut("cassandra is down")
        return rows(o)

    monkeypatch.setattr(tables, "rows", poisoned)
    built, reason = h.rows_of(h.codec.encode(TOPICS.history, outcome("j@poison")))
    assert (built, reason) == ([], "internal error on this record: TypeError: an int is required")
    built, reason = h.rows_of(h.codec.encode(TOPICS.history, outcome("j@2")))
    assert reason is None
    assert len(built) == 4
    with pytest.raises(OperationTimedOut):  # an outage: waited out, never dead-lettered
        h.rows_of(h.codec.encode(TOPICS.history, outcome("j@down")))


def test_the_archiver_dead_letters_an_outcome_it_cannot_hold() -> None:
    h = ArchiverHarness()
    assert h.accept(h.codec.encode(TOPICS.history, outcome("j@1", tenant="é" * 125))) is None
    assert h.accept(b"\x00garbage") is None  # skipped: the sink dead-letters it
    kept = h.accept(h.codec.encode(TOPICS.history, outcome("j@1", tenant="acme")))
    assert kept is not None
    assert kept.tenant == "acme"
    (letter,) = h.letters()
    assert "cannot name an archive partition" in letter.reason
    assert (letter.stage, letter.source_offset) == ("archiver", 1)
    assert h.archiver.letters  # acknowledged before the next flush commits


def test_the_archiver_dead_letters_an_outcome_it_raises_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from cronstream.consumers import archiver

    monkeypatch.setattr(archiver, "folder_problem", _raise_on("poison"))
    h = ArchiverHarness()
    assert h.accept(h.codec.encode(TOPICS.history, outcome("j@1", tenant="poison"))) is None
    assert h.accept(h.codec.encode(TOPICS.history, outcome("j@1", tenant="acme"))) is not None
    (letter,) = h.letters()
    assert letter.reason == "internal error on this record: ZeroDivisionError: division by zero"


def _raise_on(bad: str) -> Any:
    def check(tenant: str) -> str | None:
        if tenant == bad:
            return str(1 / 0)
        return None

    return check


class Poisoned(Coordinator):
    """A coordinator that writes its row, then raises, on one flow run (a bug)."""

    def handle(self, rows: Any, event: FlowEvent) -> list[Any]:
        sends = super().handle(rows, event)
        if event.flow_run_id.endswith("poison"):
            raise ValueError("a bug")
        return sends


def flow_event(run: str) -> FlowEvent:
    return FlowEvent(
        flow_id="etl",
        flow_run_id=run,
        kind=FlowEventKind.START,
        scheduled_at=NOW,
        at=NOW,
        tenant="acme",
    )


ETL = flow_from_spec(
    {"id": "etl", "nodes": [{"name": "a", "target": "python", "callable": "m:f"}]},
    max_payload_bytes=65536,
)


def test_the_flows_coordinator_dead_letters_an_event_it_raises_on_changing_no_row() -> None:
    h = FlowsHarness(ETL, coordinator=Poisoned)
    poison, good = (
        h.codec.encode(TOPICS.flow_events, flow_event("etl@poison")),
        h.codec.encode(TOPICS.flow_events, flow_event("etl@good")),
    )
    h.handle(poison, good)
    (letter,) = h.on(TOPICS.dlq, DeadLetter)
    assert (letter.stage, letter.source_offset, letter.run_id) == (
        "flows-coordinator",
        1,
        "etl@poison",
    )
    assert letter.reason == "internal error on this record: ValueError: a bug"
    assert letter.source_value == poison
    assert h.rows().get("etl@poison") is None  # no row half changed
    assert h.rows().get("etl@good") is not None
    assert [r.run_id for r in h.on(TOPICS.runs(Priority.NORMAL), RunRequest)] == ["etl@good/a"]


def test_a_repeated_fault_stops_the_flows_coordinator() -> None:
    crashed: list[BaseException] = []

    async def crash(exc: BaseException) -> None:
        crashed.append(exc)

    h = FlowsHarness(ETL, coordinator=Poisoned)
    h.runner.crash = crash
    h.runner.faults = RecordFaults("flows", streak=3, sources=1)
    events = [h.codec.encode(TOPICS.flow_events, flow_event(f"etl@{i}poison")) for i in range(3)]
    with pytest.raises(RepeatedFault):
        h.handle(*events)
    assert len(crashed) == 1
