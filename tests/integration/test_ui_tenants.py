"""`cronstream ui` as tenants and strangers see it, over HTTP on the real
stack: a tenant signed in sees only its own jobs, runs and dead letters; a stranger gets
the sign-in page, a foreign Host 400 and a big body 413 without the process growing."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import token_path
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import DeadLetter, RunOutcome, RunStatus, utc_now
from tests.integration.helpers import CronstreamProcess, put_ui_job, signed_in, ui_process
from tests.integration.history_runs import write_history
from tests.integration.tenants import AdmissionThread

pytestmark = pytest.mark.integration


def _their_work(settings: Settings, tenants: tuple[str, str]) -> None:
    """Each tenant's failed runs in history and a dead letter of its job, as the sink
    and the worker write them."""
    now = utc_now()
    write_history(
        settings,
        (
            RunOutcome(
                run_id=f"{t}/report@1",
                job_id=f"{t}/report",
                tenant=t,
                status=RunStatus.FAILED,
                scheduled_at=now - timedelta(minutes=1),
                recorded_at=now,
                error=f"run-error-of-{t}",
            )
            for t in tenants
        ),
    )
    publisher = Publisher(settings)
    try:
        for t in tenants:
            publisher.publish(
                Topics(settings).dlq,
                DeadLetter(
                    reason=f"letter-of-{t}",
                    stage="worker",
                    source_topic="runs",
                    source_partition=-1,
                    source_offset=-1,
                    dead_at=now,
                    job_id=f"{t}/report",
                ),
            )
        publisher.flush()
    finally:
        publisher.close()


def test_a_tenant_signed_in_sees_only_its_own_jobs_runs_and_dead_letters(
    history_ns: Settings,
    two: tuple[str, str],
    admission: AdmissionThread,
    procs: list[CronstreamProcess],
    tmp_path: Path,
) -> None:
    assert admission is not None
    a, b = two
    url = ui_process(history_ns, procs, tmp_path)
    for t in two:
        put_ui_job(url, token_path(history_ns, t).read_text().strip())
    _their_work(history_ns, two)
    with signed_in(url, token_path(history_ns, a).read_text().strip()) as ca:
        page = ca.get("/ui/jobs/report")  # a's own: its job, its run, its letter
        assert page.status_code == 200, page.text
        assert f"run-error-of-{a}" in page.text, page.text
        deadline = time.monotonic() + 60
        while f"letter-of-{a}" not in (letters := ca.get("/ui/dlq").text):
            assert time.monotonic() < deadline, letters
            time.sleep(1)
        assert f"letter-of-{b}" not in letters
    with signed_in(url, token_path(history_ns, b).read_text().strip()) as cb:
        mine = cb.get("/ui/runs", params={"status": "failed", "since": "1h"}).text
        assert f"run-error-of-{b}" in mine
        assert f"run-error-of-{a}" not in mine
        for path in ("/ui/jobs/report", f"/ui/jobs/{a}/report"):
            other = cb.get(path)  # b's /ui/jobs/report is b's own job
            assert (other.status_code == 200) == (path == "/ui/jobs/report"), path
            assert f"run-error-of-{a}" not in other.text, path
        assert "no job" in cb.get(f"/ui/jobs/{a}/report").text
        for params in ({"job": f"{a}/report"}, {"run_id": f"{a}/report@1"}):
            assert f"run-error-of-{a}" not in cb.get("/ui/runs", params=params).text
        letters = cb.get("/ui/dlq").text
        assert f"letter-of-{b}" in letters
        assert f"letter-of-{a}" not in letters
        # Sign-out ends the session on the server: the old cookie opens nothing.
        old = cb.cookies["cronstream_session"]
        assert cb.post("/ui/logout").status_code == 303
        cb.cookies.clear()
        again = cb.get("/ui/jobs", headers={"cookie": f"cronstream_session={old}"})
        assert (again.status_code, again.headers["location"]) == (303, "/ui/login")


def test_strangers_get_the_sign_in_page_a_foreign_host_400_and_a_big_body_413(
    ns: Settings, procs: list[CronstreamProcess], tmp_path: Path
) -> None:
    url = ui_process(ns, procs, tmp_path)
    for path in ("/ui", "/ui/jobs", "/ui/jobs/x", "/ui/runs?status=failed", "/ui/dlq"):
        reply = httpx.get(url + path, timeout=30)
        assert (reply.status_code, reply.headers["location"]) == (303, "/ui/login"), path
    login = httpx.get(f"{url}/ui/login", timeout=30)
    assert 'id="sign-in"' in login.text
    for reply in (login, httpx.get(f"{url}/v1/jobs", timeout=30)):  # a page, an API 401
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
    port = int(url.rsplit(":", 1)[1])
    assert httpx.get(f"http://localhost:{port}/healthz", timeout=30).status_code == 200
    rebound = httpx.get(f"{url}/ui/login", headers={"Host": f"evil.example:{port}"}, timeout=30)
    assert rebound.status_code == 400
    assert "Host" in rebound.json()["error"]
    ui = procs[-1].proc.pid
    _put_raw(port, chunked=False, megabytes=1)  # warm: the first request's allocations
    before = _rss_mib(ui)
    assert _put_raw(port, chunked=False, megabytes=60) == 413  # refused from the header
    assert _put_raw(port, chunked=True, megabytes=60) == 413  # cut off past 1 MiB
    grown = _rss_mib(ui) - before
    assert grown < 20, f"RSS grew {grown:.0f} MiB for two refused 60 MiB bodies"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _put_raw(port: int, *, chunked: bool, megabytes: int) -> int:
    """PUT a body of ``megabytes`` MiB without a token (chunked, or with its length), the
    answer read while it is sent (the server may answer and close long before the end);
    the status code."""
    head = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {megabytes << 20}"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    answer: list[bytes] = []

    def read() -> None:
        try:
            answer.append(sock.recv(4096))
        except OSError as exc:  # reset before the answer came, or none in 30 s
            answer.append(repr(exc).encode())

    reader = threading.Thread(target=read)
    try:
        sock.sendall(
            f"PUT /v1/jobs/x HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n"
            "Content-Type: application/json\r\n\r\n".encode()
        )
        reader.start()
        chunk = b"x" * (1 << 20)
        for _ in range(megabytes):
            if answer:
                break
            sock.sendall(b"100000\r\n" + chunk + b"\r\n" if chunked else chunk)
        if chunked and not answer:
            sock.sendall(b"0\r\n\r\n")  # the end of the body
    except (BrokenPipeError, ConnectionResetError):
        pass  # answered and closed while the body was on its way
    finally:
        reader.join(30)
        sock.close()
    assert answer, "no answer"
    assert answer[0].startswith(b"HTTP/1.1 "), answer
    return int(answer[0].split()[1])
