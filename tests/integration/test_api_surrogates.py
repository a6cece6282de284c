"""Text no topic can carry (a lone surrogate, ``"\\udcff"``: valid JSON, not Unicode) is
bad input, through the real API and through a tenant's own Kafka client: 422 naming the
field, a refusal from the admission, never a 500 or a stopped admission."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from cronstream.producers.tenant import TenantClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import utc_now
from cronstream.schemas.tenancy import RefusalCode, TenantAction, TenantCommand
from tests.integration.tenants import AdmissionThread, Api
from tests.integration.test_api import SPEC, eventually

pytestmark = pytest.mark.integration

LONE = "\udcff"


def _json(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    """``body`` as JSON the way any client may write it: a lone surrogate as its escape
    (httpx itself cannot encode one)."""
    content = json.dumps(body).encode()
    return client.request(
        method, path, content=content, headers={"content-type": "application/json"}
    )


def test_a_lone_surrogate_is_a_422_naming_its_field(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, _ = two
    with api.client(history_ns, a) as ca:
        for extra, field in (
            ({"url": f"https://example.com/{LONE}"}, "target.url"),
            ({"payload": f"x{LONE}"}, "payload"),
            ({"payload": {"k": LONE}}, None),  # JSON payload: stored as escaped JSON text
            ({"headers": {"X-Team": LONE}}, "target.headers.X-Team"),
            ({"headers": {f"X-{LONE}": "v"}}, "the name of target.headers"),
            ({"on": {"topic": f"{a}.orders", "filter": f'value.a == "{LONE}"'}}, "on.filter"),
            ({"after": [f"up{LONE}"]}, "after[0]"),
        ):
            got = _json(ca, "PUT", "/v1/jobs/s", {**SPEC, **extra})
            if field is None:
                assert got.status_code == 200, got.text
                continue
            assert got.status_code == 422, (extra, got.text)
            assert f"{field}" in got.json()["error"], got.text
            assert "lone surrogate" in got.json()["error"]
        eventually(lambda: ca.get("/v1/jobs/s"), lambda r: r.status_code == 200)
        key = _json(ca, "POST", "/v1/jobs/s/trigger", {"idempotency_key": f"k{LONE}"})
        assert key.status_code == 422, key.text
        assert "idempotency_key holds a lone surrogate" in key.json()["error"]
        reason = _json(ca, "POST", "/v1/runs/s@manual:k/cancel", {"reason": LONE})
        assert reason.status_code == 422, reason.text
        assert "reason holds a lone surrogate" in reason.json()["error"]
        # A path or query can carry no surrogate (percent-decoding replaces what is not
        # UTF-8): its bytes are an unknown job, an unknown status, a bad duration.
        assert ca.get("/v1/jobs/%ED%B3%BF").status_code == 404
        assert ca.get("/v1/history?status=%ED%B3%BF").status_code == 422
        assert ca.get("/v1/jobs/s/history?since=%ED%B3%BF").status_code == 422
        # and what was refused changed nothing: the next write is accepted at once
        assert _json(ca, "POST", "/v1/jobs/s/trigger", {"idempotency_key": "k"}).status_code == 200
    with api.client(history_ns, "*") as admin:
        assert admin.get("/v1/jobs?tenant=a%ED%B3%BF").status_code == 400
        for tenant in ("nobody", "null"):  # no commands topic here: 404, not a 500
            got = admin.post("/v1/jobs/s/pause", params={"tenant": tenant})
            assert got.status_code == 404, got.text
            assert got.json() == {"error": f"no tenant {tenant!r}"}


def test_the_admission_refuses_a_raw_command_whose_text_is_not_utf8_and_goes_on(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    """A tenant's own Kafka client writes a command whose url holds a surrogate's bytes
    (``ed b3 bf``: what a lenient encoder makes of "\\udcff"): refused as unreadable,
    answered, and the next command decided as usual."""
    a, _ = two
    with TenantClient(ns, a) as client:
        job = client.put(_spec_job(f"https://example.com/{'Z' * 3}"))
        assert job.accepted, job.reason
        command = TenantCommand(
            command_id="raw-1",
            action=TenantAction.PUT,
            job_id="raw",
            issued_at=utc_now(),
            job=_spec_job("https://example.com/ZZZ"),
        )
        value = client.publisher.codec.encode(client.commands, command)
        assert value.count(b"ZZZ") == 1
        client.publisher.producer.produce(
            client.commands, key=b"raw", value=value.replace(b"ZZZ", b"\xed\xb3\xbf")
        )
        client.publisher.producer.flush(30)
        after = client.put(_spec_job("https://example.com/after"))
        assert after.accepted, after.reason
        refused = [r for r in client.answers.values() if r.code is RefusalCode.UNREADABLE]
        assert len(refused) == 1, client.answers
        assert "UnicodeDecodeError" in (refused[0].reason or ""), refused[0].reason
    assert admission.thread.is_alive()


def _spec_job(url: str) -> Any:
    from cronstream.schemas.definition import job_from_spec

    return job_from_spec({**SPEC, "id": "raw", "url": url}, max_payload_bytes=65536)
