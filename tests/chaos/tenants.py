"""The tenant-flood scenario: a tenant floods its commands topic with hostile
records while another tenant puts a valid job every second, under the usual load.

``prepare`` onboards two tenants of the scenario's prefix as ``make tenant`` does
(``infra.tenants.add_tenant``: Kafka user, topics, ACLs, the default client quotas) and
adds a ``cronstream admission`` member; both tenants, the admission and the workers get
one grant: http to the chaos target's address and port (as ``make run`` grants its demo
tenant the example target), so tenant B's jobs are valid and tenant A's accepted
triggers execute.

``fault``: a supervisor starts the admission again 1 s after it exits by itself (a
service manager's ``Restart=always``) and counts it; B's prober puts ``probe-N`` every
second and times each answer (``TenantClient``); once B is answered, A writes
``FLOOD_RECORDS`` records to its commands topic as its own Kafka user, as any client
could (``hostile_commands``), then waits for the admission's answers on A's results
topic (matched by the command's offset). Its lines in the row: A's commands written,
answered (refused with a reason, or accepted) and unanswered; B's puts answered and
their latency; the admission's restarts; once the pipeline is drained, the runs of A's
jobs by status (what its accepted commands made the workers do).
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from confluent_kafka import KafkaError, KafkaException, Message

from cronstream.infra.quotas import default_quotas
from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.producers.errors import NoAnswer
from cronstream.producers.tenant import TenantClient, tenant_settings
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import TenantCommand, TenantResult
from tests.bench.common import job
from tests.chaos.flood_commands import Victims, hostile_commands, http_target
from tests.chaos.load import Member, Pipeline, say
from tests.integration.helpers import read_topic

FLOOD_RECORDS = 2000
FLOOD_PER_S = 100
TRIGGERS_PER_SECOND = 1  # the admission's quota: A's triggers go over it within seconds
ANSWER_TIMEOUT_S = 60.0  # one put of tenant B unanswered after this: counted unanswered
ANSWERS_WITHIN_S = 120.0  # after the flood, until every command of A is answered
MAX_RESTARTS = 20
YEARLY = "0 0 1 1 *"  # the tenants' own jobs do not fire during the scenario


@dataclass
class Sent:
    label: str
    offset: int | None = None  # on A's commands topic, once Kafka acknowledged it
    error: str | None = None  # Kafka refused it


def write(
    publisher: Publisher, topic: str, records: Iterator[tuple[str, bytes | None, bytes]], per_s: int
) -> list[Sent]:
    """Write ``records`` at about ``per_s`` a second; each one's offset or refusal."""
    sent: list[Sent] = []
    started = time.monotonic()
    for label, key, value in records:
        entry = Sent(label)
        sent.append(entry)

        def delivered(err: KafkaError | None, msg: Message, entry: Sent = entry) -> None:
            if err is None:
                entry.offset = msg.offset()
            else:
                entry.error = err.str()

        try:
            publisher.producer.produce(topic, key=key, value=value, on_delivery=delivered)
        except (KafkaException, BufferError) as exc:
            entry.error = str(exc)
        publisher.producer.poll(0)
        ahead = len(sent) / per_s - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    publisher.producer.flush(180)
    for entry in sent:
        if entry.offset is None and entry.error is None:
            entry.error = "no acknowledgement within 180 s"
    return sent


def answers(settings: Settings, topic: str, offsets: set[int]) -> dict[int, TenantResult]:
    """The admission's first answer to each command at ``offsets`` (every answer names
    its command's offset, a command it could not read too)."""
    found: dict[int, TenantResult] = {}
    with registry_client(settings) as registry:
        codec = Codec(registry)
        for record in read_topic(settings, topic):
            result = codec.decode(record.value or b"", TenantResult)
            if result.source_offset in offsets:
                found.setdefault(result.source_offset, result)
    return found


class Supervisor(threading.Thread):
    """Starts ``member`` again 1 s after it exits by itself (a service manager with
    ``Restart=always``), at most MAX_RESTARTS times: a record that kills it at every start
    shows as restarts without end, and everything behind it unanswered."""

    def __init__(self, member: Member) -> None:
        super().__init__(daemon=True)
        self.member, self.restarts, self.exits = member, 0, Counter[int]()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.5):
            code = self.member.proc.poll()
            if code is None or self.member.stopping:
                continue
            self.member.check()  # recorded as a crash of the row
            self.exits[code] += 1
            if self.restarts == MAX_RESTARTS:
                return
            time.sleep(1)
            self.member.restart()
            self.restarts += 1


class Prober(threading.Thread):
    """Tenant B: a valid put every second, each timed to its answer."""

    def __init__(self, settings: Settings, tenant: str, url: str) -> None:
        super().__init__(daemon=True)
        self.settings, self.tenant, self.url = settings, tenant, url
        self.samples: list[tuple[float, float | None, bool]] = []  # (at, s to answer, accepted)
        self.refusals: Counter[str] = Counter()
        self.failure: str | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            with TenantClient(self.settings, self.tenant) as client:
                client.timeout = ANSWER_TIMEOUT_S
                while not self.halt.is_set():
                    began = time.monotonic()
                    self.samples.append(self._put(client, len(self.samples)))
                    self.halt.wait(max(0.0, 1 - (time.monotonic() - began)))
        except Exception as exc:  # the thread's end is reported in the row
            self.failure = repr(exc)

    def _put(self, client: TenantClient, i: int) -> tuple[float, float | None, bool]:
        at, began = time.time(), time.monotonic()
        try:
            result = client.put(job(f"probe-{i}", cron=YEARLY, target=http_target(self.url)))
        except NoAnswer:
            return at, None, False
        if not result.accepted:
            self.refusals[(result.reason or "")[:100]] += 1
        return at, time.monotonic() - began, result.accepted

    def wait_answered(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(accepted for _, _, accepted in self.samples):
            if self.failure is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tenant {self.tenant}'s put never accepted: {self.failure}")
            time.sleep(0.5)

    def summary(self, since: float) -> str:
        """B's puts: answered, accepted, their latency (all, and after ``since``)."""
        times = [s for _, s, _ in self.samples if s is not None]
        during = [s for at, s, _ in self.samples if s is not None and at >= since] or [0.0]
        accepted = sum(1 for *_, ok in self.samples if ok)
        line = (
            f"tenant B ({self.tenant}): {len(self.samples)} puts, {len(times)} answered "
            f"({accepted} accepted), {len(self.samples) - len(times)} unanswered in "
            f"{ANSWER_TIMEOUT_S:.0f} s; answer latency max {max(times or [0.0]):.2f} s, "
            f"median {statistics.median(times or [0.0]):.2f} s (from the flood on: max "
            f"{max(during):.2f} s, median {statistics.median(during):.2f} s)"
        )
        if self.refusals:
            line += f"; refused: {dict(self.refusals)}"
        return line + (f"; prober ended: {self.failure}" if self.failure else "")


def tally(sent: list[Sent], found: dict[int, TenantResult]) -> dict[str, Counter[str]]:
    """Per kind: written, refused (with a reason), accepted, unanswered, not written
    (Kafka refused it); an example reason under the count key ``e.g. <reason>``."""
    out: dict[str, Counter[str]] = {}
    for entry in sent:
        counts = out.setdefault(entry.label, Counter())
        if entry.offset is None:
            counts["not written"] += 1
            counts[f"e.g. Kafka: {(entry.error or '')[:90]}"] = 1
            continue
        counts["written"] += 1
        result = found.get(entry.offset)
        if result is None:
            counts["unanswered"] += 1
        elif result.accepted:
            counts["accepted"] += 1
        elif result.reason:
            counts["refused"] += 1
            if not any(k.startswith("e.g.") for k in counts):
                counts[f"e.g. {result.reason[:110]}"] = 1
        else:
            counts["refused without a reason"] += 1
    return out


def print_kinds(kinds: dict[str, Counter[str]]) -> None:
    say(
        "tenant A's hostile commands by kind: written / refused / accepted / unanswered "
        "(/ not written: Kafka refused them)"
    )
    for label, c in kinds.items():
        example = next((k for k in c if k.startswith("e.g.")), "")
        late = f" / {c['not written']}" if c["not written"] else ""
        print(
            f"    {label:52} {c['written']:5} {c['refused']:5} {c['accepted']:5} "
            f"{c['unanswered']:5}{late}  {example}",
            flush=True,
        )


def runs_of(settings: Settings, tenant: str) -> dict[str, Counter[str]]:
    """The history records of ``tenant``'s runs: own job id -> status -> count."""
    out: dict[str, Counter[str]] = {}
    for record in read_topic(settings, Topics(settings).history):
        run_id = record.headers.get("run_id", "")
        if run_id.startswith(f"{tenant}/"):
            own = run_id[len(tenant) + 1 :].rpartition("@")[0]
            out.setdefault(own, Counter())[record.headers.get("status", "?")] += 1
    return out


class TenantFlood:
    """The scenario (one per suite run; ``prepare`` names its tenants)."""

    def __init__(self) -> None:
        self.a = self.b = ""

    def prepare(self, p: Pipeline, _stack: Settings) -> None:
        tag = uuid.uuid4().hex[:6]
        self.a, self.b = f"flood-{tag}", f"probe-{tag}"
        for tenant in (self.a, self.b):
            add_tenant(p.settings, tenant, quotas=default_quotas())
            p.on_drop.append(functools.partial(remove_tenant, p.settings, tenant))
        port = urlsplit(p.url).port
        grants = tuple(f"--grant={t}:http=127.0.0.1:{port}" for t in (self.a, self.b))
        p.worker_args = (*p.worker_args, *grants)
        p.extra_members.append(
            ("adm", "admission", ("--triggers-per-second", str(TRIGGERS_PER_SECOND), *grants))
        )
        say(f"tenants {self.a} (hostile) and {self.b} onboarded; admission adm, {grants}")

    def fault(self, p: Pipeline, _stack: Settings) -> tuple[float, float]:
        t = time.time()
        supervisor = Supervisor(p.members["adm"])
        prober = Prober(p.settings, self.b, p.url)
        supervisor.start()
        prober.start()
        try:
            prober.wait_answered(timeout=180)
            time.sleep(5)  # B's answers before the flood
            flood_start = time.time()
            sent = self._flood(p)
            flood_end = time.time()
            say(f"flood written in {flood_end - flood_start:.0f} s; waiting for the answers")
            topic, wanted = Topics(p.settings).tenant_results(self.a), _offsets(sent)
            deadline = time.monotonic() + ANSWERS_WITHIN_S
            while len(found := answers(p.settings, topic, wanted)) < len(wanted):
                if time.monotonic() > deadline:
                    break
                time.sleep(5)
            time.sleep(5)
        finally:
            prober.halt.set()
            supervisor.halt.set()
            prober.join(ANSWER_TIMEOUT_S + 5)
        self._report(p, tally(sent, found), prober.summary(flood_start), supervisor)
        return t, flood_end

    def _flood(self, p: Pipeline) -> list[Sent]:
        own = job("victim", cron=YEARLY, target=http_target(p.url))
        with TenantClient(p.settings, self.a) as client:
            client.timeout = 120
            first = client.put(own)
        if not first.accepted:
            raise RuntimeError(f"tenant {self.a}'s valid put refused: {first.reason}")
        s = p.settings
        victims = Victims(
            other=self.b,
            own=own,
            runs_topic=p.topics.runs(Priority.HIGH),
            ports=(
                s.kafka_port,
                s.kafka_admin_port,
                s.registry_port,
                s.cassandra_port,
                9092,
                8081,
                9190,
                8083,
            ),
            registry_port=s.registry_port,
        )
        publisher = Publisher(tenant_settings(s, self.a), **{"message.max.bytes": 1_048_576})
        topic = p.topics.tenant_commands(self.a)
        prefix = publisher.codec.wire_prefix(topic, TenantCommand)
        say(f"tenant {self.a} writes {FLOOD_RECORDS:,} hostile commands ({FLOOD_PER_S}/s)")
        records = hostile_commands(
            victims, prefix, lambda c: publisher.codec.encode(topic, c), FLOOD_RECORDS
        )
        try:
            return write(publisher, topic, records, FLOOD_PER_S)
        finally:
            publisher.close()

    def _report(
        self, p: Pipeline, kinds: dict[str, Counter[str]], b_line: str, supervisor: Supervisor
    ) -> None:
        print_kinds(kinds)
        total = sum(
            (
                Counter({k: v for k, v in c.items() if not k.startswith("e.g.")})
                for c in kinds.values()
            ),
            Counter[str](),
        )
        accepted = {label: c["accepted"] for label, c in kinds.items() if c["accepted"]}
        p.notes.append(
            f"tenant A ({self.a}): {total['written']:,} hostile commands written "
            f"({total['not written']} refused by Kafka), "
            f"{total['refused'] + total['accepted'] + total['refused without a reason']:,} "
            f"answered ({total['refused']:,} refused with a reason, "
            f"{total['refused without a reason']} without one, {total['accepted']:,} "
            f"accepted: {accepted}), {total['unanswered']:,} unanswered"
        )
        p.notes.append(b_line)
        exits = f" (exit codes {dict(supervisor.exits)})" if supervisor.exits else ""
        p.notes.append(f"admission restarts {supervisor.restarts}{exits}")
        for line in p.notes[-3:]:
            say(line)
        p.after.append(functools.partial(self._runs_line, p.settings))

    def _runs_line(self, settings: Settings) -> str:
        runs = {job_id: dict(c) for job_id, c in runs_of(settings, self.a).items()}
        return f"tenant A's runs by job and status (history): {runs or 'none'}"


def _offsets(sent: list[Sent]) -> set[int]:
    return {entry.offset for entry in sent if entry.offset is not None}
