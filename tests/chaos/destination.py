"""The cluster chaos row ``destination-leaderless``, this code beside a
baseline revision in the same run:

    python -m tests.chaos.destination [--baseline REV] [--jobs 40] [--rounds 1]

On the 3-node cluster stack (``tests.chaos.stack``, ``make up NODES=3`` ports; started
when it is down): a tenant's topic of 3 partitions at replication factor 1 (as a
tenant's own topic may well be), one partition on each broker; ``--jobs`` kafka-target
jobs every second writing to it, as the tenant; one scheduler, one worker. After 30 s
the broker leading one of the three partitions is killed (kill -9) and left down for
90 s, then started again.

Measured per round from the topics: the runs requested (the runs topic), their outcomes
(history) and their effects (the destination's two healthy partitions, read as the
super user). A run goes to the partition Kafka's partitioner gives its run id
(``schemas.ids.partition_for``). Printed: runs to the healthy partitions due after the
kill and how many have no effect; their due-to-start p50 / p99 before and after the
kill; how the runs to the partition without a leader ended (status counts, and how many
had not ended 40 s after their due time, the timeout being 30 s); runs with no outcome
at all 40 s after their due time (not lost for good: unsettled, the next worker reads
them again; but not run); runs with more than one record on the healthy partitions
(repeated effects, flagged or not).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.settings import Settings, node_name
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import JobDefinition, Priority, RunOutcome, RunStatus, Target
from cronstream.schemas.ids import partition_for
from cronstream.schemas.tenancy import qualify
from tests.bench.common import checkout, header_due_ms, job, namespace, pct, put_jobs
from tests.bench.target_rows import tenant_topic
from tests.bench.workers import Pipeline
from tests.chaos import stack
from tests.chaos.cluster import wait_replicated
from tests.integration.helpers import decoded, read_topic

BEFORE_S, DOWN_S, TIMEOUT_S = 30.0, 90.0, 30
FAILOVER_S = 20.0  # after the kill: the cluster's own partitions get new leaders


@dataclass
class Round:
    code: str
    healthy_after: int = 0  # runs to the healthy partitions due after the kill
    without_effect: int = 0  # of those, no record in the destination
    skew_before: list[float] = field(default_factory=list)  # due-to-start ms, healthy
    skew_failover: list[float] = field(default_factory=list)  # the first FAILOVER_S
    skew_after: list[float] = field(default_factory=list)  # after it
    stalled_ends: Counter[str] = field(default_factory=Counter)  # the leaderless partition's
    stalled_unended: int = 0  # no final outcome 40 s after due
    lost: int = 0  # requested, no outcome at all by the end (unsettled, read again later)
    repeated: int = 0  # runs to the healthy partitions with more than one record there
    stop: str = ""  # how the processes ended at SIGTERM, when not with 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.destination")
    parser.add_argument("--baseline", default="a03f037", help="the revision beside this code")
    parser.add_argument("--jobs", type=int, default=40, help="kafka jobs every second")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--control",
        action="store_true",
        help="also a round of this code with the destination at replication factor 3: the "
        "same kill leaves no partition without a leader (what the cluster's own failover costs)",
    )
    args = parser.parse_args()
    settings = stack.enter_chaos_environment(cluster=True)
    stack.up(settings)
    wait_replicated(settings)
    rounds: list[Round] = []
    with checkout(args.baseline) as baseline:
        arms: list[tuple[str, Path | None]] = [("this code", None)]
        if baseline is not None:
            arms.append((args.baseline, baseline))
        for _ in range(args.rounds):
            for name, code in arms:
                rounds.append(leaderless(settings, name, code, args.jobs))
                report(rounds[-1:])
        if args.control:
            rounds.append(leaderless(settings, "this code, RF 3 (control)", None, args.jobs, 3))
            report(rounds[-1:])
    print(
        f"\ndestination-leaderless: {args.jobs} kafka jobs a second, one RF 1 partition's "
        f"broker killed for {DOWN_S:.0f} s; rounds: {args.rounds}"
    )
    report(rounds)
    return 0


def leaderless(
    base: Settings, name: str, code: Path | None, jobs: int, replication: int = 1
) -> Round:
    """One round: the load, the kill, the measure (``Round``)."""
    with (
        namespace(base, "cschaos") as settings,
        _tenant_topic(settings, replication) as (tenant, topic, leaders),
    ):
        victim = next(p for p, broker in sorted(leaders.items()) if broker != 1)
        target = Target(type="kafka", topic=topic)

        def make(i: int) -> JobDefinition:
            definition = job(qualify(tenant, f"d-{i}"), every_ms=1000, jitter_ms=999, target=target)
            return replace(definition, tenant=tenant, timeout_ms=TIMEOUT_S * 1000)

        _put(settings, jobs, make)
        pipeline = Pipeline(settings, 1, 32, code=code)
        broker = stack.service(base, node_name("kafka", leaders[victim]))
        try:
            pipeline.wait_live()
            time.sleep(10)
            t0 = time.time()
            time.sleep(BEFORE_S)
            print(f"[{name}] kill -9 {broker.name} (partition {victim} of {topic})", flush=True)
            killed = time.time()
            stack.kill9(broker)
            time.sleep(DOWN_S)
            t1 = time.time()
        finally:
            stopped = _stop(pipeline)
            if not broker.running():
                stack.start(broker, timeout=300)
                wait_replicated(base)
        result = _measure(settings, name, topic, victim, (t0, killed, t1))
        result.stop = stopped
        return result


def _put(settings: Settings, jobs: int, make: Callable[[int], JobDefinition]) -> None:
    """``put_jobs``, again while a broker that just came back has not applied the new
    namespace's ACLs yet (TOPIC_AUTHORIZATION_FAILED on its partitions for a moment)."""
    for attempt in range(5):
        try:
            put_jobs(settings, jobs, make)
            return
        except PublishError as exc:
            if "authorization" not in str(exc).lower() or attempt == 4:
                raise
            time.sleep(5)


def _stop(pipeline: Pipeline) -> str:
    """SIGTERM the worker, then the scheduler: how each ended ("" when both exited 0)."""
    ended = []
    for process in [*pipeline.workers, *pipeline.schedulers]:
        try:
            process.stop()
        except AssertionError as exc:  # a non-zero exit: reported in the row
            ended.append(str(exc).splitlines()[0])
    return "; ".join(ended)


def _measure(
    settings: Settings, name: str, topic: str, victim: int, times: tuple[float, float, float]
) -> Round:
    t0, killed, t1 = (t * 1000 for t in times)
    requested = {
        r.headers["run_id"]: header_due_ms(r.headers)
        for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
    }
    outcomes = decoded(settings, Topics(settings).history, RunOutcome)
    effects = _effects(settings, topic, skip=victim)
    result = Round(name)
    final: dict[str, RunOutcome] = {}
    started: dict[str, float] = {}
    for o in outcomes:
        if o.started_at is not None:
            started.setdefault(o.run_id, o.started_at.timestamp() * 1000)
        if o.status is not RunStatus.STARTED:
            final[o.run_id] = o
    seen = {o.run_id for o in outcomes}
    for run_id, due in requested.items():
        if not t0 <= due < t1 - (TIMEOUT_S + 10) * 1000:
            continue
        result.lost += run_id not in seen
        if partition_for(run_id, 3) == victim:
            if due >= killed:
                ended = final.get(run_id)
                result.stalled_ends[ended.status.value if ended else "not ended"] += 1
        else:
            skews = (
                result.skew_before
                if due < killed
                else result.skew_failover
                if due < killed + FAILOVER_S * 1000
                else result.skew_after
            )
            if run_id in started:
                skews.append(started[run_id] - due)
            result.repeated += effects[run_id] > 1
            if due >= killed:
                result.healthy_after += 1
                result.without_effect += run_id not in effects
    return result


def _effects(settings: Settings, topic: str, skip: int) -> Counter[str]:
    """The run ids (keys) of the records on ``topic``'s partitions but ``skip``."""
    consumer = Consumer(
        {
            **admin_security(settings),
            "group.id": f"chaos-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    keys: Counter[str] = Counter()
    try:
        for partition in (p for p in range(3) if p != skip):
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            consumer.assign([TopicPartition(topic, partition, low)])
            position, deadline = low, time.monotonic() + 120
            while position < high:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic} [{partition}]: read {position} of {high}")
                for msg in consumer.consume(1000, timeout=5):
                    if msg.error() is None:
                        keys[(msg.key() or b"").decode()] += 1
                        position = (msg.offset() or 0) + 1
    finally:
        consumer.close()
    return keys


def _leaders(settings: Settings, topic: str) -> dict[int, int]:
    admin = kafka_admin(settings, superuser=True)
    metadata = admin.list_topics(topic, timeout=30).topics[topic]
    return {p: m.leader for p, m in metadata.partitions.items()}


@contextmanager
def _tenant_topic(
    settings: Settings, replication: int = 1
) -> Iterator[tuple[str, str, dict[int, int]]]:
    """``tenant_topic`` once the cluster has its 3 brokers, with each partition's broker
    (its 3 partitions on at least two of them)."""
    admin = kafka_admin(settings, superuser=True)
    deadline = time.monotonic() + 120
    while len(admin.list_topics(timeout=30).brokers) < 3:  # a broker just started: registered
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster does not have 3 brokers")
        time.sleep(1)
    with tenant_topic(settings, prefix="chaos", replication=replication) as (tenant, topic):
        leaders = _leaders(settings, topic)
        while min(leaders.values()) < 0 and time.monotonic() < deadline:  # being elected
            time.sleep(0.5)
            leaders = _leaders(settings, topic)
        placed = set(leaders.values())
        print(f"{topic}: partition -> leader {leaders}", flush=True)
        if len(placed) < 2 or min(placed) < 0:
            raise RuntimeError(f"{topic}'s 3 partitions all went to broker {placed}: run again")
        yield tenant, topic, leaders


def report(rounds: list[Round]) -> None:
    head = (
        "code",
        "healthy runs after",
        "without effect",
        "due-to-start p50/p99 before ms",
        f"first {FAILOVER_S:.0f} s after the kill ms",
        "after that ms",
        "leaderless partition's runs ended",
        "no outcome at all",
        "repeated effects",
        "stop",
    )
    print("  |  ".join(head))
    for r in rounds:
        before, after = _quantiles(r.skew_before), _quantiles(r.skew_after)
        failover = _quantiles(r.skew_failover)
        ends = ", ".join(f"{k} {v}" for k, v in r.stalled_ends.most_common())
        print(
            "  |  ".join(
                [
                    r.code,
                    f"{r.healthy_after:,}",
                    f"{r.without_effect:,}",
                    before,
                    failover,
                    after,
                    ends,
                    str(r.lost),
                    str(r.repeated),
                    r.stop or "exit 0",
                ]
            ),
            flush=True,
        )


def _quantiles(skews: list[float]) -> str:
    """p50 / p99 of ``skews``; "none started" when no run started."""
    if not skews:
        return "none started"
    return f"{pct(skews, 0.5):.0f} / {pct(skews, 0.99):.0f}"


if __name__ == "__main__":
    sys.exit(main())
