"""The load every chaos scenario runs under, on the chaos stack.

One ``Pipeline`` per scenario: a fresh topic prefix and Cassandra keyspace, the HTTP
target process (``tests.chaos.target``), ``jobs`` http jobs firing every second (spread
over the second by jitter) at that target, a manual job triggered ``triggers`` times a
second with fresh idempotency keys, and two schedulers, two workers and a sink as
separate ``cronstream`` processes. A watcher thread samples the workers' and the sink's
lag every second. ``finish`` stops the schedulers cleanly, waits until the workers and
the sink have read everything, and stops the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from cronstream.infra import hosts
from cronstream.infra.bootstrap import ensure_subjects, ensure_topics
from cronstream.infra.hosts import Host
from cronstream.runtime.kafka.clients import kafka_admin, kafka_consumer
from cronstream.runtime.kafka.offsets import committed, group_lag, watermarks
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings, registry_host
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    CronSchedule,
    JobDefinition,
    Priority,
    Target,
    Trigger,
    utc_now,
)
from cronstream.schemas.ids import manual_run_id
from cronstream.streams.scheduler.checkpoint import Checkpoint
from tests.bench.common import job, put_jobs
from tests.integration.helpers import terminate

MANUAL_JOB = "chaos-manual"
SESSION_TIMEOUT_MS = 6000
# How long after the measured window's end the schedulers may take to have fired it all.
FIRED_THROUGH_WAIT_S = 180


PRIORITIES = (Priority.HIGH, Priority.NORMAL, Priority.LOW)


def say(msg: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {msg}", flush=True)


def firing_job_ids(count: int) -> list[str]:
    return [f"chaos-{i}" for i in range(count)]


class Member:
    """One ``cronstream <role>`` process; kill -9, SIGSTOP/SIGCONT and restart keep the
    same name. Its exit codes are kept: a process that dies by itself is a finding."""

    def __init__(
        self,
        settings: Settings,
        logdir: Path,
        name: str,
        role: str,
        *args: str,
        host: Host | None = None,
    ) -> None:
        self.settings, self.logdir, self.name, self.role = settings, logdir, name, role
        self.args = args
        self.host = host  # a host of its own (infra.hosts): a fault can cut its link
        # Its wall clock shifted by this many seconds (``tests.chaos.shifted_clock``).
        self.clock: float | None = None
        self.generation = 0
        self.stopping = False
        self.crashes: list[str] = []
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.generation += 1
        log = (self.logdir / f"{self.name}.{self.generation}.log").open("wb")
        extra = (
            ["--session-timeout-ms", str(SESSION_TIMEOUT_MS)] if self.role == "scheduler" else []
        )
        env = {
            **os.environ,
            "CRONSTREAM_TOPIC_PREFIX": self.settings.topic_prefix,
            "CRONSTREAM_KEYSPACE": self.settings.keyspace,
        }
        on = []
        if self.host is not None:
            hosts.ensure(self.host)
            on = hosts.prefix(self.host)
        cli = ["cronstream.cli"]
        if self.clock is not None:  # its wall clock shifted (tests.chaos.shifted_clock)
            cli = ["tests.chaos.shifted_clock", str(self.clock)]
        command = [sys.executable, "-m", *cli, self.role, "--name", self.name]
        return subprocess.Popen(
            [*on, *command, *extra, *self.args], env=env, stdout=log, stderr=subprocess.STDOUT
        )

    @property
    def log_path(self) -> Path:
        return self.logdir / f"{self.name}.{self.generation}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def check(self) -> None:
        """Record (once) that the process ended without being asked to."""
        code = self.proc.poll()
        if code is not None and not self.stopping and self.crashes[-1:] != [self.log_path.name]:
            self.crashes.append(self.log_path.name)
            print(f"  !! {self.name} exited by itself ({code}); see {self.log_path}", flush=True)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def restart(self) -> None:
        if self.proc.poll() is None:
            self.kill9()
        self.proc = self._spawn()

    def restart_clean(self, clock: float | None = None) -> None:
        """Stopped (SIGTERM: it hands its partitions over) and started again, with its
        wall clock shifted by ``clock`` seconds or on the true one."""
        self.stop()
        self.stopping, self.clock = False, clock
        self.proc = self._spawn()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 90) -> None:
        self.stopping = True
        if not terminate(self.proc, timeout):
            self.crashes.append(f"{self.log_path.name}: ignored SIGTERM")


@dataclass
class Lag:
    """Samples of (epoch s, worker lag on the runs topics, sink lag on history)."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)


class Pipeline:
    def __init__(
        self, base: Settings, logdir: Path, *, jobs: int, every_ms: int, triggers: int
    ) -> None:
        tag = uuid.uuid4().hex[:8]
        self.settings = base.with_namespace(
            topic_prefix=f"cschaos.{tag}", keyspace=f"cschaos_{tag}"
        )
        self.topics = Topics(self.settings)
        self.logdir = logdir
        self.jobs = firing_job_ids(jobs)
        self.every_ms = every_ms
        self.triggers_per_s = triggers
        self.triggered: list[tuple[float, str]] = []  # (acknowledged at, run id)
        self.trigger_failures = 0
        self.lag = Lag()
        self.members: dict[str, Member] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.target_log = logdir / "target.log"
        self.target: subprocess.Popen[bytes] | None = None
        self.url = ""
        # What a scenario's ``prepare`` adds: worker flags, more members (name, role,
        # args), work for ``drop`` and lines for the scenario's row.
        self.worker_args: tuple[str, ...] = ()
        self.extra_members: list[tuple[str, str, tuple[str, ...]]] = []
        self.hosted: dict[str, Host] = {}  # members on hosts of their own, by name
        self.on_drop: list[Callable[[], None]] = []
        self.notes: list[str] = []
        self.after: list[Callable[[], str]] = []  # lines made once everything stopped
        ensure_topics(self.settings)
        ensure_subjects(self.settings)
        _migrate(self.settings)

    # -- setup --------------------------------------------------------------------------
    @property
    def target_address(self) -> str:
        """Where the HTTP target listens: the loopback, or with the cluster's hosts the
        machine's bridge address (the registry's), where a worker on a host of its own
        reaches it and a cut of that worker's link cuts it from its target too."""
        return registry_host(self.settings.netns)

    def start_target(self) -> None:
        portfile = self.logdir / "target.port"
        address = self.target_address
        command = ["-m", "tests.chaos.target", str(self.target_log), str(portfile), address]
        self.target = subprocess.Popen([sys.executable, *command])
        deadline = time.monotonic() + 30
        while not portfile.exists() or not portfile.read_text():
            if time.monotonic() > deadline or self.target.poll() is not None:
                raise RuntimeError("the chaos HTTP target did not start")
            time.sleep(0.05)
        self.url = f"http://{address}:{portfile.read_text()}/hook"

    def definition(self, job_id: str, *, payload: str | None = None) -> JobDefinition:
        target = Target(type="http", url=self.url)
        if job_id == MANUAL_JOB:
            return JobDefinition(
                job_id=job_id,
                target=target,
                updated_at=utc_now(),
                schedule=CronSchedule(expression="0 0 1 1 *"),
            )
        made = job(job_id, every_ms=self.every_ms, jitter_ms=self.every_ms - 1, target=target)
        # Spread over the three priorities: a worker's share of the partitions is then a
        # share of the load whichever topics the group's assignor gave it.
        priority = PRIORITIES[int(job_id.rsplit("-", 1)[1]) % 3]
        return _with(made, priority=priority, payload=payload)

    def put_jobs(self, extra: int = 0) -> None:
        """The firing jobs, the manual job, and ``extra`` daily jobs (not firing)."""
        ids = [*self.jobs, MANUAL_JOB]
        put_jobs(self.settings, len(ids), lambda i: self.definition(ids[i]))
        if extra:
            put_jobs(
                self.settings,
                extra,
                lambda i: job(
                    f"chaos-daily-{i}",
                    cron=f"{i % 60} {i // 60 % 60} 3 * * *",
                    target=Target(type="http", url=self.url),
                ),
            )

    def start_members(self) -> None:
        allow = f"{self.target_address}/32"  # the target, nothing else (SSRF checks)
        worker = ("--concurrency", "64", "--http-allow", allow, *self.worker_args)
        for name, role, args in (
            ("s1", "scheduler", ()),
            ("s2", "scheduler", ()),
            ("w1", "worker", worker),
            ("w2", "worker", worker),
            ("sink", "sink", ()),
            *self.extra_members,
        ):
            host = self.hosted.get(name)
            self.members[name] = Member(self.settings, self.logdir, name, role, *args, host=host)

    def wait_live(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = sum(self.members[s].log().count(" live: ") for s in ("s1", "s2"))
            assigned = all("assigned" in self.members[w].log() for w in ("w1", "w2", "sink"))
            if live >= self.settings.partitions and assigned:
                return
            for member in self.members.values():
                if member.proc.poll() is not None:
                    raise RuntimeError(f"{member.name} died:\n{member.log()[-3000:]}")
            time.sleep(0.5)
        raise RuntimeError("the pipeline never went live")

    def start_threads(self) -> None:
        for fn in (self._trigger_loop, self._lag_loop):
            thread = threading.Thread(target=fn, daemon=True)
            thread.start()
            self._threads.append(thread)

    # -- background ---------------------------------------------------------------------
    def _trigger_loop(self) -> None:
        """Manual runs through the client's path (``JobClient.trigger_many``, minus its
        read of the definition): published, flushed, and only then expected."""
        manual = self.definition(MANUAL_JOB)
        publisher = Publisher(self.settings)
        topic = self.topics.runs(Priority.NORMAL)
        while not self._stop.wait(1.0):
            now = utc_now()
            ids = [manual_run_id(MANUAL_JOB, uuid.uuid4().hex) for _ in range(self.triggers_per_s)]
            try:
                for run_id in ids:
                    publisher.publish(
                        topic,
                        manual.run_request(
                            run_id=run_id, scheduled_at=now, fired_at=now, trigger=Trigger.MANUAL
                        ),
                    )
                publisher.flush(timeout=10)
            except Exception as exc:  # a broker outage: not acknowledged, not expected
                self.trigger_failures += len(ids)
                print(f"  trigger not acknowledged: {exc}", flush=True)
                continue
            acked = time.time()
            self.triggered.extend((acked, run_id) for run_id in ids)
        publisher.close()

    def _lag_loop(self) -> None:
        runs = [self.topics.runs(p) for p in Priority]
        # Leaders looked up again every 5 s: with a broker of the cluster killed, a
        # consumer that only asks watermarks kept asking the dead one (no samples).
        fresh = {"topic.metadata.refresh.interval.ms": 5000}
        workers = kafka_consumer(
            self.settings, **{"group.id": f"{self.settings.topic_prefix}.workers", **fresh}
        )
        sink = kafka_consumer(
            self.settings, **{"group.id": f"{self.settings.topic_prefix}.sink", **fresh}
        )
        while not self._stop.wait(1.0):
            try:
                w = group_lag(workers, _ends(workers, runs, self.settings.partitions))
                s = group_lag(sink, _ends(sink, [self.topics.history], self.settings.partitions))
            except Exception:  # the broker is down: no sample
                continue
            self.lag.samples.append((time.time(), w, s))
        workers.close()
        sink.close()

    def check_members(self) -> None:
        for member in self.members.values():
            member.check()

    # -- the end ------------------------------------------------------------------------
    def finish(self, through_ms: int, drain_timeout: float = 300) -> None:
        """Stop triggering; once the schedulers' checkpoints say every slot due by
        ``through_ms`` (the measured window's end) was emitted and acknowledged, stop
        them; let the workers and the sink read everything, then stop them and the
        target. A slot fired late is late (the stall and recovery figures), not lost: the
        schedulers stopped at a fixed time after a fault counted the slots they had not
        fired yet as lost and silently missed (1,319 in a CI run, the window ending on a
        pipeline still catching up)."""
        self.check_members()
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        waited = self._wait_fired_through(through_ms, FIRED_THROUGH_WAIT_S)
        self.notes.append(
            f"schedulers checkpointed past the window's end {waited:.0f} s after it"
            if waited is not None
            else f"schedulers not checkpointed past the window's end {FIRED_THROUGH_WAIT_S} s "
            "after it (its last slots count as lost)"
        )
        for name in ("s1", "s2"):
            self.members[name].stop()
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and not self.drained():
            self.check_members()
            time.sleep(2)
        time.sleep(2)
        for member in self.members.values():  # the workers, the sink, any extra ones
            member.check()
            member.stop()
        if self.target is not None:
            self.target.send_signal(signal.SIGTERM)
            self.target.wait(timeout=30)

    def _wait_fired_through(self, through_ms: int, timeout: float) -> float | None:
        """Seconds after ``through_ms`` until every jobs partition's committed checkpoint
        (the scheduler group's offsets' metadata) fired through it; None: not within
        ``timeout`` of it."""
        consumer = kafka_consumer(
            self.settings, **{"group.id": f"{self.settings.topic_prefix}.scheduler"}
        )
        wanted = [TopicPartition(self.topics.jobs, p) for p in range(self.settings.partitions)]
        try:
            while True:
                points = [
                    Checkpoint.from_metadata(tp.metadata) for tp in committed(consumer, wanted)
                ]
                if all(c is not None and c.fired_through >= through_ms for c in points):
                    return max(0.0, time.time() - through_ms / 1000)
                if time.time() - through_ms / 1000 > timeout:
                    return None
                self.check_members()
                time.sleep(1)
        finally:
            consumer.close()

    def drained(self) -> bool:
        consumer = kafka_consumer(
            self.settings, **{"group.id": f"{self.settings.topic_prefix}.workers"}
        )
        try:
            runs = [self.topics.runs(p) for p in Priority]
            if group_lag(consumer, _ends(consumer, runs, self.settings.partitions)):
                return False
        finally:
            consumer.close()
        consumer = kafka_consumer(
            self.settings, **{"group.id": f"{self.settings.topic_prefix}.sink"}
        )
        try:
            ends = _ends(consumer, [self.topics.history], self.settings.partitions)
            return group_lag(consumer, ends) == 0
        finally:
            consumer.close()

    def kill_all(self) -> None:
        """Interrupted: every process and thread of this pipeline, at once (a scenario
        that failed left its trigger thread writing to its deleted topics)."""
        self._stop.set()
        for member in self.members.values():
            if member.proc.poll() is None:
                member.kill9()
        if self.target is not None and self.target.poll() is None:
            self.target.kill()

    def drop(self) -> None:
        """Delete the scenario's topics and keyspace (its figures are taken)."""
        from cronstream.infra.cassandra_access import admin_session

        for undo in self.on_drop:
            undo()
        admin = kafka_admin(self.settings, superuser=True)
        names = self.topics.names()
        for future in admin.delete_topics(names, operation_timeout=60).values():
            future.result()
        cluster, session = admin_session(self.settings)
        try:
            session.execute(f"DROP KEYSPACE IF EXISTS {self.settings.keyspace}", timeout=120)
        finally:
            cluster.shutdown()


def _ends(consumer: object, topics: list[str], partitions: int) -> list[TopicPartition]:
    return [
        TopicPartition(t, p, watermarks(consumer, TopicPartition(t, p), timeout=10)[1])  # type: ignore[arg-type]
        for t in topics
        for p in range(partitions)
    ]


def _with(definition: JobDefinition, **changes: object) -> JobDefinition:
    from dataclasses import replace

    return replace(definition, **changes)  # type: ignore[arg-type]


def _migrate(settings: Settings) -> None:
    from cronstream.infra.bootstrap import ensure_keyspace

    ensure_keyspace(settings)
