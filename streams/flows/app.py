"""The flows coordinator: a faust-streaming app (``cronstream flows-coordinator``). This
module assembles and runs it (``build_app``, the agent's body ``_Runner``, the table
``Rows``); what each event decides is ``streams.flows.coordinator.Coordinator``'s.

One agent reads ``flows.events`` (key: the flow id, so every event of a flow run is on
one partition): flow run starts (the worker executing a flow's schedule), node run
outcomes (the worker settling a node's attempt) and reruns (``flows rerun``). Each
event moves one flow run through ``streams.core.flow``; the run's state is a row of
the table ``runs`` (key: the flow run id), backed by its changelog topic, so a new
owner of the partition (after a kill -9) restores it. Events come in batches (faust's
``noack_take``), acked once their rows are acknowledged (``Rows``) and their sends
queued. What the step decides is sent with faust's producer, which faust flushes
before it commits the event's offset:
node run requests to ``runs.<priority>`` (key: the flow id, the job of every node run),
and to ``history`` the nodes decided without running (UPSTREAM_FAILED, SKIPPED) and
the flow run's end (SUCCEEDED or FAILED). An event's rows are written before its
sends are queued, so a coordinator stopped between the two (a kill, or a graceful stop:
faust cancels the agent mid-batch and its producer still delivers the rows) leaves
rows that say the event happened and sends that never went; the event is handled
again, as its offset was not committed, and sends again what it caused: its starts,
flagged (the workers run each node run once), the nodes decided without running and
the flow run's end (``core.seen``). An event the step raises on (a bug it reaches)
changes no row and goes to the DLQ with the error; the others go on
(``runtime.faults``). An event that is no FlowEvent goes to the DLQ as undecodable.
While the schema registry is unreachable, an event written with a schema this process
has not seen yet waits for it (the batch is held, nothing after it is acked): a
registry outage delays flows, it loses no event.

A tenant's node runs go through its fire rate (``--tenant-fires-per-second``,
``streams.core.rates``): an event whose node runs are over the rate waits until the rate
allows the last of them (``_pace``), then its sends are queued; it is acked after, so a
crash while it waits processes it again (its starts sent again, flagged). The events
behind it on the partition wait too: a flow has at most 5,000 nodes, an operator's.

Flow definitions come from the compacted ``flows`` topic, read by a thread
(``streams.flows.definitions``); a run keeps the nodes it started with. Faust's traps
avoided: its topics are created by the bootstrap (``topic_allow_declare=False``), raw
topics say so, table types are explicit, and no timer decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import faust
from faust.streams import _current_event

from cronstream.runtime import metrics
from cronstream.runtime.errors import RepeatedFault
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.records import dead_letter
from cronstream.runtime.kafka.security import aiokafka_security
from cronstream.runtime.kafka.stall import Backoff
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.alerts import Alert
from cronstream.schemas.catalog import FLOWS_APP, FLOWS_TABLE, Topics
from cronstream.schemas.errors import DecodeError, RegistryUnavailable
from cronstream.schemas.events import (
    ControlCommand,
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
)
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.serde import Codec
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.flows.coordinator import Coordinator, Send
from cronstream.streams.flows.definitions import Definitions
from cronstream.streams.flows.faust_seek import SeekingApp
from cronstream.streams.flows.rows import EventRows, JsonRows

log = logging.getLogger("cronstream.flows")
STAGE = "flows-coordinator"  # its role's name: its record faults and dead letters
SESSION_TIMEOUT_S = 10.0  # as the other roles' consumer groups
PROBE_EVERY_S = 2.0  # liveness and readiness of the coordinator (nothing else is timed)
DEFINITION_WAIT_S = 5.0  # a start whose flow is not known yet waits this long for it
# Flow events handled together (one wait for their rows): at most BATCH, gathered for at
BATCH, BATCH_WAIT_S = 256, 0.005  # most BATCH_WAIT_S (added to a hop when events are few)


class Rows(faust.Table[str, str]):
    """The coordinator's table, whose writes can be waited for (``written``: every row
    set since acknowledged by the broker, before the sends and the events' acks).

    Faust's commit waits for its producer buffer at most 0.1 s: at start, while the
    producer still fetched the changelog's metadata, an event's offset could be
    committed before its row was written, and a kill -9 lost the row (found by the
    kill -9 integration test)."""

    _sent: list[Any] | None = None

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        future = super().send_changelog(*args, **kwargs)
        if self._sent is None:
            self._sent = []
        self._sent.append(future)
        return future

    async def written(self) -> None:
        sent, self._sent = self._sent or [], None
        for future in sent:
            await future  # raises the producer's error: nothing is sent, nothing committed


class _Runner:
    """The agent's body, a batch of events at a time."""

    clock: Callable[[], int] = staticmethod(lambda: time.time_ns() // 1_000_000)  # ms
    sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)

    def __init__(
        self,
        coordinator: Coordinator,
        codec: Codec,
        table: Any,
        out: Any,
        crash: Callable[[BaseException], Awaitable[None]] | None = None,
        rates: TenantRates | None = None,
    ) -> None:
        self.coordinator, self.codec, self.table, self.out = coordinator, codec, table, out
        self.faults = RecordFaults(STAGE)
        self.crash = crash  # the app's: a RepeatedFault stops the process (``_stop``)
        self.rates = rates
        topics = coordinator.topics
        self._runs_topics = frozenset(topics.runs(p) for p in Priority)

    async def handle(self, events: list[Any]) -> None:
        """Step each of ``events`` (faust events) in order, wait once for every row they
        wrote to be acknowledged, queue their sends; the caller then acks the events
        (processed once their rows are durable and their sends queued)."""
        sends: list[Send] = []
        rows = JsonRows(self.table)  # the batch's rows, each decoded once
        for event in events:
            # A row goes to the changelog partition of faust's current event (task-local).
            _current_event.set(weakref.ref(event))
            sends += await self._step(rows, event)
        await self.table.written()
        for topic, key, data, headers in sends:
            await self.out[topic].send(key=key.encode(), value=data, headers=headers)

    async def handle_batch(self, events: list[Any]) -> None:
        """``handle``; if the batch fails (its rows or sends refused: an event the step
        raises on is dead-lettered by ``_step``), each event alone, one that fails again
        logged and skipped (as faust does with an event whose agent raised); an event of
        the batch already stepped is then a replay, which changes nothing."""
        try:
            await self.handle(events)
        except RepeatedFault as exc:
            await self._stop(exc)
        except Exception:
            log.exception("a batch of %d flow events failed: each handled alone", len(events))
            for event in events:
                try:
                    await self.handle([event])
                except RepeatedFault as exc:
                    await self._stop(exc)
                except Exception:
                    log.exception("flow event at %s skipped", event.message.tp)

    async def _stop(self, exc: RepeatedFault) -> NoReturn:
        """A bug every event reaches: the process stops (faust would restart the agent)."""
        if self.crash is not None:
            await self.crash(exc)
        raise exc

    async def _decode(self, faust_event: Any) -> FlowEvent:
        """The event; while the registry does not answer for its writer schema, asked
        again as the scheduler and the workers do (``stall.Backoff``: 0.5 s doubling to
        30 s): the agent waits, nothing is skipped."""
        backoff = Backoff(log, "this flow event and the ones after it wait (nothing acked)")
        while True:
            try:
                event = self.codec.decode(faust_event.value, FlowEvent)
            except RegistryUnavailable as exc:
                backoff.failed(exc)
                await asyncio.sleep(backoff.delay)
                continue
            backoff.passed()
            return event

    async def _step(self, rows: JsonRows, faust_event: Any) -> list[Send]:
        """Decode (an undecodable event is dead-lettered), wait a moment for an unknown
        flow, step. An event the step raises on changes no row and is dead-lettered with
        the error (``runtime.faults``)."""
        message = faust_event.message
        try:
            event = await self._decode(faust_event)
        except DecodeError as exc:
            log.warning("flow event at %s undecodable, dead-lettered: %s", message.tp, exc)
            letter = dead_letter(
                stage=STAGE,
                reason=f"undecodable flow event: {exc}",
                topic=message.tp[0],
                partition=message.tp[1],
                offset=message.offset,
                key=message.key,
                value=faust_event.value,
            )
            dlq = self.coordinator.topics.dlq
            return [(dlq, letter.key(), self.codec.encode(dlq, letter), letter.headers())]
        known = self.coordinator.definitions.flows
        if event.kind is FlowEventKind.START and rows.get(event.flow_run_id) is None:
            # ``flows put`` then at once ``flows trigger``: give the thread a moment.
            deadline = time.monotonic() + DEFINITION_WAIT_S
            while event.flow_id not in known and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        own = EventRows(rows)
        try:
            sends = self.coordinator.handle(own, event)
        except Exception as exc:
            fault = self.faults.fault(
                exc,
                topic=message.tp[0],
                partition=message.tp[1],
                offset=message.offset,
                key=message.key,
                tenant=event.tenant,
            )
            letter = fault.letter(
                STAGE,
                value=faust_event.value,
                job_id=event.flow_id,
                run_id=event.run_id or event.flow_run_id,
            )
            dlq = self.coordinator.topics.dlq
            return [(dlq, letter.key(), self.codec.encode(dlq, letter), letter.headers())]
        self.faults.ok()
        own.apply()
        await self._pace(event.tenant, sends)
        return sends

    async def _pace(self, tenant: str, sends: list[Send]) -> None:
        """Wait until ``tenant``'s rate allows the node runs among ``sends`` (booked)."""
        runs = sum(1 for send in sends if send[0] in self._runs_topics)
        if self.rates is None or not runs:
            return
        now = self.clock()
        at = self.rates.book(tenant, runs, now)
        metrics.count_deferred(self.rates.drain_deferred())
        if at > now:
            await self.sleep((at - now) / 1000)


def _credentials(settings: Settings) -> Any:
    security = aiokafka_security(settings)
    if not security:
        return None
    return faust.SASLCredentials(
        username=security["sasl_plain_username"],
        password=security["sasl_plain_password"],
        mechanism="SCRAM-SHA-512",
        ssl_context=security["ssl_context"],
    )


def build_app(
    settings: Settings, rates: TenantRates
) -> tuple[faust.App, Definitions]:  # long: the faust app, its tables and agents
    """The coordinator's faust app (run it with ``faust.Worker``); ``rates``: the
    tenants' fire rates its node runs are held to."""
    topics = Topics(settings)
    codec = Codec(registry_client(settings))
    writes = (
        (topics.history, RunOutcome),
        (topics.control, ControlCommand),
        (topics.alerts, Alert),
        (topics.dlq, DeadLetter),
        *((topics.runs(p), RunRequest) for p in Priority),
    )
    for name, event_type in writes:
        codec.writer_id(f"{name}-value", event_type)
    definitions = Definitions(settings, Codec(registry_client(settings)))  # its own client
    coordinator = Coordinator(settings, codec, definitions)
    # faust makes only the last directory of it (the first start on a host failed)
    datadir = settings.home / "faust" / f"{settings.topic_prefix}.{FLOWS_APP}"
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = SeekingApp(
        f"{settings.topic_prefix}.{FLOWS_APP}",
        broker=f"kafka://{settings.bootstrap_servers}",
        broker_credentials=_credentials(settings),
        web_enabled=False,
        store="memory://",
        # Under the stack's home: faust's default is "<app id>-data" in the working
        # directory (a read-only image in a pod; the repository's root under make test).
        datadir=str(datadir),
        processing_guarantee="at_least_once",
        topic_allow_declare=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        # A killed coordinator's partitions move after this, not faust's default 60 s.
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=3.0,
        Table=Rows,
    )

    def raw(name: str) -> Any:
        return app.topic(
            name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    out = {name: raw(name) for name, _ in writes}
    # Rows are JSON text: faust's json codec turns a dict value_type into a model it
    # cannot restore ("type object 'dict' has no attribute 'from_data'").
    table = app.Table(
        FLOWS_TABLE, default=None, key_type=str, value_type=str, partitions=settings.partitions
    )

    runner = _Runner(coordinator, codec, table, out, crash=app.crash, rates=rates)

    async def probe() -> None:
        """``/healthz`` and ``/readyz`` (``runtime.metrics.PROBES``): the event loop goes
        round; ready once the definitions are read and the table is recovered."""
        metrics.PROBES.beat()
        recovery = app.tables.recovery  # type: ignore[attr-defined]  # TableManager's
        recovered = recovery.completed.is_set() and not app.rebalancing
        metrics.PROBES.set_ready(definitions.caught_up.is_set() and recovered)

    app.timer(interval=PROBE_EVERY_S)(probe)

    @app.agent(raw(topics.flow_events))
    async def coordinate(stream: Any) -> None:
        async for events in stream.noack_take(BATCH, within=BATCH_WAIT_S):
            await runner.handle_batch(events)
            for event in events:
                await stream.ack(event)

    return app, definitions
