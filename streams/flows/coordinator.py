"""The flows coordinator's decisions (``Coordinator.handle``): one flow event, the
table rows it reads (its flow run's; under a concurrency policy the flow's ``Active``
and the runs it queues, starts or cancels) in, the rows it changes and the records to
send out: node run requests to ``runs.<priority>``, to ``history`` the nodes decided
without running (UPSTREAM_FAILED, SKIPPED) and the flow run's end, cancel commands to
``control``, deadline alerts to ``alerts``. Each flow run moves through the pure core
``streams.core.flow``; the rows are JSON (``streams.flows.rows``). No faust here: the
app that feeds it events and writes what it decides is ``streams.flows.app``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from cronstream.runtime.settings import Settings
from cronstream.schemas.alerts import AlertKind, deadline_alert
from cronstream.schemas.catalog import FLOWS_APP, Topics
from cronstream.schemas.events import (
    Concurrency,
    ControlAction,
    ControlCommand,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
    execution,
    from_ms,
    to_ms,
    utc_now,
)
from cronstream.schemas.flows import FlowDefinition, FlowEvent, FlowEventKind, FlowNode
from cronstream.schemas.serde import Codec
from cronstream.streams.core import flow as core
from cronstream.streams.flows.rows import JsonRows

log = logging.getLogger("cronstream.flows")

Send = tuple[str, str, bytes, Any]  # (topic, key, value, headers)


def _nodes(definition: FlowDefinition) -> list[core.Node]:
    return [core.Node(n.name, n.after, n.trigger_rule.value) for n in definition.nodes]


def _ended(row: Mapping[str, Any]) -> bool:
    return row["status"] not in core.GOING


class KnownFlows(Protocol):
    """What the coordinator asks of its flow definitions (``streams.flows.definitions.
    Definitions`` is one, following the flows topic; unit tests pass a fixed dict): the
    definition of a flow id, read only."""

    @property
    def flows(self) -> Mapping[str, FlowDefinition]: ...


class Coordinator:
    """One event at a time: the table row in, the row and what to send out."""

    def __init__(self, settings: Settings, codec: Codec, definitions: KnownFlows) -> None:
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
                    sends.append(
                        self._alert(
                            event.flow_id,
                            key,
                            new_row["scheduled_ms"],
                            new_row["tenant"],
                            new_row["alerted"],
                            "SUCCEEDED",
                            AlertKind.DEADLINE_CLEARED,
                        )
                    )
        return sends

    def _deadline(self, rows: JsonRows, event: FlowEvent, row: dict[str, Any] | None) -> list[Send]:
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
        return [
            self._alert(
                event.flow_id,
                event.flow_run_id,
                slot,
                event.tenant,
                deadline_ms,
                status,
                AlertKind.DEADLINE_MISSED,
            )
        ]

    def _alert(
        self,
        flow_id: str,
        run_id: str,
        scheduled_ms: int,
        tenant: str,
        deadline_ms: int,
        status: str,
        kind: AlertKind,
    ) -> Send:
        alert = deadline_alert(
            kind,
            job_id=flow_id,
            run_id=run_id,
            tenant=tenant,
            scheduled_at=from_ms(scheduled_ms),
            deadline_at=from_ms(deadline_ms),
            raised_at=utc_now(),
            last_status=status,
            worker=FLOWS_APP,
        )
        topic = self.topics.alerts
        return topic, flow_id, self.codec.encode(topic, alert), alert.headers()

    def _admit(self, rows: JsonRows, event: FlowEvent, definition: FlowDefinition) -> list[Send]:
        """A new run of a flow with a concurrency policy."""
        key, active_key = event.flow_run_id, core.active_key(event.flow_id)
        active = core.Active.from_record(rows.get(active_key))
        policy = definition.concurrency
        verdict = active.admit(policy.value, key)
        slot, sends = to_ms(event.scheduled_at), []
        if verdict in ("skip", "queue"):
            status = "SKIPPED" if verdict == "skip" else "QUEUED"
            run, _ = core.start(
                event.flow_id,
                key,
                _nodes(definition),
                scheduled_ms=slot,
                tenant=event.tenant,
                status=status,
            )
            rows[key] = core.to_record(run)
            if verdict == "skip":
                return [
                    self._record(
                        event.flow_id,
                        key,
                        slot,
                        event.tenant,
                        RunStatus.SKIPPED,
                        f"flow run {active.running[0]} is still running (concurrency forbid)",
                    )
                ]
            active.queued.append(key)
            rows[active_key] = active.to_record()
            return []
        if verdict == "replace":
            for old_id in [*active.running, *active.queued]:
                sends += self._cancel(
                    rows, old_id, f"replaced by flow run {key} (concurrency replace)"
                )
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
                command_id=f"{node_run}:replaced",
                action=ControlAction.CANCEL,
                run_id=node_run,
                job_id=run.flow_id,
                issued_at=utc_now(),
                reason=reason,
            )
            topic = self.topics.control
            out.append((topic, node_run, self.codec.encode(topic, command), command.headers()))
        out.append(
            self._record(
                run.flow_id,
                run_id,
                run.scheduled_ms,
                run.tenant,
                RunStatus.CANCELED,
                f"flow run {reason}",
            )
        )
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

    def step(
        self, row: dict[str, Any] | None, event: FlowEvent
    ) -> tuple[dict[str, Any] | None, list[Send]]:
        """One flow run's row and one event: (the new row, records to send: (topic, key,
        value, headers))."""
        if row is None:
            if event.kind is not FlowEventKind.START:
                return None, []  # an outcome or rerun of a run this coordinator never started
            definition = self.definitions.flows.get(event.flow_id)
            if definition is None:
                slot = to_ms(event.scheduled_at)
                return None, [
                    self._record(
                        event.flow_id,
                        event.flow_run_id,
                        slot,
                        event.tenant,
                        RunStatus.FAILED,
                        f"no flow {event.flow_id!r} is defined",
                    )
                ]
            run, starts = core.start(
                event.flow_id,
                event.flow_run_id,
                _nodes(definition),
                scheduled_ms=to_ms(event.scheduled_at),
                tenant=event.tenant,
            )
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
                node_run, status = event.run_id or "", event.status or ""
                replay = core.seen(run, node_run, status, retrying=event.retrying)
                starts = core.settle(run, node_run, status, retrying=event.retrying)
                if replay:
                    # Its row was written before its sends: they may have been lost with
                    # the coordinator that wrote it. Everything the run recorded, again.
                    return row, self._sends(run, starts, {})
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

    def _sends(
        self, run: core.FlowRun, starts: list[core.Start], before: dict[str, core.NodeState]
    ) -> list[Send]:
        specs = self._specs(run.flow_id)
        out = []
        for item in starts:
            spec = specs.get(item.node)
            if spec is None:  # the definition changed or went: the node cannot run
                out.append(
                    self._record(
                        run.flow_id,
                        item.run_id,
                        run.scheduled_ms,
                        run.tenant,
                        RunStatus.FAILED,
                        f"node {item.node!r} is no longer in the flow's definition",
                    )
                )
                continue
            out.append(self._node_run(run, item, spec))
        for name, state in run.states.items():
            if (
                state in (core.NodeState.UPSTREAM_FAILED, core.NodeState.SKIPPED)
                and before.get(name) is not state
            ):
                status = RunStatus(state.value)
                why = (
                    "a node it comes after failed"
                    if status is RunStatus.UPSTREAM_FAILED
                    else "no node it comes after failed (trigger any_failed)"
                )
                run_id = core.node_run_id(run.run_id, name, run.generation)
                out.append(
                    self._record(run.flow_id, run_id, run.scheduled_ms, run.tenant, status, why)
                )
        if run.ended and (not before or any(s not in core.ENDED for s in before.values())):
            counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(core.summary(run).items()))
            ended = RunStatus(run.status)
            out.append(
                self._record(
                    run.flow_id,
                    run.run_id,
                    run.scheduled_ms,
                    run.tenant,
                    ended,
                    f"flow run ended: {counts}",
                )
            )
        return out

    def _node_run(self, run: core.FlowRun, item: core.Start, spec: FlowNode) -> Send:
        now = utc_now()
        request = RunRequest(
            run_id=item.run_id,
            job_id=run.flow_id,
            tenant=run.tenant,
            scheduled_at=from_ms(run.scheduled_ms),
            fired_at=now,
            trigger=Trigger.FLOW,
            possible_duplicate=item.possible_duplicate,
            **execution(spec),
        )
        topic = self.topics.runs(spec.priority)
        return topic, run.flow_id, self.codec.encode(topic, request), request.headers()

    def _record(
        self,
        flow_id: str,
        run_id: str,
        scheduled_ms: int,
        tenant: str,
        status: RunStatus,
        error: str,
    ) -> Send:
        outcome = RunOutcome(
            run_id=run_id,
            job_id=flow_id,
            tenant=tenant,
            status=status,
            scheduled_at=from_ms(scheduled_ms),
            recorded_at=utc_now(),
            trigger=Trigger.FLOW,
            error=error,
            worker=FLOWS_APP,
        )
        topic = self.topics.history
        return topic, flow_id, self.codec.encode(topic, outcome), outcome.headers()
