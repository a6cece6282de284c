"""The one rule for a refused commit (``runtime.kafka.member``): re-delivery, not loss."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from runtime.kafka.member import commit

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
