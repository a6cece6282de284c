"""cronstream.consumers.executors.egress.TenantProducers without a broker: which password, the
refusal without one, and the bound on producers kept."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.egress import TenantProducers
from cronstream.infra.security import ensure_tls
from cronstream.runtime.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    base = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path / "home")})
    ensure_tls(base)  # a CA in the temporary stack, for the client's TLS settings
    stored = tmp_path / "home" / "data" / "security" / "credentials"
    stored.mkdir(parents=True)
    (stored / "cronstream-app.secret").write_text("the worker's\n")  # client_security reads it
    return replace(base, bootstrap_servers="127.0.0.1:1")


def test_a_tenant_without_a_password_file_is_refused(tmp_path: Path) -> None:
    producers = TenantProducers(_settings(tmp_path), tmp_path)
    with pytest.raises(TargetInvalid, match="no Kafka credentials for tenant 'acme'"):
        producers.producer("acme")


def test_producers_are_kept_per_tenant_up_to_the_limit(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"tenant-{name}.secret").write_text(f"pw-{name}\n")
    producers = TenantProducers(_settings(tmp_path), tmp_path, limit=2)
    first = producers.producer("a")
    assert producers.producer("a") is first
    producers.producer("b")
    producers.producer("c")  # "a" is the least recently used: dropped
    assert list(producers._producers) == ["b", "c"]
    assert producers.producer("a") is not first
    assert producers.refusal("a") is None
    producers.close()
    assert not producers._producers
