"""Executors against real local targets: an HTTP server thread, real subprocesses."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from cronstream.consumers.errors import ExecutionFailed, PermanentFailure, TargetInvalid, TimedOut
from cronstream.consumers.executors.base import CancelFlag, Output, RunContext
from cronstream.consumers.executors.http import BODY_CAP, HttpExecutor
from cronstream.consumers.executors.kafka import KafkaExecutor, TopicPolicy
from cronstream.consumers.executors.secrets import Secrets
from cronstream.schemas.events import Target
from cronstream.schemas.policy import TenantPolicy


def context(
    timeout: float = 5.0, payload: str | None = '{"x": 1}', tenant: str = "default"
) -> RunContext:
    return RunContext(
        run_id="job@2026-11-22T10:00:00.000Z",
        job_id="job",
        attempt=2,
        scheduled_at=datetime(2026, 11, 22, 10, tzinfo=UTC),
        payload=payload,
        tenant=tenant,
        deadline=time.monotonic() + timeout,
    )


SEEN: list[tuple[str, str, dict[str, str], bytes]] = []


class Recorder(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        SEEN.append((self.command, self.path, dict(self.headers), body))
        if self.path.startswith("/status/"):
            self.send_response(int(self.path.rsplit("/", 1)[1]))
        elif self.path == "/redirect-out":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
        elif self.path.startswith("/redirect-cross"):  # same server, another origin
            self.send_response(307)
            address = self.server.server_address
            assert isinstance(address, tuple)
            self.send_header("Location", f"http://localhost:{address[1]}/landing")
        elif self.path == "/redirect-bad-port":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:abc/")
        elif self.path in ("/drip", "/drip-headers", "/huge"):
            self._stream_slowly()
            return
        elif self.path == "/slow":
            time.sleep(2)
            self.send_response(200)
        elif self.path in ("/answer", "/down-page"):
            page = b'{"done": true}' if self.path == "/answer" else b"<h1>down for maintenance</h1>"
            self.send_response(200 if self.path == "/answer" else 503)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET = _answer

    def _stream_slowly(self) -> None:
        """/drip: a body of 100 bytes, one every 0.3 s; /drip-headers: the status line
        and headers that way; /huge: a 500 with a 200 MB body, as fast as it goes."""
        try:
            if self.path == "/huge":
                self.send_response(500)
                self.send_header("Content-Length", str(200 * 2**20))
                self.end_headers()
                block = b"e" * 2**20
                for _ in range(200):
                    self.wfile.write(block)
                return
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
            if self.path == "/drip":
                self.wfile.write(head)
                head = b"x" * 100
            for byte in head:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass  # the client gave up, as it should

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    SEEN.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def http() -> Iterator[HttpExecutor]:
    executor = HttpExecutor(allow=["127.0.0.0/8"])
    yield executor
    executor.close()


def test_http_sends_the_run_id_as_idempotency_key(server: str, http: HttpExecutor) -> None:
    result = http.execute(Target(type="http", url=f"{server}/hook?a=1"), context())
    assert result is None  # an empty body: no output
    method, path, headers, body = SEEN[0]
    assert (method, path, body) == ("POST", "/hook?a=1", b'{"x": 1}')
    assert headers["Idempotency-Key"] == "job@2026-11-22T10:00:00.000Z"
    assert headers["X-Cronstream-Attempt"] == "2"
    assert headers["Content-Type"] == "application/json"


def test_http_resolves_secret_headers_on_the_worker(server: str, tmp_path: Path) -> None:
    (tmp_path / "hook-token").write_text("Bearer s3cret\n")
    http = HttpExecutor(allow=["127.0.0.0/8"], secrets=Secrets(tmp_path, env={}))
    target = Target(type="http", url=f"{server}/ok", headers={"Authorization": "secret:hook-token"})
    http.execute(target, context())
    assert SEEN[0][2]["Authorization"] == "Bearer s3cret"
    with pytest.raises(TargetInvalid, match="'nope' is not configured"):
        http.execute(replace(target, headers={"Authorization": "secret:nope"}), context())
    http.close()


def test_a_tenants_http_job_never_reaches_an_operators_secret(server: str, tmp_path: Path) -> None:
    """Found by probing: Authorization: secret:billing-token in a tenant's job
    was sent with the operators' value."""
    (tmp_path / "billing-token").write_text("operators-value\n")
    http = HttpExecutor(
        allow=["127.0.0.0/8"],
        secrets=Secrets(tmp_path, env={}),
        policy=lambda: TenantPolicy(["acme:http=127.0.0.0/8"]),
    )
    target = Target(type="http", url=f"{server}/ok", headers={"X-Key": "secret:billing-token"})
    try:
        with pytest.raises(TargetInvalid, match="not configured for tenant 'acme'") as caught:
            http.execute(target, context(tenant="acme"))
        assert not caught.value.retriable
        assert "operators-value" not in str(caught.value)
        assert SEEN == []  # refused before any request
        (tmp_path / "acme").mkdir()
        (tmp_path / "acme" / "billing-token").write_text("acme-value")
        http.execute(target, context(tenant="acme"))
        http.execute(target, context())
        assert [headers["X-Key"] for _, _, headers, _ in SEEN] == ["acme-value", "operators-value"]
    finally:
        http.close()


def test_a_tenants_http_job_reaches_a_private_address_only_by_its_own_grant(server: str) -> None:
    """Found by probing: every tenant's job had the worker's --http-allow, which
    on the local stack reached Prometheus' lifecycle API and the Connect REST API."""
    port = int(server.rpartition(":")[2])
    grants = TenantPolicy([f"acme:http=127.0.0.1:{port}"])
    http = HttpExecutor(allow=["127.0.0.0/8"], policy=lambda: grants)
    try:
        for tenant, url in (("beta", f"{server}/ok"), ("acme", f"http://127.0.0.1:{port + 1}/")):
            with pytest.raises(TargetInvalid, match="has no grant for it"):
                http.execute(Target(type="http", url=url), context(tenant=tenant))
        assert SEEN == []
        http.execute(Target(type="http", url=f"{server}/ok"), context(tenant="acme"))
        http.execute(Target(type="http", url=f"{server}/ok"), context())  # --http-allow
        assert len(SEEN) == 2
    finally:
        http.close()


def test_http_url_credentials_are_refused_not_silently_dropped(http: HttpExecutor) -> None:
    with pytest.raises(TargetInvalid, match="credentials in the URL") as caught:
        http.execute(Target(type="http", url="http://u:hunter2@127.0.0.1:9/x"), context())
    assert "hunter2" not in str(caught.value)


def test_http_refuses_loopback_unless_allowed(server: str) -> None:
    strict = HttpExecutor()
    try:
        with pytest.raises(TargetInvalid, match="not a public address"):
            strict.execute(Target(type="http", url=f"{server}/hook"), context())
    finally:
        strict.close()
    assert SEEN == []


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "192.168.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_http_refuses_private_link_local_and_special_addresses(address: str) -> None:
    with pytest.raises(TargetInvalid):
        HttpExecutor().check_address(address)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "2002:a00:1::1",
        "::ffff:10.0.0.1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ],
)
def test_http_refuses_private_ipv4_addresses_inside_ipv6_ones(address: str) -> None:
    """Found by review: NAT64 64:ff9b::7f00:1 and 6to4 2002:7f00:1:: passed the guard."""
    with pytest.raises(TargetInvalid):
        HttpExecutor().check_address(address)
    HttpExecutor().check_address("64:ff9b::808:808")  # 8.8.8.8 through NAT64: public


CREDENTIALS = (
    "Authorization",
    "Cookie",
    "Proxy-Authorization",
    "X-Api-Key",
    "Private-Token",
    "X-Auth-Token",
)


def test_http_drops_credentials_on_a_redirect_to_another_origin(server: str) -> None:
    """Found by review: Authorization, Cookie and the body went to the redirect's origin;
    found by probing: X-Api-Key, Private-Token and X-Auth-Token still did."""
    http = HttpExecutor(
        allow=["127.0.0.0/8", "::1/128"], secrets=Secrets(env={"CRONSTREAM_SECRET_HOOK": "c1"})
    )
    try:
        secret = {name: f"s3cret-{i}" for i, name in enumerate(CREDENTIALS)}
        secret |= {"X-Team": "a", "X-Plain-Name": "secret:hook"}  # a secret is a credential
        get = Target(type="http", method="GET", url=f"{server}/redirect-cross", headers=secret)
        assert http.execute(get, context()) is None  # 200, an empty body
        (_, first, sent, _), (_, landing, followed, _) = SEEN
        assert (first, landing) == ("/redirect-cross", "/landing")
        assert [sent[name] for name in CREDENTIALS] == [secret[name] for name in CREDENTIALS]
        assert sent["X-Plain-Name"] == "c1"
        assert [name for name in (*CREDENTIALS, "X-Plain-Name") if name in followed] == []
        assert followed["X-Team"] == "a"
        post = Target(type="http", url=f"{server}/redirect-cross-post", headers=secret)
        with pytest.raises(PermanentFailure, match="the payload is not sent there"):
            http.execute(post, context())
        assert [path for _, path, _, _ in SEEN][2:] == ["/redirect-cross-post"]
    finally:
        http.close()


def test_an_http_body_is_the_attempts_output_an_error_pages_too(
    server: str, http: HttpExecutor
) -> None:
    assert http.execute(Target(type="http", url=f"{server}/answer"), context()) == Output(
        b'{"done": true}'
    )
    with pytest.raises(ExecutionFailed, match="HTTP 503") as caught:
        http.execute(Target(type="http", url=f"{server}/down-page"), context())
    assert caught.value.output == Output(b"<h1>down for maintenance</h1>")


def test_http_checks_every_redirect(server: str, http: HttpExecutor) -> None:
    with pytest.raises(TargetInvalid, match=r"169\.254\.169\.254"):
        http.execute(Target(type="http", url=f"{server}/redirect-out"), context())


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com:abc/",
        "http://example.com:99999/",
        f"http://{'a' * 64}.example.com/",
        "ftp://example.com/",
        "http://127.0.0.1\x00x/",
        "http://127.0.0.1 x/",
    ],
)
def test_http_unusable_url_is_an_invalid_target_not_a_crash(http: HttpExecutor, url: str) -> None:
    with pytest.raises(TargetInvalid, match="not a usable http"):
        http.execute(Target(type="http", url=url), context())


def test_http_redirect_to_an_unusable_url_fails_the_attempt(
    server: str, http: HttpExecutor
) -> None:
    with pytest.raises(ExecutionFailed, match="Invalid URL in location header"):
        http.execute(Target(type="http", url=f"{server}/redirect-bad-port"), context())


@pytest.mark.parametrize(
    ("status", "error"), [(500, ExecutionFailed), (429, ExecutionFailed), (404, PermanentFailure)]
)
def test_http_status_decides_whether_a_retry_can_help(
    server: str, http: HttpExecutor, status: int, error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        http.execute(Target(type="http", url=f"{server}/status/{status}"), context())
    assert type(caught.value) is error


def test_http_timeout_is_reported_as_timed_out(server: str, http: HttpExecutor) -> None:
    with pytest.raises(TimedOut):
        http.execute(Target(type="http", url=f"{server}/slow"), context(timeout=0.5))


@pytest.mark.parametrize("path", ["/drip", "/drip-headers"])
def test_http_deadline_bounds_the_whole_call(server: str, http: HttpExecutor, path: str) -> None:
    """Found by review: the timeout was per read, so a server sending a byte every 0.9 s
    held a 2 s job for 6.3 s."""
    started = time.monotonic()
    with pytest.raises(TimedOut):
        http.execute(Target(type="http", url=f"{server}{path}"), context(timeout=1.0))
    assert time.monotonic() - started < 1.5
    assert http.execute(Target(type="http", url=f"{server}/ok"), context()) is None  # 200


def test_http_reads_a_capped_start_of_a_huge_body(server: str, http: HttpExecutor) -> None:
    """Found by review: a 200 MB response cost the worker +600 MB."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ExecutionFailed, match="HTTP 500") as caught:
        http.execute(Target(type="http", url=f"{server}/huge"), context(timeout=20))
    assert str(caught.value).endswith("e" * 300)
    output = caught.value.output  # the body's start, the attempt's output: the rest unread
    assert isinstance(output, Output)
    assert (output.data, output.dropped) == (b"e" * BODY_CAP, "end")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 20
    assert BODY_CAP == 64 * 1024


def test_cancel_flag_wakes_a_waiter_and_times_out() -> None:
    flag = CancelFlag()
    assert not flag.is_set()
    started = time.monotonic()
    assert flag.wait(0.05) is False
    assert time.monotonic() - started >= 0.05
    threading.Timer(0.05, flag.set).start()
    assert flag.wait(5) is True  # woken by set() from another thread, not the timeout
    assert time.monotonic() - started < 2
    assert flag.is_set()
    assert flag.wait(0) is True
    early = CancelFlag()
    early.set()
    assert early.wait(None) is True  # set before anyone waited: no Event needed


class _Metadata:
    """What ``list_topics(topic)`` answers: the topic, and its 3 partitions if it exists."""

    def __init__(self, topic: str, exists: bool) -> None:
        error = None if exists else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        partitions = {p: object() for p in range(3)} if exists else {}
        self.topics = {topic: type("T", (), {"error": error, "partitions": partitions})()}


class _Delivered:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class _Producer:
    """What KafkaExecutor asks of its producer: topic metadata, and produce/poll."""

    def __init__(self, existing: set[str]) -> None:
        self.existing, self.lookups = existing, 0
        self.produced: list[str] = []

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        self.lookups += 1
        return _Metadata(topic, topic in self.existing)

    def produce(self, topic: str, *, on_delivery: Any, **_kw: Any) -> None:
        self.produced.append(topic)
        on_delivery(None, _Delivered(len(self.produced) + 6))

    def poll(self, _timeout: float) -> int:
        return 0


POLICY = TopicPolicy(own=frozenset({"cronstream.runs.normal", "cronstream.jobs"}))


@pytest.mark.parametrize(
    ("topic", "policy", "why"),
    [
        ("cronstream.runs.normal", POLICY, "one of cronstream's own"),
        ("__consumer_offsets", POLICY, "internal to Kafka"),
        ("__anything", POLICY, "internal to Kafka"),
        ("billing.events", replace(POLICY, allow=("orders.*",)), "matches no --kafka-allow"),
        # A tenant's commands topic: a job there would act as that tenant.
        ("cronstream.t.acme.in", replace(POLICY, prefix="cronstream"), "one of cronstream's own"),
    ],
)
def test_kafka_targets_never_write_into_cronstreams_or_kafkas_own_topics(
    topic: str, policy: TopicPolicy, why: str
) -> None:
    """Found by review: a kafka target could write to cronstream.runs.* (a crafted
    payload there decodes as a run that never went through validation) or to
    __consumer_offsets."""
    producer = _Producer({topic})
    with pytest.raises(TargetInvalid, match=why):
        KafkaExecutor(producer, policy).execute(Target(type="kafka", topic=topic), context())
    assert producer.produced == []


def test_a_kafka_target_topic_that_does_not_exist_fails_at_once_and_is_remembered() -> None:
    """Found by review: it waited 30 s for an acknowledgement, ended TIMED_OUT and was
    retried, holding a run slot each time."""
    producer = _Producer({"orders.created"})
    executor = KafkaExecutor(producer, replace(POLICY, allow=("orders.*",)))
    started = time.monotonic()
    for _ in range(3):
        with pytest.raises(TargetInvalid, match="does not exist") as caught:
            executor.execute(Target(type="kafka", topic="orders.missing"), context())
        assert not caught.value.retriable
    assert time.monotonic() - started < 1
    assert producer.lookups == 1  # the broker's answer is remembered
    assert executor.execute(Target(type="kafka", topic="orders.created"), context()) == (
        "produced to orders.created partition 0 offset 7"  # the attempt's output
    )


def test_a_header_that_would_split_the_request_is_refused(server: str, http: HttpExecutor) -> None:
    for headers in ({"X-A": "1\r\nX-Injected: 1"}, {"Bad Name": "1"}, {"X-A": "a\x00"}):
        with pytest.raises(TargetInvalid, match="not a valid HTTP header"):
            http.execute(Target(type="http", url=f"{server}/ok", headers=headers), context())
    # what frames or routes the message on a kept connection is the worker's alone
    for name in ("Content-Length", "transfer-encoding", "Host", "Connection"):
        with pytest.raises(TargetInvalid, match="the worker's to set"):
            http.execute(Target(type="http", url=f"{server}/ok", headers={name: "0"}), context())
    assert SEEN == []
