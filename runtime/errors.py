"""The exceptions of ``runtime``, what every process runs on: settings, the Kafka
clients, the handling of records that make a handler raise."""

from __future__ import annotations


class RepeatedFault(Exception):
    """``runtime.faults.STREAK`` records in a row, from ``SOURCES`` sources or more,
    made one handler raise: a bug of ours that every record reaches, not bad input. The
    process stops."""


class SettingsError(ValueError):
    """An environment variable holds a value that cannot be used."""


class PublishError(RuntimeError):
    """Kafka did not accept a record (after librdkafka's own retries)."""


class KafkaAuthError(RuntimeError):
    """Kafka refused this client's credentials or its TLS handshake: retrying will not
    help."""


class ServiceRefused(RuntimeError):
    """Cassandra answered and refused this process: its login, its TLS handshake, a
    keyspace that does not exist. Configuration: waiting will not mend it
    (``runtime.waiting``)."""
