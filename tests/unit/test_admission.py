"""The admission's decisions (pure) and the tenancy names."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
import pytest

from cronstream.api.app import STATUS_OF
from cronstream.producers.admission.core import Admission, Quotas
from cronstream.schemas.avro import parsed_schema
from cronstream.schemas.events import CronSchedule, JobDefinition, Target, Trigger
from cronstream.schemas.tenancy import (
    RefusalCode,
    TenantAction,
    TenantCommand,
    TenantResult,
    commands_pattern,
    qualify,
    tenant_of_topic,
    tenant_problems,
    unqualify,
)

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)
JOB = JobDefinition(
    job_id="ignored",
    tenant="someone-else",
    updated_at=NOW,
    schedule=CronSchedule(expression="0 2 * * *"),
    target=Target(type="http", url="https://example.com/hook"),
)


def command(action: TenantAction, job_id: str = "nightly", n: int = 0, **kw: Any) -> TenantCommand:
    return TenantCommand(command_id=f"c{n}", action=action, job_id=job_id, issued_at=NOW, **kw)


def put(admission: Admission, tenant: str, job_id: str, n: int = 0) -> TenantResult:
    decision = admission.decide(
        tenant, command(TenantAction.PUT, job_id, n, job=JOB), offset=n, now=NOW
    )
    return decision.result


def test_names_and_topics() -> None:
    assert qualify("acme", "a/b") == "acme/a/b"
    assert unqualify("acme", "acme/a/b") == "a/b"
    assert unqualify("acme", "acmex/a") is None
    assert unqualify("acme", "nightly") is None
    assert tenant_of_topic("p", "p.t.acme.in") == "acme"
    assert tenant_of_topic("p", "p.t.acme.out") is None
    assert tenant_of_topic("p", "p.t.Bad.in") is None
    assert tenant_of_topic("q", "p.t.acme.in") is None
    pattern = re.compile(commands_pattern("cs.x"))
    assert pattern.match("cs.x.t.acme-1.in")
    assert not pattern.match("cs.x.t.acme.out")
    assert not pattern.match("csXx.t.acme.in")  # the prefix's dots are literal
    assert tenant_problems("acme-1") == []
    for bad in ("", "Acme", "a.b", "-a", "a" * 33, "a/b", "acme\n"):
        assert tenant_problems(bad), bad
    assert "reserved" in tenant_problems("admin")[0]


def test_a_put_is_stored_under_the_topics_tenant_whatever_the_record_says() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    decision = admission.decide("acme", command(TenantAction.PUT, job=JOB), offset=7, now=NOW)
    assert decision.result.accepted
    assert decision.result.source_offset == 7
    assert decision.job is not None
    stored, job = decision.job
    assert stored == "acme/nightly"
    assert job is not None
    assert (job.job_id, job.tenant) == ("acme/nightly", "acme")
    assert admission.counts["acme"] == 1


def test_another_tenants_job_is_not_in_reach() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    assert put(admission, "acme", "nightly").accepted
    for action in (
        TenantAction.DELETE,
        TenantAction.PAUSE,
        TenantAction.RESUME,
        TenantAction.TRIGGER,
    ):
        decision = admission.decide("beta", command(action), offset=1, now=NOW)
        assert decision.result.reason == "no job 'nightly'"
        assert (decision.job, decision.run, decision.cancel) == (None, None, None)
    cancel = command(TenantAction.CANCEL, run_id="nightly@manual:k")
    assert admission.decide("beta", cancel, offset=1, now=NOW).result.reason == "no job 'nightly'"
    # A job an operator stored with a tenant's prefix but another tenant is not its either.
    admission.observe("beta/x", replace(JOB, job_id="beta/x", tenant="default"))
    decision = admission.decide("beta", command(TenantAction.DELETE, "x"), offset=1, now=NOW)
    assert decision.result.reason == "no job 'x'"


def test_invalid_definitions_and_ids_are_refused_with_every_reason() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    bad = replace(JOB, schedule=CronSchedule(expression="not cron"), timezone="Nowhere/X")
    decision = admission.decide("acme", command(TenantAction.PUT, job=bad), offset=0, now=NOW)
    assert not decision.result.accepted
    assert decision.result.reason is not None
    assert "Nowhere/X" in decision.result.reason
    assert "not cron" in decision.result.reason
    assert decision.job is None
    long_id = "x" * 200  # fits alone, not once "acme/" is in front
    assert "job id" in (put(admission, "acme", long_id).reason or "")
    assert "job id" in (put(admission, "acme", "bad\nid").reason or "")
    empty = admission.decide("acme", command(TenantAction.PUT), offset=0, now=NOW)
    assert empty.result.reason == "PUT without a job definition"


def test_the_job_quota_counts_new_jobs_only() -> None:
    admission = Admission(Quotas(max_jobs=2), max_payload_bytes=65536)
    assert put(admission, "acme", "a").accepted
    assert put(admission, "acme", "b").accepted
    refused = put(admission, "acme", "c")
    assert refused.reason == "job quota: tenant 'acme' has 2 of its 2 jobs"
    assert put(admission, "acme", "a").accepted  # a change
    assert put(admission, "beta", "a").accepted  # another tenant's count
    admission.decide("acme", command(TenantAction.DELETE, "b"), offset=0, now=NOW)
    assert put(admission, "acme", "c").accepted
    admission.observe("acme/c", None)  # an operator deleted it
    assert admission.counts["acme"] == 1


def test_triggers_per_minute_refill_after_a_minute_and_name_a_deterministic_run() -> None:
    admission = Admission(Quotas(triggers_per_minute=2), max_payload_bytes=65536)
    put(admission, "acme", "nightly")

    def trigger(n: int, at: datetime, key: str | None = None) -> TenantResult:
        decision = admission.decide(
            "acme", command(TenantAction.TRIGGER, n=n, idempotency_key=key), offset=n, now=at
        )
        if decision.result.accepted:
            assert decision.run is not None
            assert decision.run.run_id == f"acme/{decision.result.run_id}"
            assert (decision.run.tenant, decision.run.trigger) == ("acme", Trigger.MANUAL)
        return decision.result

    assert trigger(1, NOW).run_id == "nightly@manual:c1"  # the command id: read twice, one run
    assert trigger(2, NOW + timedelta(seconds=20), key="k").run_id == "nightly@manual:k"
    late = trigger(3, NOW + timedelta(seconds=30))
    assert late.reason == (
        "trigger quota: at most 2 manual runs per minute; the next fits in 30.0 s"
    )
    assert trigger(4, NOW + timedelta(seconds=60)).accepted
    assert not trigger(5, NOW + timedelta(seconds=61)).accepted


def test_pause_resume_and_cancel() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    put(admission, "acme", "nightly")
    later = NOW + timedelta(minutes=1)
    paused = admission.decide("acme", command(TenantAction.PAUSE), offset=1, now=later)
    assert paused.job is not None
    assert paused.job[1] is not None
    assert (paused.job[1].paused, paused.job[1].updated_at) == (True, later)
    resumed = admission.decide("acme", command(TenantAction.RESUME), offset=2, now=later)
    assert resumed.job is not None
    assert resumed.job[1] is not None
    assert not resumed.job[1].paused
    cancel = admission.decide(
        "acme", command(TenantAction.CANCEL, run_id="nightly@manual:k"), offset=3, now=later
    )
    assert cancel.cancel is not None
    assert (cancel.cancel.run_id, cancel.cancel.job_id) == ("acme/nightly@manual:k", "acme/nightly")
    other = admission.decide(
        "acme", command(TenantAction.CANCEL, run_id="other@manual:k"), offset=4, now=later
    )
    assert other.result.reason == "run 'other@manual:k' is not a run of job 'nightly'"
    bad = admission.decide("acme", command(TenantAction.CANCEL), offset=5, now=later)
    assert bad.result.reason is not None
    assert "not a cronstream run id" in bad.result.reason


@pytest.mark.parametrize("with_job", [True, False])
def test_a_tenant_command_survives_avro_with_its_nested_definition(with_job: bool) -> None:
    """Found while building: codecs read with return_record_name, so the job union's
    branch came back as (name, record) and from_avro failed on every PUT."""
    original = command(TenantAction.PUT, job=JOB if with_job else None, reason="r")
    schema = parsed_schema(TenantCommand.AVRO_NAME)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, original.to_avro())
    buf.seek(0)
    record: Any = fastavro.schemaless_reader(buf, schema, None, return_record_name=True)
    assert TenantCommand.from_avro(record) == original


# Every refusal path of ``Admission.decide``: (name, tenant, command, its code). Decided
# against ``_busy``: acme has its one job ``nightly`` and has used its one trigger.
NOT_CRON = replace(JOB, schedule=CronSchedule(expression="not cron"))
PRIVATE = replace(JOB, target=Target(type="http", url="http://127.0.0.1:9190/-/quit"))
REFUSALS: list[tuple[str, str, TenantCommand, RefusalCode]] = [
    (
        "command id",
        "acme",
        replace(command(TenantAction.PUT, job=JOB), command_id="c\n"),
        RefusalCode.INVALID,
    ),
    ("job id", "acme", command(TenantAction.PUT, "bad\nid", job=JOB), RefusalCode.INVALID),
    *[
        (
            f"no job to {a.value.lower()}",
            "acme",
            command(a, "missing", run_id="missing@manual:k"),
            RefusalCode.NOT_FOUND,
        )
        for a in (
            TenantAction.DELETE,
            TenantAction.PAUSE,
            TenantAction.RESUME,
            TenantAction.TRIGGER,
            TenantAction.CANCEL,
        )
    ],
    ("another tenant's job", "beta", command(TenantAction.DELETE), RefusalCode.NOT_FOUND),
    ("put without a job", "acme", command(TenantAction.PUT), RefusalCode.INVALID),
    ("invalid definition", "acme", command(TenantAction.PUT, job=NOT_CRON), RefusalCode.INVALID),
    ("target policy", "acme", command(TenantAction.PUT, job=PRIVATE), RefusalCode.POLICY),
    ("job quota", "acme", command(TenantAction.PUT, "second", job=JOB), RefusalCode.QUOTA),
    (
        "idempotency key",
        "acme",
        command(TenantAction.TRIGGER, idempotency_key="k\n"),
        RefusalCode.INVALID,
    ),
    ("trigger quota", "acme", command(TenantAction.TRIGGER, n=2), RefusalCode.QUOTA),
    ("run id", "acme", command(TenantAction.CANCEL), RefusalCode.INVALID),
    (
        "run of another job",
        "acme",
        command(TenantAction.CANCEL, run_id="other@manual:k"),
        RefusalCode.INVALID,
    ),
]


def _busy() -> Admission:
    admission = Admission(Quotas(max_jobs=1, triggers_per_minute=1), max_payload_bytes=65536)
    assert put(admission, "acme", "nightly").code is None
    triggered = admission.decide("acme", command(TenantAction.TRIGGER, n=1), offset=1, now=NOW)
    assert triggered.result.accepted
    assert triggered.result.code is None
    return admission


@pytest.mark.parametrize(
    ("tenant", "sent", "code"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_every_refusal_of_decide_carries_its_code(
    tenant: str, sent: TenantCommand, code: RefusalCode
) -> None:
    decision = _busy().decide(tenant, sent, offset=9, now=NOW)
    assert not decision.result.accepted
    assert decision.result.reason
    assert decision.result.code is code, decision.result.reason
    assert (decision.job, decision.run, decision.cancel) == (None, None, None)


def test_the_refusal_codes_are_decided_not_read_from_the_reasons_words() -> None:
    """A reason echoes words the tenant chose: the API once gave 429 to any reason
    holding "quota" (here an invalid job id, and a topic the policy refuses)."""
    admission = _busy()
    worded = admission.decide(
        "acme", command(TenantAction.PUT, "quota\n", job=JOB), offset=9, now=NOW
    ).result
    assert "quota" in (worded.reason or "")
    assert worded.code is RefusalCode.INVALID  # 422, not the 429 its words once chose
    topic = replace(JOB, target=Target(type="kafka", topic="quota.x"))
    named = admission.decide("acme", command(TenantAction.PUT, job=topic), offset=9, now=NOW)
    assert "quota" in (named.result.reason or "")
    assert named.result.code is RefusalCode.POLICY


def test_accepted_answers_carry_no_code() -> None:
    admission = _busy()
    for sent in (
        command(TenantAction.PAUSE),
        command(TenantAction.RESUME),
        command(TenantAction.CANCEL, run_id="nightly@manual:k"),
        command(TenantAction.DELETE),
    ):
        result = admission.decide("acme", sent, offset=9, now=NOW).result
        assert (result.accepted, result.code) == (True, None), result.reason


def test_an_unreadable_record_and_a_fault_have_their_own_codes() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    unreadable = admission.unreadable("k", 3, "undecodable command: x", NOW).result
    assert (unreadable.accepted, unreadable.code, unreadable.action) == (
        False,
        RefusalCode.UNREADABLE,
        None,
    )
    faulted = admission.faulted(command(TenantAction.PUT, job=JOB), 4, "internal error", NOW)
    assert (faulted.result.accepted, faulted.result.code) == (False, RefusalCode.INTERNAL)
    assert (faulted.result.reason, faulted.result.action) == ("internal error", TenantAction.PUT)


def test_every_code_has_its_http_status_and_a_policy_refusal_is_403() -> None:
    """The API's table (README, "The HTTP API"); an internal fault on one command is
    refused and answered like bad input, never a 500."""
    assert STATUS_OF == {
        RefusalCode.NOT_FOUND: 404,
        RefusalCode.QUOTA: 429,
        RefusalCode.POLICY: 403,
        RefusalCode.INVALID: 422,
        RefusalCode.UNREADABLE: 422,
        RefusalCode.INTERNAL: 422,
    }


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (
            {"job": replace(JOB, target=replace(JOB.target, url="https://e.com/\udcff"))},
            "job.target.url",
        ),
        ({"job": replace(JOB, payload="\udcff")}, "job.payload"),
        (
            {"job": replace(JOB, target=replace(JOB.target, headers={"X": "\ud800"}))},
            "job.target.headers.X",
        ),
        ({"idempotency_key": "k\udcff"}, "idempotency_key"),
        ({"reason": "\udcff"}, "reason"),
        ({"job_id": "x\udcff"}, "job_id"),
    ],
)
def test_text_no_topic_can_carry_is_refused_by_field_and_the_answer_can_be_written(
    kw: dict[str, Any], field: str
) -> None:
    """A lone surrogate in any field: refused (invalid) naming it, and the answer itself
    encodes (it quotes the command's ids): the admission never raises on writing it."""
    admission = Admission(Quotas(), max_payload_bytes=65536)
    job_id = kw.pop("job_id", "nightly")
    action = TenantAction.PUT if "job" in kw else TenantAction.TRIGGER
    decision = admission.decide("acme", command(action, job_id, **kw), offset=0, now=NOW)
    result = decision.result
    assert (result.accepted, result.code) == (False, RefusalCode.INVALID)
    assert f"{field} holds a lone surrogate" in (result.reason or "")
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed_schema(TenantResult.AVRO_NAME), result.to_avro())
