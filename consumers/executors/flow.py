"""`flow` targets: a flow's schedule came due, or the flow was triggered. The run starts
a flow run: a FlowEvent START on ``flows.events`` (key: the flow id, the job's id) for
the flows coordinator, which starts the flow's root nodes. The run succeeds once the
broker acknowledged the event; a repeat of it (a redelivery, a retry) names the same
flow run, which the coordinator starts once. It leaves no output (docs/run-output.md):
what a flow run did is its node runs' (``cronstream history --flow-run``)."""

from __future__ import annotations

from collections.abc import Callable

from cronstream.consumers.errors import ExecutionFailed
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.kafka import deliver
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.runtime.kafka.clients import Producer
from cronstream.schemas.events import Target, utc_now
from cronstream.schemas.flows import FlowEvent, FlowEventKind


def executor(setup: ExecutorSetup) -> FlowExecutor:
    """The worker's flow executor (declared by ``schemas.targets.flow``)."""
    topic = setup.topics.flow_events
    return FlowExecutor(setup.producer, topic, lambda event: setup.encode(topic, event))


class FlowExecutor:
    kind = "flow"

    def __init__(self, producer: Producer, topic: str, encode: Callable[[FlowEvent], bytes]):
        self.producer = producer
        self.topic = topic
        self.encode = encode

    def execute(self, target: Target, context: RunContext) -> None:
        event = FlowEvent(
            flow_id=context.job_id,
            flow_run_id=context.run_id,
            kind=FlowEventKind.START,
            scheduled_at=context.scheduled_at,
            at=utc_now(),
            tenant=context.tenant,
        )
        err, _ = deliver(
            self.producer,
            self.topic,
            context,
            key=event.flow_id.encode(),
            value=self.encode(event),
            headers=event.headers(),
        )
        if err is not None:
            raise ExecutionFailed(f"the flow run's start was not delivered: {err.str()}")
