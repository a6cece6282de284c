"""Run the CLI and kcat the way a user would, inside a test's namespace."""

from __future__ import annotations

import shutil
import subprocess
import sys

from confluent_kafka import TopicPartition

from cronstream.connect import kafka_consumer
from cronstream.settings import Settings
from producers.client import watermarks
from tests.conftest import cli_env


def cronstream(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstream.cli", *args],
        env={**cli_env(settings), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def kcat(settings: Settings, topic: str, fmt: str) -> list[str]:
    """Every record of ``topic`` from the beginning, formatted by kcat (-Z: NULL shown)."""
    exe = shutil.which("kcat")
    assert exe, "kcat is not installed: 'make deps' installs it (Debian package kcat)"
    out = subprocess.run(
        [exe, "-C", "-b", settings.bootstrap_servers, "-t", topic, "-o", "beginning",
         "-e", "-q", "-Z", "-f", fmt],
        capture_output=True, text=True, errors="replace", timeout=60, check=True,
    )  # fmt: skip
    return [line for line in out.stdout.split("\n") if line]


def record_count(settings: Settings, topic: str) -> int:
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        total = 0
        for p in meta.partitions:
            low, high = watermarks(consumer, TopicPartition(topic, p))
            total += high - low
        return total
    finally:
        consumer.close()
