"""The source records of the event-trigger tests and benchmark: a shop's ``Order`` in
Avro, the ``n``-th order, and a writer of orders in the Confluent wire format (the
schema registered under the topic's value subject)."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro

from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "tests.shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "long"},
        {"name": "currency", "type": "string"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [{"name": "id", "type": "string"}, {"name": "tier", "type": "string"}],
            },
        },
        {"name": "lines", "type": {"type": "array", "items": "string"}},
    ],
}


def order(n: int, amount: int, tier: str = "basic") -> dict[str, Any]:
    """Order ``n``, of ``amount``, by one of 997 customers of ``tier``."""
    return {
        "id": n,
        "amount": amount,
        "currency": "EUR",
        "customer": {"id": f"c-{n % 997}", "tier": tier},
        "lines": ["a", "b"],
    }


def order_writer(settings: Settings, topic: str) -> Callable[[dict[str, Any]], bytes]:
    """A function encoding an order as a record of ``topic`` (``ORDER`` registered)."""
    with registry_client(settings, writer=True) as registry:
        schema_id = registry.register(f"{topic}-value", json.dumps(ORDER))
    parsed, head = fastavro.parse_schema(ORDER), struct.pack(">bI", 0, schema_id)

    def encode(record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(head)
        fastavro.schemaless_writer(buf, parsed, record)
        return buf.getvalue()

    return encode
