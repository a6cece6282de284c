"""The audit trail's pure parts: the field-level diff (redacted, updated_at ignored), the
record on the wire, and what the admission records for a tenant's command."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from cronstream.producers.audit import Auditor, command_record
from cronstream.runtime.settings import Settings
from cronstream.schemas.audit import AuditAction, AuditRecord, field_changes
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import TenantAction, TenantCommand
from tests.fakes import FakeRegistry

AT = datetime(2026, 11, 25, 18, tzinfo=UTC)


def _job(**more: object) -> JobDefinition:
    spec = {
        "id": "nightly",
        "cron": "0 3 * * *",
        "target": "http",
        "url": "https://example.com/hook?token=abc",
        **more,
    }
    return job_from_spec(spec, max_payload_bytes=65536)


def _changed(before: object, after: object) -> dict[str, tuple[object, object]]:
    return {
        c.field: (
            None if c.before is None else json.loads(c.before),
            None if c.after is None else json.loads(c.after),
        )
        for c in field_changes(before, after)
    }


def test_a_change_lists_only_the_fields_that_differ_by_their_path() -> None:
    before = _job()
    after = replace(_job(cron="*/5 * * * *", max_attempts=5), updated_at=AT)
    assert _changed(before, after) == {
        "schedule.expression": ("0 3 * * *", "*/5 * * * *"),
        "retry.max_attempts": (3, 5),
    }  # updated_at changes on every write: not a change of the job


def test_credentials_never_reach_the_trail() -> None:
    after = _job(headers={"Authorization": "Bearer hunter2", "X-Trace": "on"})
    changed = _changed(_job(), after)
    assert changed["target.headers.Authorization"] == (None, "***")
    assert changed["target.headers.X-Trace"] == (None, "on")
    created = _changed(None, after)
    assert created["target.url"] == (None, "https://example.com/hook?token=***")
    assert "hunter2" not in json.dumps([c.after for c in field_changes(None, after)])
    assert "abc" not in json.dumps([c.after for c in field_changes(None, after)])


def test_a_rotated_credential_is_a_change_though_both_sides_are_masked() -> None:
    """Found by review: the diff was taken after redaction, so a new Authorization value
    (or a new token in the URL) made a PUT with no change at all."""
    before = _job(headers={"Authorization": "Bearer old"})
    after = _job(
        headers={"Authorization": "Bearer new"}, url="https://example.com/hook?token=other"
    )
    assert _changed(before, after) == {
        "target.headers.Authorization": ("***", "*** (changed)"),
        "target.url": (
            "https://example.com/hook?token=***",
            "https://example.com/hook?token=*** (changed)",
        ),
    }
    assert "old" not in str(field_changes(before, after))
    assert "other" not in str(field_changes(before, after))


def test_a_creation_and_a_deletion_list_every_field_that_has_a_value() -> None:
    created = _changed(None, _job())
    assert created["job_id"] == (None, "nightly")
    assert all(before is None and after is not None for before, after in created.values())
    deleted = _changed(_job(), None)
    assert set(deleted) == set(created)
    assert _changed(_job(), _job()) == {}


def test_a_record_goes_over_the_wire_and_back() -> None:
    codec = Codec(FakeRegistry())
    topic = Topics(Settings.from_env({})).audit
    record = Auditor("cronstream-app").record(
        AuditAction.PUT, "nightly", before=_job(), after=_job(cron="0 4 * * *"), at=AT
    )
    back = codec.decode(codec.encode(topic, record), AuditRecord)
    assert back == record
    assert back.principal == "cronstream-app"
    assert " pid " in back.origin
    assert [c.field for c in back.changes] == ["schedule.expression"]
    assert ("action", b"PUT") in record.headers()


def test_the_admission_records_a_tenants_command_with_who_issued_it() -> None:
    job = replace(_job(), job_id="acme/nightly", tenant="acme")
    paused = replace(job, paused=True)
    command = TenantCommand(
        command_id="c1",
        action=TenantAction.PAUSE,
        job_id="nightly",
        issued_at=AT,
        issued_by="api token of acme from 10.0.0.7",
    )
    record = command_record(
        "acme", command, stored="acme/nightly", before=job, after=paused, run_id=None, at=AT
    )
    assert (record.action, record.job_id, record.tenant) == (
        AuditAction.PAUSE,
        "acme/nightly",
        "acme",
    )
    assert (record.principal, record.origin, record.os_user) == (
        "tenant acme",
        "api token of acme from 10.0.0.7",
        None,
    )
    assert [(c.field, c.before, c.after) for c in record.changes] == [("paused", "false", "true")]
    cancel = replace(command, action=TenantAction.CANCEL, reason="wrong day", issued_by=None)
    record = command_record(
        "acme",
        cancel,
        stored="acme/nightly",
        before=job,
        after=None,
        run_id="acme/nightly@manual:k",
        at=AT,
    )
    assert record.detail == "acme/nightly@manual:k (wrong day)"
    assert record.changes == ()
    assert record.origin == "unknown (no issued_by)"
