"""The scheduler through a broker killed with -9 and started again 20 s later (found by
review and the chaos suite: before, the checkpoint's flush gave up after 30 s and the
processor died, and a recovering owner re-emitted every slot since the last checkpoint
before the outage). Marked ``restarts_stack``: the suite runs it after every other
test."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import Counter

import pytest

from cronstream.infra.services import Kafka
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from cronstream.schemas.ids import slot_run_id
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.processor import Scheduler
from tests.integration.helpers import read_topic
from tests.integration.test_scheduler_outages import drive, every_second

pytestmark = [pytest.mark.integration, pytest.mark.restarts_stack]
JOBS = 40


def kill9_broker(settings: Settings) -> Kafka:
    kafka = Kafka(settings)
    pid = kafka.pid()
    assert pid is not None, "the broker is not running"
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    while kafka.running():
        time.sleep(0.1)
    return kafka


def test_a_broker_restart_neither_kills_the_scheduler_nor_loses_or_floods_slots(
    ns: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cronstream.scheduler")
    publisher = Publisher(ns)
    for i in range(JOBS):
        publisher.publish(Topics(ns).jobs, every_second(f"b{i}"))
    publisher.close()
    # A delivery timeout shorter than the outage: what was queued when the broker went
    # away fails, and the partitions rewind to their checkpoint instead of dying.
    config = SchedulerConfig(
        group=f"{ns.topic_prefix}.scheduler", session_timeout_ms=6000, delivery_timeout_ms=8000
    )
    processor = Scheduler(ns.as_role("scheduler"), config)
    try:
        drive(processor, 10)
        first = (int(time.time()) + 1) * 1000
        drive(processor, 3)
        kafka = kill9_broker(ns)
        drive(processor, 20)  # before: PublishError from the checkpoint's flush
        kafka.start()
        while not kafka.ready():
            drive(processor, 0.5)
        drive(processor, 25)
        last = (int(time.time()) - 3) * 1000
    finally:
        processor.close()
    records = [r.headers for r in read_topic(ns, Topics(ns).runs(Priority.NORMAL))]
    requested = Counter(h["run_id"] for h in records)
    expected = [slot_run_id(f"b{i}", s)[0] for i in range(JOBS) for s in range(first, last, 1000)]
    assert [r for r in expected if r not in requested] == [], "slots without a run request"
    firsts: set[str] = set()
    unflagged = flagged = 0
    for h in records:
        if h["run_id"] in firsts:
            flagged += h.get("possible_duplicate") == "true"
            unflagged += h.get("possible_duplicate") != "true"
        firsts.add(h["run_id"])
    assert unflagged == 0
    # Bounded by what was emitted between the last checkpoint and the pause (about two
    # seconds), not by the outage (before: every slot since the last checkpoint).
    assert flagged <= 4 * JOBS, flagged
    assert "firing paused" in caplog.text
