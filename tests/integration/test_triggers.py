"""The trigger processor on the real stack: records of a source topic run
jobs, each matching record once across a kill -9 of the processor, debounce gives one
run per window, and a tenant cannot trigger from another tenant's topic.

Processors run as `cronstream triggers` subprocesses (their own Kafka user); source
topics live outside the test's prefix (cronstream's own topics are refused), created
and written by the super user, readable by the trigger processor's user through the
ACLs an operator grants (``infra.tenants.trigger_source_acls``)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from cronstream.infra.kafka_access import admin_acls, delete_acls
from cronstream.infra.tenants import trigger_source_acls
from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.offsets import group_lag, watermarks
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import DeadLetter, Priority, RunOutcome, RunRequest
from cronstream.schemas.ids import event_run_id
from tests.integration.helpers import (
    CronstreamProcess,
    Target,
    decoded,
    read_topic,
)
from tests.orders import order, order_writer

pytestmark = pytest.mark.integration


@pytest.fixture
def sources(ns: Settings) -> Iterator[list[str]]:
    """Source topics the test creates (``create``), deleted with their ACLs afterwards."""
    made: list[str] = []
    yield made
    admin = kafka_admin(ns, superuser=True)
    if made:
        for future in admin.delete_topics(made, operation_timeout=30).values():
            future.result()
        delete_acls(admin, [b for t in made for b in trigger_source_acls(t)])


def create(
    ns: Settings, made: list[str], topic: str, partitions: int, *, grant: bool = True
) -> str:
    admin = kafka_admin(ns, superuser=True)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    ).values():
        future.result(30)
    made.append(topic)
    if grant:
        admin_acls(admin, trigger_source_acls(topic), 30)
    return topic


class Source:
    """Writes a source topic as the super user, noting where each record landed."""

    def __init__(self, ns: Settings, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({**admin_security(ns), "partitioner": "murmur2_random"})
        self.landed: dict[int, tuple[int, int]] = {}  # sequence number -> (partition, offset)

    def send(
        self, n: int, value: bytes, *, key: str | None = None, timestamp_ms: int | None = None
    ) -> None:
        def done(err: Any, msg: Any) -> None:
            assert err is None, err
            self.landed[n] = (msg.partition(), msg.offset())

        # timestamp 0: the producer's clock
        self.producer.produce(
            self.topic, value=value, key=key, on_delivery=done, timestamp=timestamp_ms or 0
        )
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def put(ns: Settings, *specs: dict[str, Any]) -> None:
    with JobClient(ns) as client:
        client.put_many(job_from_spec(spec, max_payload_bytes=65536) for spec in specs)


def processor(
    ns: Settings, tmp: Path, procs: list[CronstreamProcess], name: str, *args: str
) -> CronstreamProcess:
    proc = CronstreamProcess(ns, tmp, name, "--session-timeout", "6s", *args, command="triggers")
    procs.append(proc)
    return proc


def runs(ns: Settings) -> list[tuple[dict[str, str], bytes | None]]:
    return [(r.headers, r.value) for r in read_topic(ns, Topics(ns).runs(Priority.NORMAL))]


def caught_up(ns: Settings, topic: str) -> bool:
    """The trigger group has committed every record of ``topic`` written so far (read
    as the super user: the operators' user may not read the source topics)."""
    consumer = Consumer(
        {
            **admin_security(ns),
            "group.id": f"{ns.topic_prefix}.triggers",
            "enable.auto.commit": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        assert meta.partitions, meta.error
        ends = [
            TopicPartition(topic, p, watermarks(consumer, TopicPartition(topic, p))[1])
            for p in meta.partitions
        ]
        return group_lag(consumer, ends) == 0
    finally:
        consumer.close()


def wait_until(check: Any, timeout: float, what: str, log: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{log()}"
        time.sleep(0.5)


def test_1000_records_100_matching_run_exactly_100_runs_once_across_a_kill9(  # long: one story
    ns: Settings,
    tmp_path: Path,
    target: Target,
    sources: list[str],
    procs: list[CronstreamProcess],
) -> None:
    topic = create(ns, sources, f"cstest-src.{uuid.uuid4().hex[:8]}.orders", 3)
    encode = order_writer(ns, topic)
    put(
        ns,
        {
            "id": "big-orders",
            "target": "http",
            "url": f"{target.url}/hook",
            "on": {"topic": topic, "filter": "value.amount >= 900"},
        },
    )
    # 4 at once: the target's listen backlog is 5 (more reset connections: runs FAILED,
    # whose retries need a scheduler this test does not run)
    worker = CronstreamProcess(
        ns, tmp_path, "w", "--http-allow", "127.0.0.0/8", "--concurrency", "4", command="worker"
    )
    procs.append(worker)
    first = processor(ns, tmp_path, procs, "t1", "--commit-interval", "300ms")
    first.wait_live(1, text="assigned")
    source = Source(ns, topic)

    def write() -> None:
        for n in range(1000):
            amount = 900 + n if n % 10 == 0 else n % 10  # every tenth matches
            source.send(
                n,
                encode(order(n, amount)),
                key=f"k{n % 13}",
            )
            time.sleep(0.004)
        source.flush()

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(2.0)  # about half the records written, and some read
    first.kill9()
    second = processor(ns, tmp_path, procs, "t2")
    writer.join()
    wait_until(
        lambda: caught_up(ns, topic), 90, "the trigger group to commit every record", second.log
    )
    second.stop()

    expected = {event_run_id("big-orders", topic, *source.landed[n]): n for n in range(0, 1000, 10)}
    copies: dict[str, list[tuple[dict[str, str], bytes | None]]] = defaultdict(list)
    for headers, value in runs(ns):
        copies[headers["run_id"]].append((headers, value))
    assert set(copies) == set(expected), "the run ids are not exactly the matching records'"
    payloads = _payloads(ns)
    again = {run_id: c for run_id, c in copies.items() if len(c) > 1}
    for run_id, written in again.items():  # written again after the kill: flagged, the same
        assert all(h.get("possible_duplicate") == "true" for h, _ in written[1:]), run_id
        assert len(set(payloads[run_id])) == 1, f"{run_id}: two payloads"
    # Each ran once: one success per run id, and the target called once per run id.
    wait_until(
        lambda: len(_succeeded(ns)) >= 100, 90, "100 runs to succeed", lambda: _unsucceeded(ns)
    )
    succeeded = _succeeded(ns)
    assert Counter(succeeded) == Counter(set(expected)), "a run did not succeed exactly once"
    assert target.keys("/hook") == Counter(set(expected)), "the target was not called once each"
    for run_id, n in expected.items():  # the record, its Avro value decoded
        payload = json.loads(payloads[run_id][0])
        assert (payload["topic"], payload["key"]) == (topic, f"k{n % 13}")
        assert payload["value"] == order(n, 900 + n)
    print(
        f"\nkill -9: 1000 records, {len(expected)} runs, each once; {len(again)} run "
        "requests written again after the kill (flagged possible_duplicate)"
    )


def _succeeded(ns: Settings) -> list[str]:
    return [
        o.run_id
        for o in decoded(ns, Topics(ns).history, RunOutcome)
        if o.status.value == "SUCCEEDED"
    ]


def _unsucceeded(ns: Settings) -> str:
    """The outcomes that are no success, with their errors (what a failure shows)."""
    return "\n".join(
        f"{o.status.value} {o.run_id} {o.error}"
        for o in decoded(ns, Topics(ns).history, RunOutcome)
        if o.status.value != "SUCCEEDED"
    )


def _payloads(ns: Settings) -> dict[str, list[str]]:
    """Each run id's payloads, as its run requests carry them."""
    found: dict[str, list[str]] = defaultdict(list)
    for request in decoded(ns, Topics(ns).runs(Priority.NORMAL), RunRequest):
        found[request.run_id].append(request.payload or "")
    return found


def test_debounce_gives_one_run_per_window_per_key(
    ns: Settings, tmp_path: Path, sources: list[str], procs: list[CronstreamProcess]
) -> None:
    topic = create(ns, sources, f"cstest-src.{uuid.uuid4().hex[:8]}.clicks", 1)
    url = "https://example.com/hook"
    put(
        ns,
        {"id": "quiet", "target": "http", "url": url, "on": {"topic": topic, "debounce": "2s"}},
        {
            "id": "per-user",
            "target": "http",
            "url": url,
            "on": {"topic": topic, "debounce": "2s", "key": "value.user"},
        },
    )
    proc = processor(ns, tmp_path, procs, "t")
    proc.wait_live(1, text="assigned")
    source = Source(ns, topic)
    t0 = int(time.time() * 1000) + 60_000  # event time: the records' own stamps
    # (seconds after t0, user): windows of 2 s from the first record of each
    stamps = [(0.0, "a"), (0.5, "b"), (1.0, "a"), (2.5, "a"), (3.0, "b"), (5.0, "b")]
    for n, (second, user) in enumerate(stamps):
        source.send(n, json.dumps({"user": user}).encode(), timestamp_ms=t0 + int(second * 1000))
    source.flush()
    wait_until(lambda: caught_up(ns, topic), 60, "the trigger group to commit", proc.log)
    proc.stop()
    got: dict[str, set[int]] = defaultdict(set)
    for headers, _ in runs(ns):
        job, _, where = headers["run_id"].partition("@evt:")
        got[job].add(int(where.rpartition(":")[2]))
    # every record: 0 (window to 2.0), 3 (2.5, to 4.5), 5 (5.0)
    assert got["quiet"] == {0, 3, 5}
    # per user: a at 0 (to 2.0), b at 0.5 (to 2.5), a at 2.5 (to 4.5), b at 3.0 (to 5.0),
    # and b at 5.0: the window ends at 5.0, so the record opens the next one
    assert got["per-user"] == {0, 1, 3, 4, 5}


def test_a_trigger_added_to_a_topic_being_read_starts_at_its_definition(
    ns: Settings, tmp_path: Path, sources: list[str], procs: list[CronstreamProcess]
) -> None:
    """The partition is read back to where the new trigger starts (its definition's
    time: records stamped later, though read already); the trigger that read them
    first does not run them again."""
    topic = create(ns, sources, f"cstest-src.{uuid.uuid4().hex[:8]}.files", 1)
    url = "https://example.com/hook"
    put(ns, {"id": "first", "target": "http", "url": url, "on": topic})
    proc = processor(ns, tmp_path, procs, "t")
    proc.wait_live(1, text="assigned")
    source = Source(ns, topic)
    later = int(time.time() * 1000) + 60_000
    for n in range(5):  # 0 and 1 stamped now, 2 to 4 a minute ahead
        source.send(n, b"{}", timestamp_ms=later if n >= 2 else None)
    source.flush()
    wait_until(lambda: caught_up(ns, topic), 60, "the trigger group to commit", proc.log)
    time.sleep(0.2)
    put(ns, {"id": "second", "target": "http", "url": url, "on": topic})
    wait_until(
        lambda: sum(h["job_id"] == "second" for h, _ in runs(ns)) >= 3,
        60,
        "the second trigger's runs",
        proc.log,
    )
    proc.stop()
    got = Counter(h["run_id"] for h, _ in runs(ns))
    assert got == Counter(
        {
            event_run_id(job, topic, 0, o): 1
            for job, offsets in (("first", range(5)), ("second", range(2, 5)))
            for o in offsets
        }
    )


def test_a_tenants_job_cannot_trigger_from_another_tenants_topic_and_keeps_its_rate(
    ns: Settings,
    tmp_path: Path,
    two: tuple[str, str],
    sources: list[str],
    procs: list[CronstreamProcess],
) -> None:
    a, b = two
    mine = create(ns, sources, f"{a}.orders", 1, grant=False)  # tenants add granted a.
    theirs = create(ns, sources, f"{b}.orders", 1, grant=False)
    url = "https://example.com/hook"
    with JobClient(ns) as client:  # straight to the jobs topic, past the admission
        for job_id, topic in ((f"{a}/own", mine), (f"{a}/steal", theirs)):
            spec = {"id": job_id, "target": "http", "url": url, "on": topic}
            client.put(replace(job_from_spec(spec, max_payload_bytes=65536), tenant=a))
    # 2 runs a second (a burst of 2): 6 records' runs take 2 s at least
    proc = processor(ns, tmp_path, procs, "t", "--triggers-per-second", "2")
    proc.wait_live(1, text="assigned")
    for topic in (mine, theirs):
        source = Source(ns, topic)
        for n in range(6):
            source.send(n, b'{"n": 1}')
        source.flush()
    wait_until(lambda: caught_up(ns, mine), 60, "the trigger group to commit", proc.log)
    time.sleep(2)
    proc.stop()
    written = read_topic(ns, Topics(ns).runs(Priority.NORMAL))
    assert Counter(r.headers["job_id"] for r in written) == {f"{a}/own": 6}
    stamps = sorted(r.timestamp_ms for r in written)
    assert stamps[-1] - stamps[0] >= 1800, f"over the tenant's rate: {stamps}"
    letters = [d for d in decoded(ns, Topics(ns).dlq, DeadLetter) if d.stage == "triggers"]
    assert [d.job_id for d in letters] == [f"{a}/steal"]
    assert "trigger policy" in letters[0].reason
    assert theirs in letters[0].reason
    assert letters[0].source_topic == Topics(ns).jobs
