"""The flows coordinator: a faust-streaming app (``cronstream flows-coordinator``).

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
the flow run's end (SUCCEEDED or FAILED). An event processed again after a crash
changes nothing in the table and sends its starts again, flagged (the workers run
each node run once). An event the step raises on (a bug it reaches) changes no row and
goes to the DLQ with the error; the others go on (``runtime.faults``).

Flow definitions come from the compacted ``flows`` topic, read by a thread
(``streams.flow_definitions``); a run keeps the nodes it started with. Faust's traps
avoided: its topics are created by the bootstrap (``topic_allow_declare=False``), raw
topics say so, table types are explicit, and no timer decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

import faust
from faust.streams import _current_event

from runtime import metrics
from runtime.errors import RepeatedFault
from runtime.faults import RecordFaults
from runtime.kafka.security import aiokafka_security
from runtime.registry import registry_client
from runtime.settings import Settings
from schemas.alerts import Alert, AlertKind, deadline_alert_id
from schemas.catalog import FLOWS_APP, FLOWS_TABLE, Topics
from schemas.errors import DecodeError
from schemas.events import (
    Concurrency,
    ControlAction,
    ControlCommand,
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
    from_ms,
    to_ms,
    utc_now,
)
from schemas.flows import FlowDefinition, FlowEvent, FlowEventKind, FlowNode
from schemas.serde import Codec
from streams.core import flow as core
from streams.faust_seek import SeekingApp
from streams.flow_definitions import Definitions
from streams.flow_rows import EventRows, JsonRows, Rows

log = logging.getLogger("cronstream.flows")
STAGE = "flows"
SESSION_TIMEOUT_S = 10.0  # as the other roles' consumer groups
PROBE_EVERY_S = 2.0  # liveness and readiness of the coordinator (nothing else is timed)
DEFINITION_WAIT_S = 5.0  # a start whose flow is not known yet waits this long for it
# Flow events handled together (one wait for their rows): at most BATCH, gathered for at
BATCH, BATCH_WAIT_S = 256, 0.005  # most BATCH_WAIT_S (added to a hop when events are few)


Send = tuple[str, str, bytes, Any]  # (topic, key, value, headers)


def _nodes(definition: FlowDefinition) -> list[core.Node]:
    return [core.Node(n.name, n.after, n.trigger_rule.value) for n in definition.nodes]


def _ended(row: Mapping[str, Any]) -> bool:
    return row["status"] not in core.GOING


class Coordinator:
    """One event at a time: the table row in, the row and what to send out."""

    def __init__(self, settings: Settings, codec: Codec, definitions: Definitions) -> None:
        self.topics = Topics(settings)
        self.codec = codec
        self.definitions = definitions
        self._by_name: dict[str, tuple[FlowDefinition, dict[str, FlowNode]]] = {}

    def handle(self, rows: JsonRows, event: FlowEvent) -> list[Send]:
        """One event: the rows it changes (its flow run's; under a concurrency policy,
        the flow's ``Active`` and the runs it queues, starts or cancels), and the
        records to send."""
        key = event.flow_run_id
        row = rows.get(key)
        if event.kind is FlowEventKind.DEADLINE:
            return self._deadline(rows, event, row)
        if row is None and event.kind is FlowEventKind.START:
            definition = self.definitions.flows.get(event.flow_id)
            if definition is not None and definition.concurrency is not Concurrency.ALLOW:
                return self._admit(rows, event, definition)
        new_row, sends = self.step(row, event)
        if new_row is not None and new_row != row:
            rows[key] = new_row
            if row is not None and not _ended(row) and _ended(new_row):
                sends += self._next_in_line(rows, event.flow_id, key)
                if new_row["status"] == "SUCCEEDED" and new_row.get("alerted") is not None:
                    sends.append(self._alert(event.flow_id, key, new_row["scheduled_ms"],
                                             new_row["tenant"], new_row["alerted"],
                                             "SUCCEEDED", AlertKind.DEADLINE_CLEARED))  # fmt: skip
        return sends

    def _deadline(self, rows: JsonRows, event: FlowEvent, row: dict[str, Any] | None
                  ) -> list[Send]:  # fmt: skip
        """A flow run's deadline came (forwarded by the worker that got the check): one
        DEADLINE_MISSED alert unless the run SUCCEEDED; the row remembers it, so the
        run succeeding later (a rerun) clears it, and a check fired again is quiet."""
        status = "NOT_STARTED" if row is None else row["status"]
        if status == "SUCCEEDED" or (row is not None and row.get("alerted") is not None):
            return []
        deadline_ms = to_ms(event.at)
        if row is not None:
            rows[event.flow_run_id] = {**row, "alerted": deadline_ms}
        log.warning("flow run %s missed its deadline (%s)", event.flow_run_id, status)
        slot = to_ms(event.scheduled_at)
        return [self._alert(event.flow_id, event.flow_run_id, slot, event.tenant, deadline_ms,
                            status, AlertKind.DEADLINE_MISSED)]  # fmt: skip

    def _alert(self, flow_id: str, run_id: str, scheduled_ms: int, tenant: str,
               deadline_ms: int, status: str, kind: AlertKind) -> Send:  # fmt: skip
        now = utc_now()
        alert = Alert(
            alert_id=deadline_alert_id(run_id), kind=kind, job_id=flow_id, run_id=run_id,
            tenant=tenant, scheduled_at=from_ms(scheduled_ms), deadline_at=from_ms(deadline_ms),
            raised_at=now, late_ms=max(0, to_ms(now) - deadline_ms), last_status=status,
            worker=FLOWS_APP,
        )  # fmt: skip
        topic = self.topics.alerts
        return topic, flow_id, self.codec.encode(topic, alert), alert.headers()

    def _admit(self, rows: JsonRows, event: FlowEvent, definition: FlowDefinition
               ) -> list[Send]:  # fmt: skip
        """A new run of a flow with a concurrency policy."""
        key, active_key = event.flow_run_id, core.active_key(event.flow_id)
        active = core.Active.from_record(rows.get(active_key))
        policy = definition.concurrency
        verdict = active.admit(policy.value, key)
        slot, sends = to_ms(event.scheduled_at), []
        if verdict in ("skip", "queue"):
            status = "SKIPPED" if verdict == "skip" else "QUEUED"
            run, _ = core.start(event.flow_id, key, _nodes(definition), scheduled_ms=slot,
                                tenant=event.tenant, status=status)  # fmt: skip
            rows[key] = core.to_record(run)
            if verdict == "skip":
                return [self._record(event.flow_id, key, slot, event.tenant, RunStatus.SKIPPED,
                                     f"flow run {active.running[0]} is still running "
                                     "(concurrency forbid)")]  # fmt: skip
            active.queued.append(key)
            rows[active_key] = active.to_record()
            return []
        if verdict == "replace":
            for old_id in [*active.running, *active.queued]:
                sends += self._cancel(rows, old_id, f"replaced by flow run {key} "
                                      "(concurrency replace)")  # fmt: skip
            active = core.Active()
        new_row, started = self.step(None, event)
        if new_row is not None:
            rows[key] = new_row
            if key not in active.running:
                active.running.append(key)
            rows[active_key] = active.to_record()
        return sends + started

    def _cancel(self, rows: JsonRows, run_id: str, reason: str) -> list[Send]:
        """End a replaced run: cancel commands for its running node runs, its end."""
        row = rows.get(run_id)
        if row is None:
            return []
        run = core.from_record(row)
        stopped = core.cancel(run)
        if not run.ended or row["status"] == run.status:
            return []
        rows[run_id] = core.to_record(run)
        out = []
        for node_run in stopped:
            command = ControlCommand(
                command_id=f"{node_run}:replaced", action=ControlAction.CANCEL, run_id=node_run,
                job_id=run.flow_id, issued_at=utc_now(), reason=reason,
            )  # fmt: skip
            topic = self.topics.control
            out.append((topic, node_run, self.codec.encode(topic, command), command.headers()))
        out.append(self._record(run.flow_id, run_id, run.scheduled_ms, run.tenant,
                                RunStatus.CANCELED, f"flow run {reason}"))  # fmt: skip
        return out

    def _next_in_line(self, rows: JsonRows, flow_id: str, ended: str) -> list[Send]:
        """A run of a flow under a concurrency policy ended: start the queued run whose
        turn it is."""
        active_key = core.active_key(flow_id)
        record = rows.get(active_key)
        if record is None:
            return []
        active = core.Active.from_record(record)
        turn = active.ended(ended)
        rows[active_key] = active.to_record()
        row = rows.get(turn) if turn is not None else None
        if row is None:
            return []
        run = core.from_record(row)
        before = dict(run.states)
        starts = core.begin(run)
        rows[run.run_id] = core.to_record(run)
        return self._sends(run, starts, before)

    def step(self, row: dict[str, Any] | None, event: FlowEvent
             ) -> tuple[dict[str, Any] | None, list[Send]]:  # fmt: skip
        """One flow run's row and one event: (the new row, records to send: (topic, key,
        value, headers))."""
        if row is None:
            if event.kind is not FlowEventKind.START:
                return None, []  # an outcome or rerun of a run this coordinator never started
            definition = self.definitions.flows.get(event.flow_id)
            if definition is None:
                slot = to_ms(event.scheduled_at)
                return None, [self._record(event.flow_id, event.flow_run_id, slot, event.tenant,
                                           RunStatus.FAILED,
                                           f"no flow {event.flow_id!r} is defined")]  # fmt: skip
            run, starts = core.start(
                event.flow_id, event.flow_run_id, _nodes(definition),
                scheduled_ms=to_ms(event.scheduled_at), tenant=event.tenant,
            )  # fmt: skip
            before: dict[str, core.NodeState] = {}
        else:
            run = core.from_record(row)
            before = dict(run.states)
            was = run.status
            if event.kind is FlowEventKind.START:
                starts = core.restarted(run)
            elif event.kind is FlowEventKind.RERUN:
                starts = core.rerun_failed(run)
            else:
                starts = core.settle(run, event.run_id or "", event.status or "",
                                     retrying=event.retrying)  # fmt: skip
            if run.status == was and not starts and run.states == before:
                return row, []
        return core.to_record(run), self._sends(run, starts, before)

    def _specs(self, flow_id: str) -> Mapping[str, FlowNode]:
        """The flow's nodes by name, built once per definition."""
        definition = self.definitions.flows.get(flow_id)
        if definition is None:
            return {}
        cached = self._by_name.get(flow_id)
        if cached is None or cached[0] is not definition:
            cached = self._by_name[flow_id] = (definition, {n.name: n for n in definition.nodes})
        return cached[1]

    def _sends(self, run: core.FlowRun, starts: list[core.Start],
               before: dict[str, core.NodeState]) -> list[Send]:  # fmt: skip
        specs = self._specs(run.flow_id)
        out = []
        for item in starts:
            spec = specs.get(item.node)
            if spec is None:  # the definition changed or went: the node cannot run
                out.append(self._record(run.flow_id, item.run_id, run.scheduled_ms, run.tenant,
                                        RunStatus.FAILED, f"node {item.node!r} is no longer "
                                        "in the flow's definition"))  # fmt: skip
                continue
            out.append(self._node_run(run, item, spec))
        for name, state in run.states.items():
            if state in (core.NodeState.UPSTREAM_FAILED, core.NodeState.SKIPPED) and before.get(
                    name) is not state:  # fmt: skip
                status = RunStatus(state.value)
                why = ("a node it comes after failed" if status is RunStatus.UPSTREAM_FAILED
                       else "no node it comes after failed (trigger any_failed)")  # fmt: skip
                run_id = core.node_run_id(run.run_id, name, run.generation)
                out.append(self._record(run.flow_id, run_id, run.scheduled_ms, run.tenant,
                                        status, why))  # fmt: skip
        if run.ended and (not before or any(s not in core.ENDED for s in before.values())):
            counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(core.summary(run).items()))
            ended = RunStatus(run.status)
            out.append(self._record(run.flow_id, run.run_id, run.scheduled_ms, run.tenant, ended,
                                    f"flow run ended: {counts}"))  # fmt: skip
        return out

    def _node_run(self, run: core.FlowRun, item: core.Start, spec: FlowNode) -> Send:
        now = utc_now()
        request = RunRequest(
            run_id=item.run_id, job_id=run.flow_id, tenant=run.tenant,
            scheduled_at=from_ms(run.scheduled_ms), fired_at=now, trigger=Trigger.FLOW,
            possible_duplicate=item.possible_duplicate, target=spec.target, payload=spec.payload,
            priority=spec.priority, timeout_ms=spec.timeout_ms, retry=spec.retry,
        )  # fmt: skip
        topic = self.topics.runs(spec.priority)
        return topic, run.flow_id, self.codec.encode(topic, request), request.headers()

    def _record(self, flow_id: str, run_id: str, scheduled_ms: int, tenant: str,
                status: RunStatus, error: str) -> Send:  # fmt: skip
        outcome = RunOutcome(
            run_id=run_id, job_id=flow_id, tenant=tenant, status=status,
            scheduled_at=from_ms(scheduled_ms), recorded_at=utc_now(), trigger=Trigger.FLOW,
            error=error, worker=FLOWS_APP,
        )  # fmt: skip
        topic = self.topics.history
        return topic, flow_id, self.codec.encode(topic, outcome), outcome.headers()


class _Runner:
    """The agent's body, a batch of events at a time."""

    def __init__(
        self, coordinator: Coordinator, codec: Codec, table: Any, out: Any,
        crash: Callable[[BaseException], Awaitable[None]] | None = None,
    ) -> None:  # fmt: skip
        self.coordinator, self.codec, self.table, self.out = coordinator, codec, table, out
        self.faults = RecordFaults(STAGE)
        self.crash = crash  # the app's: a RepeatedFault stops the process (``_stop``)

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

    async def _step(self, rows: JsonRows, faust_event: Any) -> list[Send]:
        """Decode, wait a moment for an unknown flow, step. An event the step raises on
        changes no row and is dead-lettered with the error (``runtime.faults``)."""
        try:
            event = self.codec.decode(faust_event.value, FlowEvent)
        except DecodeError as exc:
            log.warning("flow event unreadable, skipped: %s", exc)
            return []
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
            message = faust_event.message
            fault = self.faults.fault(exc, topic=message.tp[0], partition=message.tp[1],
                                      offset=message.offset, key=message.key,
                                      tenant=event.tenant)  # fmt: skip
            letter = fault.letter(STAGE, value=faust_event.value, job_id=event.flow_id,
                                  run_id=event.run_id or event.flow_run_id)  # fmt: skip
            dlq = self.coordinator.topics.dlq
            return [(dlq, letter.key(), self.codec.encode(dlq, letter), letter.headers())]
        self.faults.ok()
        own.apply()
        return sends


def _credentials(settings: Settings) -> Any:
    security = aiokafka_security(settings)
    if not security:
        return None
    return faust.SASLCredentials(
        username=security["sasl_plain_username"], password=security["sasl_plain_password"],
        mechanism="SCRAM-SHA-512", ssl_context=security["ssl_context"],
    )  # fmt: skip


def build_app(settings: Settings) -> tuple[faust.App, Definitions]:
    """The coordinator's faust app (run it with ``faust.Worker``)."""
    topics = Topics(settings)
    codec = Codec(registry_client(settings))
    writes = ((topics.history, RunOutcome), (topics.control, ControlCommand),
              (topics.alerts, Alert), (topics.dlq, DeadLetter),
              *((topics.runs(p), RunRequest) for p in Priority))  # fmt: skip
    for name, event_type in writes:
        codec.writer_id(f"{name}-value", event_type)
    definitions = Definitions(settings, Codec(registry_client(settings)))  # its own client
    coordinator = Coordinator(settings, codec, definitions)
    # faust makes only the last directory of it (the first start on a host failed)
    datadir = settings.home / "faust" / f"{settings.topic_prefix}.{FLOWS_APP}"
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = SeekingApp(
        f"{settings.topic_prefix}.{FLOWS_APP}", broker=f"kafka://{settings.bootstrap_servers}",
        broker_credentials=_credentials(settings), web_enabled=False, store="memory://",
        # Under the stack's home: faust's default is "<app id>-data" in the working
        # directory (a read-only image in a pod; the repository's root under make test).
        datadir=str(datadir),
        processing_guarantee="at_least_once", topic_allow_declare=False,
        topic_partitions=settings.partitions, topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        # A killed coordinator's partitions move after this, not faust's default 60 s.
        broker_session_timeout=SESSION_TIMEOUT_S, broker_heartbeat_interval=3.0,
        Table=Rows,
    )  # fmt: skip

    def raw(name: str) -> Any:
        return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw",
                         value_serializer="raw")  # fmt: skip

    out = {name: raw(name) for name, _ in writes}
    # Rows are JSON text: faust's json codec turns a dict value_type into a model it
    # cannot restore ("type object 'dict' has no attribute 'from_data'").
    table = app.Table(FLOWS_TABLE, default=None, key_type=str, value_type=str,
                      partitions=settings.partitions)  # fmt: skip

    runner = _Runner(coordinator, codec, table, out, crash=app.crash)

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
