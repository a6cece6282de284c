"""A flow's nodes run as runs (trigger FLOW, run id ``FLOW@<slot>/NODE``): each attempt's
end, and the flow's deadline check, go to the flows coordinator (``streams.flows.app``) on
``flows.events``, keyed by the flow id."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cronstream.consumers.worker.observers import Record
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import RunRequest, RunStatus, Trigger, from_ms
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.tenancy import AnyEvent


class FlowNodes:
    """The ``OutcomeObserver`` of flows."""

    def __init__(self, topics: Topics) -> None:
        self.topic = topics.flow_events

    def written(self) -> Sequence[tuple[str, type[AnyEvent]]]:
        return [(self.topic, FlowEvent)]

    def settled(
        self,
        run: RunRequest,
        status: RunStatus,
        error: str | None,
        *,
        retrying: bool,
        now_ms: int,
    ) -> Sequence[Record]:
        """A flow node's attempt ending: an OUTCOME event (a retry that follows too)."""
        if run.trigger is not Trigger.FLOW:
            return ()
        event = FlowEvent(
            flow_id=run.job_id,
            flow_run_id=run.run_id.rpartition("/")[0],
            kind=FlowEventKind.OUTCOME,
            scheduled_at=run.scheduled_at,
            at=from_ms(now_ms),
            tenant=run.tenant,
            run_id=run.run_id,
            status=status.value,
            retrying=retrying,
            error=error[:2000] if error else None,
        )
        return [(self.topic, event)]

    def checked(self, check: RunRequest, *, running: bool, now_ms: int) -> Sequence[Record]:
        """A flow's deadline check: a DEADLINE event. The coordinator knows how the flow
        run (not its start, which succeeded at once) is doing."""
        if check.target.type != "flow":
            return ()
        event = FlowEvent(
            flow_id=check.job_id,
            flow_run_id=check.run_id,
            kind=FlowEventKind.DEADLINE,
            scheduled_at=check.scheduled_at,
            at=check.fired_at,
            tenant=check.tenant,
        )
        return [(self.topic, event)]

    def forget(self, before: datetime) -> None:
        """Nothing kept."""
