"""Fixtures of the integration tests that need tenants."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.producers.admission.core import Quotas
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.settings import Settings
from tests.integration.tenants import AdmissionThread, Api


@pytest.fixture
def two(ns: Settings) -> Iterator[tuple[str, str]]:
    """Two fresh tenants of ``ns`` (removed afterwards)."""
    names = (f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}")
    for name in names:
        add_tenant(ns, name)
    yield names
    for name in names:
        remove_tenant(ns, name)


@pytest.fixture
def admission(ns: Settings, two: tuple[str, str]) -> Iterator[AdmissionThread]:
    running = AdmissionThread(ns, Quotas(max_jobs=3, triggers_per_minute=2))
    yield running
    running.stop()


@pytest.fixture
def api(history_ns: Settings, admission: AdmissionThread) -> Iterator[Api]:
    running = Api(history_ns)
    yield running
    running.stop()


@pytest.fixture
def session(history_ns: Settings) -> Iterator[Any]:
    cluster, sess = cassandra_session(history_ns, keyspace=history_ns.keyspace)
    yield sess
    cluster.shutdown()
