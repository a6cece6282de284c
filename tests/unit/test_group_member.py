"""The one rule for a refused commit (``runtime.kafka.member``): re-delivery, not loss;
and how a group divides its partitions (``balance``, ``runtime.kafka.groups``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cronstream.runtime.kafka import clients, groups
from cronstream.runtime.kafka.clients import Balance
from cronstream.runtime.kafka.member import commit
from cronstream.runtime.settings import Settings

log = logging.getLogger("test")
OFFSETS = [TopicPartition("t", 0, 5)]


class Refusing:
    def __init__(self, error: KafkaError) -> None:
        self.error = error
        self.calls: list[bool] = []

    def commit(self, *, offsets: Any, asynchronous: bool) -> None:
        self.calls.append(asynchronous)
        raise KafkaException(self.error)


@pytest.mark.parametrize("wait", [True, False])
def test_a_refused_commit_is_logged_and_the_role_goes_on(
    wait: bool, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Refusing(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    assert commit(consumer, OFFSETS, wait=wait, log=log, then="read again") is False
    assert consumer.calls == [not wait]
    assert "commit refused" in caplog.text
    assert "read again" in caplog.text


def test_a_fatal_commit_error_raises() -> None:
    consumer = Refusing(KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True))
    with pytest.raises(KafkaException):
        commit(consumer, OFFSETS, wait=True, log=log)


def test_nothing_to_commit_asks_nothing() -> None:
    consumer = Refusing(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    assert commit(consumer, [], wait=True, log=log) is True
    assert consumer.calls == []


# -- how a group divides its partitions --------------------------------------------------
PLAIN = Settings.from_env({"CRONSTREAM_KAFKA_SECURITY": "plaintext"})


def _config(monkeypatch: pytest.MonkeyPatch, balance: Balance) -> dict[str, Any]:
    built: dict[str, Any] = {}
    monkeypatch.setattr(clients, "Consumer", built.update)
    clients.group_consumer(PLAIN, group="g", name="w", session_timeout_ms=10_000, balance=balance)
    return built


def test_per_topic_balance_is_the_brokers_range_assignor_and_leaves_timeouts_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka refuses the classic settings under group.protocol=consumer."""
    config = _config(monkeypatch, "per-topic")
    assert config["group.protocol"] == "consumer"
    assert config["group.remote.assignor"] == "range"
    classic = {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"}
    assert not classic & set(config)


def test_count_balance_is_cooperative_sticky_with_the_members_own_timeouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(monkeypatch, "count")
    assert "group.protocol" not in config
    assert config["partition.assignment.strategy"] == "cooperative-sticky"
    assert (config["session.timeout.ms"], config["heartbeat.interval.ms"]) == (10_000, 2_000)


class Future:
    def __init__(self, error: KafkaError | None = None, value: Any = None) -> None:
        self.error, self.value = error, value

    def result(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise KafkaException(self.error)
        return self.value


class Admin:
    def __init__(self, error: KafkaError | None) -> None:
        self.error = error
        self.altered: list[Any] = []

    def incremental_alter_configs(self, resources: list[Any]) -> dict[Any, Future]:
        self.altered += resources
        return {r: Future(self.error) for r in resources}

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future]:
        entry = type("Entry", (), {"value": "45000"})()
        return {r: Future(value={groups.SESSION: entry}) for r in resources}


def test_the_group_session_timeout_is_set_on_the_broker_with_a_tenth_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = Admin(None)
    monkeypatch.setattr(groups, "kafka_admin", lambda settings: admin)
    assert groups.set_group_timeouts(PLAIN, "p.workers", 10_000, log=log) is True
    (resource,) = admin.altered
    assert resource.name == "p.workers"
    assert {e.name: e.value for e in resource.incremental_configs} == {
        "consumer.session.timeout.ms": "10000",
        "consumer.heartbeat.interval.ms": "1000",
    }


def test_a_refused_group_timeout_says_which_one_is_in_force(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    admin = Admin(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    monkeypatch.setattr(groups, "kafka_admin", lambda settings: admin)
    assert groups.set_group_timeouts(PLAIN, "p.workers", 10_000, log=log) is False
    assert "could not set its session timeout to 10000 ms" in caplog.text
    assert "move after 45000 ms, the group's" in caplog.text
