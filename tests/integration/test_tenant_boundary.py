"""No tenant's record stops the admission, and a tenant may put only the
targets its grants allow (public http and its own topics by default), through its own
Kafka client and through the HTTP API alike."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from cronstream.producers.admission.core import Quotas
from cronstream.producers.tenant import TenantClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import CronSchedule, JobDefinition, Priority, Target
from cronstream.schemas.tenancy import RefusalCode
from tests.integration.tenants import AdmissionThread, Api
from tests.integration.test_api import SPEC

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 27, tzinfo=UTC)


def _job(job_id: str, target: Target) -> JobDefinition:
    return JobDefinition(
        job_id=job_id,
        tenant="default",
        updated_at=T0,
        target=target,
        schedule=CronSchedule(expression="0 2 * * *"),
    )


def test_a_record_the_admission_cannot_read_is_refused_and_the_next_one_accepted(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    a, _ = two
    with TenantClient(ns, a) as client:
        bad = client.put(_job("bad", Target(type="http", url="http://[zz]/")))
        assert not bad.accepted
        assert "not a usable URL" in (bad.reason or ""), bad.reason
        assert bad.code is RefusalCode.INVALID
        started = time.monotonic()
        good = client.put(_job("good", Target(type="http", url="https://example.com/h")))
        assert good.accepted, good.reason
        assert time.monotonic() - started < 10
    assert admission.thread.is_alive()


def test_a_tenant_is_refused_every_target_it_was_not_granted(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    a, _ = two
    hostile = {
        "python": Target(type="python", callable="os:system"),
        "shell": Target(type="shell", command="sh -c id"),
        "foreign topic": Target(type="kafka", topic=Topics(ns).runs(Priority.HIGH)),
        "other tenant's topic": Target(type="kafka", topic="beta.events"),
        "private address": Target(type="http", url="http://127.0.0.1:9190/-/quit"),
        "link-local": Target(type="http", url="http://169.254.169.254/latest/meta-data"),
        "loopback name": Target(type="http", url="http://localhost:8083/connectors"),
    }
    with TenantClient(ns, a) as client:
        for what, target in hostile.items():
            answer = client.put(_job(what.replace(" ", "-").replace("'", ""), target))
            assert not answer.accepted, what
            assert (answer.reason or "").startswith("target policy: "), (what, answer.reason)
            assert answer.code is RefusalCode.POLICY, what
        own = client.put(_job("own-topic", Target(type="kafka", topic=f"{a}.events")))
        assert own.accepted, own.reason


@pytest.fixture
def granted(ns: Settings, two: tuple[str, str]) -> Iterator[AdmissionThread]:
    a, _ = two
    quotas = Quotas(max_jobs=10, triggers_per_minute=10)
    running = AdmissionThread(ns, quotas, grants=(f"{a}:http=127.0.0.1:8787",))
    yield running
    running.stop()


def test_an_operators_grant_allows_exactly_the_host_and_port_it_names(
    ns: Settings, two: tuple[str, str], granted: AdmissionThread
) -> None:
    a, b = two
    target = Target(type="http", url="http://127.0.0.1:8787/hooks/demo")
    with TenantClient(ns, a) as ca, TenantClient(ns, b) as cb:
        assert ca.put(_job("demo", target)).accepted
        other_port = replace(target, url="http://127.0.0.1:9190/-/quit")
        assert not ca.put(_job("quit", other_port)).accepted
        assert not cb.put(_job("demo", target)).accepted  # a's grant is not b's


def test_the_api_answers_unreadable_specs_with_422_an_ungranted_target_with_403(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, _ = two
    with api.client(history_ns, a) as ca:
        bad = ca.put("/v1/jobs/bad", json={**SPEC, "url": "http://[zz]/"})
        assert bad.status_code == 422, bad.text
        assert "not a usable URL" in bad.json()["error"]
        listed = ca.put("/v1/jobs/sh", json={**SPEC, "target": "shell", "command": ["sh", "-c"]})
        assert listed.status_code == 422, listed.text
        assert "command must be text" in listed.json()["error"]
        key = ca.post("/v1/jobs/x/trigger", json={"idempotency_key": 5})
        assert key.status_code == 422, key.text
        private = ca.put("/v1/jobs/p", json={**SPEC, "url": "http://127.0.0.1:9190/-/quit"})
        assert private.status_code == 403, private.text  # readable, but not granted (policy)
        assert private.json()["error"].startswith("target policy: ")
        good = ca.put("/v1/jobs/good", json=SPEC)
        assert good.status_code == 200, good.text
