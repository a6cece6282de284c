"""``cronstream``'s public API (``cronstream/__init__.py``): each name of ``__all__``
resolves to what it names, importing ``cronstream`` alone imports none of them, and an
unknown name is an AttributeError."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cronstream
from cronstream.producers.client import JobClient
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.flows import FlowDefinition

ROOT = __file__.rsplit("/tests/", 1)[0]


def test_every_name_resolves() -> None:
    assert sorted(cronstream.__all__) == sorted(cronstream._API)
    for name in cronstream.__all__:
        assert getattr(cronstream, name) is not None, name
    assert cronstream.Client is JobClient
    assert cronstream.Job is JobDefinition
    assert cronstream.Flow is FlowDefinition
    assert set(cronstream.__all__) <= set(dir(cronstream))


def test_a_job_built_from_a_spec_through_the_api() -> None:
    spec = {"id": "report", "cron": "0 2 * * *", "target": "http", "url": "https://x.example/run"}
    job = cronstream.job_from_spec(spec, max_payload_bytes=65536)
    assert isinstance(job, cronstream.Job)
    with pytest.raises(cronstream.SpecError, match="every"):
        cronstream.job_from_spec({"id": "x", "every": "soon"}, max_payload_bytes=65536)


def test_importing_cronstream_imports_no_client() -> None:
    code = "import sys, cronstream; print(sorted(m for m in sys.modules if m.startswith(('cronstream.', 'confluent_kafka'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'JobClient'"):
        _ = cronstream.JobClient
