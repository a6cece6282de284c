"""A producer that answers someone (``Publisher(answering=True)``: the CLI, the API, the
dashboard) has each record acknowledged or failed within its delivery timeout, and its
flush waits for that verdict: a record it reports failed is failed in librdkafka too
(not kept and written after its caller was told). Against a broker address
nothing listens on: no service needed, librdkafka real."""

from __future__ import annotations

import time

import pytest

from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.publisher import (
    ANSWER_WITHIN_S,
    FLUSH_WAIT_S,
    REPORT_MARGIN_S,
    Publisher,
)
from cronstream.runtime.settings import Settings
from cronstream.schemas.registry import RegistryClient
from cronstream.schemas.serde import Codec

pytestmark = pytest.mark.integration

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "plaintext", "log_level": 0}


def _publisher(**overrides: object) -> Publisher:
    codec = Codec(RegistryClient("http://127.0.0.1:9"))  # never asked: raw bytes only
    return Publisher(Settings.from_env({}), codec=codec, **NOWHERE, **overrides)  # type: ignore[arg-type]


def test_an_answering_producer_fails_each_record_at_its_delivery_timeout_and_says_so() -> None:
    default = _publisher(answering=True)
    assert default._overrides["message.timeout.ms"] == ANSWER_WITHIN_S * 1000
    assert default.flush_wait_s == ANSWER_WITHIN_S + REPORT_MARGIN_S
    publisher = _publisher(answering=True, **{"message.timeout.ms": 1500})
    assert publisher.flush_wait_s == 1.5 + REPORT_MARGIN_S
    publisher.produce_raw("cstest.nowhere", b"k", b"v", [])
    began = time.monotonic()
    with pytest.raises(PublishError, match="timed out"):
        publisher.flush()
    assert time.monotonic() - began < ANSWER_WITHIN_S  # the verdict, not the wait's end
    # Nothing kept to be written later. librdkafka's queue length also counts its own
    # events (a refused connection's error, every second or so, more often under load:
    # ``len()`` read 1 here once); a flush serves them, so only a kept record holds it.
    assert publisher.producer.flush(5) == 0


def test_a_roles_producer_keeps_its_record_past_the_flush() -> None:
    """The default: librdkafka keeps the record for the owner's delivery timeout; the
    flush says it is still unacknowledged (a role goes on and settles it later)."""
    publisher = _publisher(**{"message.timeout.ms": 60_000})
    assert publisher.flush_wait_s == FLUSH_WAIT_S
    publisher.produce_raw("cstest.nowhere", b"k", b"v", [])
    with pytest.raises(PublishError, match="still unacknowledged"):
        publisher.flush(1.0)
    assert len(publisher.producer) >= 1  # the record (and maybe an error event)
    publisher.producer.purge()


def test_answering_makes_its_own_producer_with_a_bounded_delivery_timeout() -> None:
    for unbounded in (0, 120_000):  # 0: librdkafka's "no limit"
        with pytest.raises(ValueError, match="delivery timeout is 1-30000 ms"):
            _publisher(answering=True, **{"message.timeout.ms": unbounded})
    with pytest.raises(ValueError, match="make it here"):
        _publisher(answering=True, **{"delivery.timeout.ms": 1000})
    with pytest.raises(ValueError, match="make it here"):
        _publisher(answering=True, producer=_publisher().producer)
