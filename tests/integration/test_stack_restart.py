"""Restarts the whole stack and checks nothing was forgotten. Marked ``restarts_stack``:
the suite runs it after every other test (tests/conftest.py)."""

from __future__ import annotations

import pytest

from infra import stack as stack_mod
from producers.client import JobClient
from runtime.registry import registry_client
from runtime.settings import Settings
from schemas.avro import schema_json
from schemas.catalog import Topics
from schemas.events import JobDefinition
from tests.integration.helpers import cronstream

pytestmark = [pytest.mark.integration, pytest.mark.restarts_stack]


def test_subjects_ids_and_jobs_survive_down_and_up(ns: Settings) -> None:
    put = cronstream(ns, "jobs", "put", "survivor", "--cron", "0 3 * * *", "--target", "http",
                     "--url", "https://example.com/h")  # fmt: skip
    assert put.returncode == 0, put.stderr
    subject = f"{Topics(ns).jobs}-value"
    schema = schema_json(JobDefinition.AVRO_NAME)
    with registry_client(ns, writer=True) as registry:
        id_before = registry.lookup(subject, schema)
    assert id_before is not None

    stack_mod.down(ns, say=lambda _m: None)
    assert not any(s.running for s in stack_mod.status(ns))
    stack_mod.up(ns, say=lambda _m: None)

    with registry_client(ns, writer=True) as registry:
        assert subject in registry.subjects()
        assert registry.lookup(subject, schema) == id_before
    with JobClient(ns) as client:
        job = client.get("survivor")
    assert isinstance(job, JobDefinition)
    assert job.describe_schedule() == "cron 0 3 * * *"
