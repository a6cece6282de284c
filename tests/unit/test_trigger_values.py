"""What the trigger processor's filters see of a source record's value: Avro
in the Confluent wire format as plain values, else UTF-8 JSON, else missing; a writer
schema the registry cannot be asked for is waited for, never taken for missing."""

from __future__ import annotations

import io
import json
import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from cronstream.runtime.stop import StopWaiting
from cronstream.schemas.definition.filters import parse_filter
from cronstream.schemas.definition.matching import MISSING, matches
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.streams.core.triggers import source_record
from cronstream.streams.triggers.values import SourceValues
from tests.fakes import FakeMessage, FakeRegistry

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "customer",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Customer",
                    "fields": [{"name": "id", "type": "string"}],
                },
            ],
        },
    ],
}


def wire(registry: FakeRegistry, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    schema_id = registry.register("orders-value", json.dumps(schema))
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def test_avro_values_decode_to_plain_values_a_union_of_records_to_the_record() -> None:
    registry = FakeRegistry()
    at = datetime(2026, 11, 22, 8, 30, tzinfo=UTC)
    data = wire(registry, ORDER, {"amount": Decimal("120.50"), "at": at, "customer": {"id": "c-7"}})
    value = SourceValues(registry).decode(data)
    assert value == {"amount": Decimal("120.50"), "at": at, "customer": {"id": "c-7"}}
    record = source_record(
        topic="orders", partition=0, offset=3, timestamp_ms=0, key=None, value=value
    )
    assert matches(parse_filter('value.amount > 100 and value.customer.id == "c-7"'), record)


def test_json_and_anything_else() -> None:
    values = SourceValues(FakeRegistry())
    assert values.decode(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert values.decode(b"12") == 12
    assert values.decode(None) is None  # a tombstone: null
    assert values.decode(b"\xff\xfe not text") is MISSING
    assert values.decode(b"not json") is MISSING
    assert values.decode(b"[" * 100_000) is MISSING  # nested past Python's limit


def test_an_unknown_schema_id_or_a_corrupt_body_is_missing_and_asked_once() -> None:
    registry = FakeRegistry()
    asked: list[int] = []
    real = registry.schema_by_id

    def counting(schema_id: int) -> tuple[str, str]:
        asked.append(schema_id)
        return real(schema_id)

    registry.schema_by_id = counting  # type: ignore[method-assign]
    values = SourceValues(registry)
    unknown = struct.pack(">bI", 0, 999) + b"\x02"
    assert values.decode(unknown) is MISSING
    assert values.decode(unknown) is MISSING
    assert asked == [999]  # refused once, remembered
    good = wire(registry, ORDER, {"amount": Decimal("1.00"), "at": 0, "customer": None})
    assert values.decode(good[:6]) is MISSING  # the body cut short


def test_learning_waits_for_the_registry_while_it_is_away() -> None:
    registry = FakeRegistry()
    data = wire(registry, ORDER, {"amount": Decimal("1.00"), "at": 0, "customer": None})
    real, calls = registry.schema_by_id, []

    def flaky(schema_id: int) -> tuple[str, str]:
        calls.append(schema_id)
        if len(calls) < 3:
            raise RegistryUnavailable("away")
        return real(schema_id)

    registry.schema_by_id = flaky  # type: ignore[method-assign]
    values = SourceValues(registry)
    message = FakeMessage(topic_="orders", partition_=0, offset_=0, value_=data)
    assert values.unknown(data) == 1
    values.learn([message], what="test", pause=lambda _s: True)
    assert len(calls) == 3
    assert values.unknown(data) is None
    assert values.decode(data)["customer"] is None  # decoded without asking again
    assert len(calls) == 3
    calls.clear()  # away for good, and a stop comes: StopWaiting
    fresh = SourceValues(registry)
    with pytest.raises(StopWaiting):
        fresh.learn([message], what="test", pause=lambda _s: False)
