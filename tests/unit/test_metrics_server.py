"""A process's metrics server: /metrics, /healthz and /readyz on the loopback by
default; /metrics only with the bearer token wherever a token is configured, and a
process asked to expose it elsewhere without one refuses to start."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cronstream.runtime import metrics
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.metrics_server import authorized, is_loopback, metrics_token, serve


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("CRONSTREAM_METRICS_HOST", raising=False)
    monkeypatch.delenv("CRONSTREAM_METRICS_TOKEN_FILE", raising=False)
    server = serve(_free_port())
    assert server is not None
    assert server.server_address[0] == "127.0.0.1"  # the loopback unless configured
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_server_serves_metrics_healthz_and_readyz(base: str) -> None:
    try:
        metrics.PROBES.set_ready(False)
        assert httpx.get(f"{base}/healthz").status_code == 200
        refused = httpx.get(f"{base}/readyz")
        assert (refused.status_code, refused.text) == (
            503,
            "not ready: waiting for its dependencies or its group\n",
        )
        metrics.PROBES.set_ready(True)
        assert httpx.get(f"{base}/readyz").status_code == 200
        assert "cronstream_member_ready 1.0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/other").status_code == 404
    finally:
        metrics.PROBES.set_ready(False)


def test_exposed_metrics_refuse_to_start_without_a_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CRONSTREAM_METRICS_TOKEN_FILE", raising=False)
    monkeypatch.setenv("CRONSTREAM_METRICS_HOST", "0.0.0.0")
    with pytest.raises(SettingsError, match="CRONSTREAM_METRICS_TOKEN_FILE"):
        serve(_free_port())
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="empty"):
        metrics_token("0.0.0.0", {"CRONSTREAM_METRICS_TOKEN_FILE": str(empty)})
    with pytest.raises(SettingsError, match="cannot read"):
        metrics_token("10.0.0.5", {"CRONSTREAM_METRICS_TOKEN_FILE": str(tmp_path / "none")})
    assert metrics_token("127.0.0.1", {}) is None
    assert metrics_token("::1", {}) is None


def test_exposed_metrics_answer_the_token_alone_and_the_probes_anyone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    monkeypatch.setenv("CRONSTREAM_METRICS_TOKEN_FILE", str(token))
    monkeypatch.setenv("CRONSTREAM_METRICS_HOST", "0.0.0.0")
    server = serve(_free_port())
    assert server is not None
    assert server.server_address[0] == "0.0.0.0"
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        anonymous = httpx.get(f"{base}/metrics")
        assert anonymous.status_code == 401
        assert "cronstream_" not in anonymous.text
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
        wrong = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer s3cret"})
        assert wrong.status_code == 401
        basic = httpx.get(f"{base}/metrics", auth=("operator", "s3cret-token"))
        assert basic.status_code == 401
        good = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer s3cret-token"})
        assert good.status_code == 200
        assert "cronstream_member_ready" in good.text
        assert httpx.get(f"{base}/healthz").status_code == 200  # the kubelet's probes
        assert httpx.get(f"{base}/readyz").status_code in (200, 503)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.9", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("metrics.example", False),
    ],
)
def test_only_loopback_addresses_count_as_private(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_authorized_wants_the_bearer_scheme_and_the_exact_token() -> None:
    assert authorized(None, None)
    assert authorized("Bearer abc", b"abc")
    assert authorized("bearer abc", b"abc")
    assert not authorized(None, b"abc")
    assert not authorized("Bearer abcd", b"abc")
    assert not authorized("Basic abc", b"abc")
    assert not authorized("abc", b"abc")
