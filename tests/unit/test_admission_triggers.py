"""The admission on a tenant's triggers (docs/event-triggers.md "Tenants"): the
jobs it comes after are qualified as its own id is, a source topic not its own is a
policy refusal (403), and its jobs with ``on:`` have a quota of their own."""

from __future__ import annotations

from dataclasses import replace

from cronstream.producers.admission.core import Admission, Quotas
from cronstream.schemas.events import EventTrigger, JobDefinition, Target
from cronstream.schemas.tenancy import RefusalCode, TenantAction, TenantResult
from tests.unit.test_admission import JOB, NOW, command

EVENT = replace(JOB, schedule=None, on=EventTrigger(topic="acme.orders", filter="value.n > 1"))
AFTER = replace(JOB, schedule=None, after=("extract", "load"))


def put(admission: Admission, tenant: str, job_id: str, job: JobDefinition) -> TenantResult:
    sent = command(TenantAction.PUT, job_id, job=job)
    decision = admission.decide(tenant, sent, offset=1, now=NOW)
    if decision.result.accepted:
        assert decision.job is not None
        assert decision.job[1] == admission.jobs[f"{tenant}/{job_id}"]
    return decision.result


def test_the_jobs_a_tenants_job_comes_after_are_its_own_qualified_as_its_id() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    assert put(admission, "acme", "report", AFTER).accepted
    stored = admission.jobs["acme/report"]
    assert stored.after == ("acme/extract", "acme/load")
    assert stored.describe_schedule() == "after acme/extract, acme/load"
    # Another tenant's id written in full is a job of this tenant's, named so: the
    # tenant reaches no other namespace through after: either.
    assert put(admission, "acme", "r2", replace(AFTER, after=("beta/extract",))).accepted
    assert admission.jobs["acme/r2"].after == ("acme/beta/extract",)
    # The rules are judged on the qualified ids: the job itself, a job twice.
    itself = put(admission, "acme", "r3", replace(AFTER, after=("r3",)))
    assert (itself.code, itself.reason) == (RefusalCode.INVALID, "after names the job itself")


def test_a_source_topic_not_the_tenants_own_is_a_policy_refusal_with_every_rule_named() -> None:
    admission = Admission(Quotas(), max_payload_bytes=65536)
    assert put(admission, "acme", "orders", EVENT).accepted
    assert admission.jobs["acme/orders"].on == EVENT.on
    for topic in ("beta.orders", "acmex.orders", "orders", "cronstream.history"):
        other = replace(EVENT, on=EventTrigger(topic=topic))
        refused = put(admission, "acme", "orders", other)
        assert refused.code is RefusalCode.POLICY, topic
        assert refused.reason == (
            f"trigger policy: on.topic '{topic}' is not one of the tenant's own topics (acme.*)"
        )
        assert admission.jobs["acme/orders"].on == EVENT.on  # unchanged
    both = replace(
        EVENT,
        on=EventTrigger(topic="beta.orders"),
        target=Target(type="http", url="http://127.0.0.1:9/x"),
    )
    refused = put(admission, "acme", "both", both)
    assert refused.code is RefusalCode.POLICY
    assert refused.reason is not None
    assert refused.reason.startswith("target policy: ")
    assert "; trigger policy: on.topic 'beta.orders'" in refused.reason
    assert "acme/both" not in admission.jobs


def test_jobs_with_an_event_trigger_have_their_own_quota() -> None:
    admission = Admission(Quotas(max_jobs=5, max_event_jobs=2), max_payload_bytes=65536)
    assert put(admission, "acme", "e1", EVENT).accepted
    assert put(admission, "acme", "e2", EVENT).accepted
    third = put(admission, "acme", "e3", EVENT)
    assert (third.code, third.reason) == (
        RefusalCode.QUOTA,
        ("event job quota: tenant 'acme' has 2 of its 2 jobs with an event trigger (on:)"),
    )
    assert put(admission, "acme", "plain", JOB).accepted  # the job quota has room
    assert put(admission, "acme", "e1", replace(EVENT, on=EventTrigger(topic="acme.x"))).accepted
    # A job given on: counts as a new one; taken off, it makes room.
    assert put(admission, "acme", "plain", EVENT).code is RefusalCode.QUOTA
    assert put(admission, "acme", "e2", JOB).accepted
    assert admission.event_counts["acme"] == 1
    assert put(admission, "acme", "plain", EVENT).accepted
    assert put(admission, "beta", "e1", replace(EVENT, on=EventTrigger(topic="beta.o"))).accepted
    admission.decide("acme", command(TenantAction.DELETE, "e1"), offset=2, now=NOW)
    assert (admission.event_counts["acme"], admission.counts["acme"]) == (1, 2)
    admission.observe("acme/plain", None)  # an operator deleted it
    assert admission.event_counts["acme"] == 0
