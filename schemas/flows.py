"""Flows: named DAGs of nodes (``cronstream.FlowDefinition``; ``producers.flows`` checks a
definition is a DAG, ``streams.core.flow`` runs one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from cronstream.schemas.avro import AvroRecord
from cronstream.schemas.events import Concurrency, Priority, RetryPolicy, Target
from cronstream.schemas.headers import record_headers


class FlowTriggerRule(StrEnum):
    """When a flow node runs once every node it comes after has ended."""

    ALL_SUCCESS = "ALL_SUCCESS"  # each succeeded (otherwise: UPSTREAM_FAILED)
    ALL_DONE = "ALL_DONE"  # whatever they ended with
    ANY_FAILED = "ANY_FAILED"  # one failed (a cleanup node; otherwise: SKIPPED)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowNode(AvroRecord):
    name: str
    target: Target
    payload: str | None = None
    priority: Priority = Priority.NORMAL
    timeout_ms: int = 30_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    after: tuple[str, ...] = ()
    trigger_rule: FlowTriggerRule = FlowTriggerRule.ALL_SUCCESS


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowDefinition(AvroRecord):
    AVRO_NAME: ClassVar[str] = "cronstream.FlowDefinition"

    flow_id: str
    nodes: tuple[FlowNode, ...]
    updated_at: datetime
    tenant: str = "default"
    concurrency: Concurrency = Concurrency.ALLOW

    def key(self) -> str:
        return self.flow_id

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "FlowDefinition", ("flow_id", self.flow_id), ("nodes", str(len(self.nodes)))
        )


class FlowEventKind(StrEnum):
    START = "START"
    OUTCOME = "OUTCOME"
    RERUN = "RERUN"
    DEADLINE = "DEADLINE"  # the flow run's deadline came (``at``): the coordinator checks it


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowEvent(AvroRecord):
    """What the flows coordinator acts on (``cronstream.flows.events``, key flow id)."""

    AVRO_NAME: ClassVar[str] = "cronstream.FlowEvent"

    flow_id: str
    flow_run_id: str
    kind: FlowEventKind
    scheduled_at: datetime
    at: datetime
    tenant: str = "default"
    run_id: str | None = None
    status: str | None = None
    retrying: bool = False
    error: str | None = None

    def key(self) -> str:
        return self.flow_id

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "FlowEvent",
            ("kind", self.kind.value),
            ("flow_id", self.flow_id),
            ("flow_run_id", self.flow_run_id),
            run_id=self.run_id,
            status=self.status,
        )
