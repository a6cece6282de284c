"""Shared fixtures. The real services start once per session (``infra.stack.up`` is
idempotent, so a stack already up from ``make up`` is reused); each integration test gets
its own topic prefix so tests never see each other's records."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.registry import RegistryClient

if TYPE_CHECKING:
    from tests.integration.helpers import CronstreamProcess, Target


LAYER_MARKERS = {"integration": "integration", "acceptance": "acceptance"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration or tests/acceptance carries its layer's marker
    (so `-m` selections are exact), and tests marked ``restarts_stack`` run after all
    others: they stop and start the shared services under everyone else's feet."""
    unmarked = []
    for item in items:
        layer = item.path.parent.name
        wanted = LAYER_MARKERS.get(layer)
        if wanted is not None and item.get_closest_marker(wanted) is None:
            unmarked.append(f"{item.nodeid} (wants @pytest.mark.{wanted})")
    if unmarked:
        raise pytest.UsageError("tests without their layer's marker:\n  " + "\n  ".join(unmarked))
    items.sort(key=lambda item: item.get_closest_marker("restarts_stack") is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed because Kafka refused cronstream's user reports the
    credentials' state with it; one that failed with cronstream processes running
    reports the end of each one's log (tests.diagnostics)."""
    report = yield
    if report.failed and call.excinfo is not None:
        from tests.diagnostics import (
            caused_by_kafka_auth,
            kafka_credentials_report,
            process_log_tails,
        )

        if caused_by_kafka_auth(call.excinfo.value):
            section = kafka_credentials_report(Settings.from_env())
            report.sections.append(("kafka credentials", section))
        started = getattr(item, "funcargs", {}).get("procs")
        if started:
            report.sections.extend(process_log_tails(started))
    return report


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def stack(base_settings: Settings) -> Settings:
    """The running local stack. A service that cannot start fails the tests (never skips).
    Under pytest-xdist every worker asks; a lock file lets one start what is missing while
    the others wait (two would start the same service twice)."""
    from cronstream.infra import stack as stack_mod

    base_settings.home.mkdir(parents=True, exist_ok=True)
    with open(base_settings.home / "tests-up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stack_mod.up(base_settings, say=lambda _msg: None)
        # Kafka Connect (after the bootstrap, which `make test`'s `make up` ran)
        stack_mod.up(base_settings, say=lambda _msg: None, bootstrapped=True)
    return base_settings


@pytest.fixture
def ns(stack: Settings) -> Iterator[Settings]:
    """Settings under a fresh topic prefix, with the catalog's topics and subjects created."""
    from cronstream.infra.bootstrap import ensure_subjects, ensure_topics
    from cronstream.infra.kafka_access import delete_acls, namespace_acls
    from cronstream.runtime.kafka.clients import kafka_admin
    from cronstream.schemas.catalog import Topics

    settings = stack.with_namespace(topic_prefix=f"cstest.{uuid.uuid4().hex[:10]}")
    ensure_topics(settings)
    ensure_subjects(settings)
    yield settings
    names = Topics(settings).names()
    admin = kafka_admin(settings, superuser=True)  # must outlive its futures
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result()
    if settings.kafka_security != "plaintext":  # ~60 ACLs a namespace: keep the broker's few
        delete_acls(admin, namespace_acls(settings))


def cli_env(settings: Settings) -> dict[str, str]:
    """The environment a `cronstream` subprocess needs to act inside ``settings``' namespace."""
    return {
        **os.environ,
        "CRONSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "CRONSTREAM_KEYSPACE": settings.keyspace,
        "CRONSTREAM_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        # the settings' registry, not one derived again (an older revision run by a
        # benchmark looks for the cluster's test hosts' registry on the loopback)
        "CRONSTREAM_REGISTRY_URL": settings.registry_url,
        "CRONSTREAM_KAFKA_SECURITY": settings.kafka_security,
    }


@pytest.fixture
def registry(stack: Settings) -> Iterator[RegistryClient]:
    with registry_client(stack, writer=True) as client:
        yield client


@pytest.fixture
def history_ns(ns: Settings) -> Iterator[Settings]:
    """``ns`` with its own Cassandra keyspace, migrated (dropped afterwards)."""
    from tests.integration.helpers import history_keyspace

    with history_keyspace(ns) as settings:
        yield settings


@pytest.fixture
def target() -> Iterator[Target]:
    """An HTTP target on 127.0.0.1 recording each call's Idempotency-Key (helpers.Target)."""
    from tests.integration.helpers import Target

    t = Target()
    yield t
    t.server.shutdown()
    t.server.server_close()


@pytest.fixture
def procs() -> Iterator[list[CronstreamProcess]]:
    """Long-running cronstream subprocesses a test starts; killed at teardown."""

    started: list[CronstreamProcess] = []
    yield started
    for proc in started:
        proc.cleanup()
