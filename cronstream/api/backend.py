"""What `cronstream api` stands on: the jobs as the jobs topic has them, the admission's
answers, history and the runs' output.

- Commands go to the caller's commands topic (``<prefix>.t.<tenant>.in``), as
  cronstream's own Kafka user, so the API's writes pass the same admission (validation,
  tenant stamp, quotas) as a tenant's own client. The tenant is the one the caller's
  token was issued to, never a field of the request.
- Answers are read from every tenant's results topic (subscribed by pattern, from the
  beginning in a group of this process's own, so no answer is missed whatever the
  assignment's timing) and handed to the request waiting for that command id.
- Jobs are read from the jobs topic into a ``JobsView`` and followed; a change the
  admission accepted shows there a moment after its answer.
"""

from __future__ import annotations

import logging
import threading
import uuid
from contextlib import suppress
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cronstream.api.triggers import (
    SCAN_DAYS,
    SCAN_ROWS,
    UPSTREAM_ROWS,
    TriggerOffsets,
    TriggerStatus,
    day_bounds,
    last_matched,
    upstream_today,
)
from cronstream.consumers.history import History
from cronstream.consumers.output import OutputTable
from cronstream.consumers.tiers import Tiers
from cronstream.producers.admission.core import JobsView
from cronstream.producers.admission.processor import JobsFollower
from cronstream.producers.errors import NoAnswer
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, sleeping
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.ids import dependency_run_id
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import TenantCommand, TenantResult, commands_pattern

log = logging.getLogger("cronstream.api")


class UnknownTenant(LookupError):
    """A command for a tenant without a commands topic here (an admin's ?tenant= naming
    no tenant onboarded in this deployment)."""


class Backend:
    def __init__(self, settings: Settings, *, answer_timeout: float = 30.0) -> None:
        self.settings = settings
        self.topics = Topics(settings)
        self.answer_timeout = answer_timeout
        self.codec = Codec(registry_client(settings))
        self.publisher = Publisher(settings, codec=self.codec, answering=True)
        self.view = JobsView()
        self.follower = JobsFollower(settings, self.codec, self.view, who="api")
        self._waiting: dict[str, tuple[threading.Event, list[TenantResult]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.follower.pause = sleeping(self._stop.is_set)  # the registry away: wait
        self.cluster: Any = None
        self.hot: History | None = None  # Cassandra's: the triggers' recent days
        self.history: Tiers | None = None  # both tiers: every history query shown
        self._session: Any = None
        self._outputs: OutputTable | None = None  # prepared by the first query of one
        self._offsets: TriggerOffsets | None = None  # made by the first trigger asked of

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.follower.load()
        self.cluster, self._session = cassandra_session(self.settings)
        self.hot = History(self._session, self.settings.keyspace)
        self.history = Tiers(self.hot, self.settings)
        for target in (self._follow_jobs, self._read_answers):
            thread = threading.Thread(target=target, daemon=True, name=target.__name__)
            thread.start()
            self._threads.append(thread)

    def run_output(self, run_id: str) -> list[RunOutput]:
        """What each attempt of ``run_id`` printed or returned (docs/run-output.md), by
        attempt. The statements are prepared at the first call, not at the start: an
        API of this version serves before the bootstrap added the table."""
        if self._outputs is None:
            self._outputs = OutputTable(self._session, self.settings.keyspace)
        return self._outputs.of(run_id)

    def triggers(self, job: JobDefinition, now: datetime) -> TriggerStatus:
        """What ``job``'s triggers are doing (``cronstream.api.triggers``): the lag and
        last record matched of its ``on:``, its upstream jobs' day. History that cannot
        be read is the answer's ``history_error``, the lag's Kafka refusal its own."""
        hot = self.hot
        assert hot is not None
        status = TriggerStatus(job=job)
        if job.on is not None:
            if self._offsets is None:
                self._offsets = TriggerOffsets(self.settings)
            status = replace(status, lag=self._offsets.lag(job.on.topic))
        try:
            if job.on is not None:
                rows = hot.job_runs(
                    job.job_id,
                    now - timedelta(days=SCAN_DAYS),
                    now + timedelta(days=1),
                    limit=SCAN_ROWS,
                )
                status = replace(status, matched=last_matched(rows))
            if job.after:
                day, start, end = day_bounds(now)
                upstream = tuple(
                    upstream_today(
                        u,
                        u in self.view.jobs,
                        hot.job_runs(u, start, end, ["SUCCEEDED"], limit=UPSTREAM_ROWS),
                        day,
                    )
                    for u in job.after
                )
                own = hot.run(dependency_run_id(job.job_id, day))
                status = replace(status, day=day, upstream=upstream, today=own[-1] if own else None)
        except Exception as exc:  # the driver's NoHostAvailable, OperationTimedOut: shown
            return replace(status, history_error=f"history unavailable ({exc})")
        return status

    def stopped_threads(self) -> list[str]:
        """The names of the backend's threads that ended (none while it serves)."""
        return [t.name for t in self._threads if not t.is_alive()]

    def _exists(self, topic: str) -> bool:
        """Whether ``topic`` exists (one metadata request, ~1 ms beside the admission's
        round trip): a write to a missing one would wait for the registry and the broker
        to refuse it, as a 500."""
        meta = self.publisher.producer.list_topics(topic, timeout=10).topics.get(topic)
        return meta is not None and meta.error is None

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        self.follower.close()
        self.publisher.close()
        if self.history is not None:
            self.history.close()
        if self._offsets is not None:
            self._offsets.close()
        if self.cluster is not None:
            self.cluster.shutdown()

    def _follow_jobs(self) -> None:
        with suppress(StopWaiting):  # closing while the registry was away
            while not self._stop.is_set():
                self.follower.follow(timeout=0.5)

    def _read_answers(self) -> None:
        prefix = self.settings.topic_prefix
        refresh: dict[str, Any] = {"topic.metadata.refresh.interval.ms": 2000}
        group = f"{prefix}.api.{uuid.uuid4().hex[:12]}"
        member = GroupMember(
            self.settings, MemberConfig(group=group, name="api-answers"), log=log, **refresh
        )
        member.subscribe([commands_pattern(prefix, "out")])
        try:
            while not self._stop.is_set():
                messages = member.consume(500, 0.5, ready=True)
                learn_writers(self.codec, messages, what="api", log=log, pause=self.follower.pause)
                for msg in messages:
                    if not msg.error():
                        self._answered(msg.value())
        except StopWaiting:  # closing while the registry was away
            pass
        finally:
            member.close()

    def _answered(self, value: bytes | None) -> None:
        try:
            result = self.codec.decode(value, TenantResult)
        except DecodeError:
            return
        with self._lock:
            waiting = self._waiting.get(result.command_id)
        if waiting is not None:
            waiting[1].append(result)
            waiting[0].set()

    # -- commands -----------------------------------------------------------------------
    def command(self, tenant: str, command: TenantCommand) -> TenantResult:
        """Send ``command`` (``producers.tenant.issue``'s) as ``tenant`` and wait for the
        admission's answer. Raises UnknownTenant for a tenant not onboarded here,
        NoAnswer after the timeout."""
        topic = self.topics.tenant_commands(tenant)
        if not self._exists(topic):
            raise UnknownTenant(f"no tenant {tenant!r}")
        done = threading.Event()
        box: list[TenantResult] = []
        with self._lock:
            self._waiting[command.command_id] = (done, box)
        try:
            self.publisher.publish(topic, command)
            self.publisher.flush()
            if not done.wait(self.answer_timeout):
                raise NoAnswer(
                    f"no answer from the admission in {self.answer_timeout:.0f} s "
                    "(is `cronstream admission` running?)"
                )
            return box[0]
        finally:
            with self._lock:
                self._waiting.pop(command.command_id, None)
