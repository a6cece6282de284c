"""Fuzz: the admission answers every schema-valid tenant command, however
hostile its job definition, with a result (accepted or refused with a reason), never by
raising; a JSON job spec (the API's and YAML's path) is a job or a SpecError."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given

from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import JobDefinition, Target
from cronstream.schemas.tenancy import TenantAction, TenantCommand
from tests.hostile import COMMANDS, FUZZ, SPECS
from tests.processors import NOW, SETTINGS, AdmissionHarness


@FUZZ
@given(COMMANDS)
@example(
    TenantCommand(
        command_id="c",
        action=TenantAction.PUT,
        job_id="j",
        issued_at=NOW,
        job=JobDefinition(
            job_id="j", updated_at=NOW, target=Target(type="http", url="http://[zz]/")
        ),
    )
)  # the probe
def test_every_tenant_command_is_answered_and_none_makes_the_admission_raise(
    command: TenantCommand,
) -> None:
    h = AdmissionHarness()
    result = h.send("acme", command)
    assert result.source_offset == h.offset
    assert result.accepted or result.reason
    assert (result.code is None) is result.accepted, result.reason  # every refusal has a code
    assert h.processor.faults.streak == 0, result.reason  # refused as bad input, not a fault


@FUZZ
@given(SPECS)
@example({"id": "job", "target": "shell", "command": ["sh", "-c", "id"]})  # the probe
def test_a_json_spec_is_a_job_or_a_spec_error(spec: dict[str, Any]) -> None:
    try:
        job = job_from_spec(spec, max_payload_bytes=SETTINGS.max_payload_bytes, now=NOW)
    except SpecError:
        return
    assert isinstance(job, JobDefinition)
