"""Fuzz: the flows coordinator steps any sequence of schema-valid flow events,
however hostile (unknown runs and nodes, strange statuses, reruns and deadlines out of
order), without raising, dead-lettering or counting a record fault."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronstream.producers.flows import flow_from_spec
from cronstream.schemas.events import DeadLetter
from cronstream.schemas.flows import FlowEvent
from tests.hostile import FLOW_EVENTS, FUZZ
from tests.processors import TOPICS, FlowsHarness

ETL = flow_from_spec(
    {
        "id": "etl",
        "concurrency": "queue",
        "nodes": [
            {"name": "a", "target": "python", "callable": "m:f"},
            {"name": "b", "after": ["a"], "target": "python", "callable": "m:g"},
            {
                "name": "c",
                "after": ["a", "b"],
                "trigger": "any_failed",
                "target": "python",
                "callable": "m:h",
            },
        ],
    },
    max_payload_bytes=65536,
)


@pytest.fixture(autouse=True)
def no_wait_for_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cronstream.streams.flows.app.DEFINITION_WAIT_S", 0.0)


@FUZZ
@given(st.lists(FLOW_EVENTS, min_size=1, max_size=6))
def test_hostile_flow_events_are_stepped_without_a_fault(events: list[FlowEvent]) -> None:
    h = FlowsHarness(ETL)
    h.handle(*(h.codec.encode(TOPICS.flow_events, e) for e in events))
    assert h.runner.faults.streak == 0, [x.reason for x in h.on(TOPICS.dlq, DeadLetter)]
    assert h.on(TOPICS.dlq, DeadLetter) == []
