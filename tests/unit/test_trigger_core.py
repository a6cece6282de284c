"""Event triggers' core (streams.core.triggers): which records run a job, under which run
id and payload; debounce and batch on record time; the checkpoint; and, over random
streams with a crash anywhere, that each matching record is in exactly one run and a run
emitted twice is the same run."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.schemas.definition.matching import MISSING, Record
from cronstream.schemas.errors import FilterError
from cronstream.schemas.events import EventTrigger, JobDefinition, Target
from cronstream.streams.core.payloads import MAX_GROUP_TEXT, group_of, jsonable
from cronstream.streams.core.triggers import (
    MAX_OPEN_BATCHES,
    Checkpoint,
    EventRun,
    PartitionTrigger,
    Refused,
    Rule,
    rule_of,
    source_record,
)

EXAMPLES = int(os.environ.get("CRONSTREAM_HYPOTHESIS_EXAMPLES", "200"))
LIMIT = 64 * 1024
T0 = 1_764_000_000_000


def rule(**on: Any) -> Rule:
    job = JobDefinition(
        job_id="j",
        target=Target(type="http"),
        updated_at=datetime.now(UTC),
        on=EventTrigger(topic="orders", **on),
    )
    return rule_of(job)


def order(
    offset: int, *, at: int = 0, amount: int = 150, customer: str = "c1", key: bytes | None = b"k"
) -> Record:
    return source_record(
        topic="orders",
        partition=3,
        offset=offset,
        timestamp_ms=T0 + at,
        key=key,
        headers=[("source", b"web")],
        value={"amount": amount, "customer": {"id": customer}},
    )


def feed(trigger: PartitionTrigger, records: list[Record]) -> list[Any]:
    return [d for r in records for d in trigger.step(r)]


def ids(decisions: list[Any]) -> list[str]:
    return [d.run_id for d in decisions if isinstance(d, EventRun)]


def test_a_matching_record_runs_under_its_coordinates_with_the_record_as_payload() -> None:
    trigger = PartitionTrigger(rule(filter="value.amount > 100"), 3, max_payload_bytes=LIMIT)
    runs = feed(trigger, [order(0, amount=5), order(1, at=7), order(2, amount=100), order(3)])
    assert ids(runs) == ["j@evt:orders:3:1", "j@evt:orders:3:3"]
    assert runs[0].scheduled_ms == T0 + 7
    assert json.loads(runs[0].payload) == {
        "topic": "orders",
        "partition": 3,
        "offset": 1,
        "timestamp": T0 + 7,
        "key": "k",
        "headers": {"source": "web"},
        "value": {"amount": 150, "customer": {"id": "c1"}},
    }
    assert (runs[0].records, runs[0].possible_duplicate) == (1, False)


def test_payload_fields_take_the_named_paths_and_null_for_none() -> None:
    trigger = PartitionTrigger(
        rule(
            payload_fields={
                "who": "value.customer.id",
                "src": 'headers["source"]',
                "gone": "value.nope",
                "k": "key",
            }
        ),
        3,
        max_payload_bytes=LIMIT,
    )
    (run,) = trigger.step(order(0))
    assert isinstance(run, EventRun)
    assert run.payload == '{"who":"c1","src":"web","gone":null,"k":"k"}'


def test_a_record_read_again_after_a_restore_runs_nothing_new() -> None:
    trigger = PartitionTrigger(rule(), 3, max_payload_bytes=LIMIT)
    first = feed(trigger, [order(i) for i in range(5)])
    point = trigger.checkpoint()
    assert point.resume_offset == 5
    again = PartitionTrigger(rule(), 3, max_payload_bytes=LIMIT, checkpoint=point)
    # the processor commits the lowest offset of every trigger of the topic: it may
    # read from further back than this trigger's own resume offset
    assert feed(again, [order(i) for i in range(7)]) == [
        EventRun(
            run_id="j@evt:orders:3:5",
            scheduled_ms=T0,
            payload=first[0].payload.replace('"offset":0', '"offset":5'),
        ),
        EventRun(
            run_id="j@evt:orders:3:6",
            scheduled_ms=T0,
            payload=first[0].payload.replace('"offset":0', '"offset":6'),
        ),
    ]


def test_runs_read_again_up_to_the_replay_mark_are_flagged_possible_duplicates() -> None:
    trigger = PartitionTrigger(rule(), 3, max_payload_bytes=LIMIT, replay_until=2)
    runs = feed(trigger, [order(i) for i in range(3)])
    assert [r.possible_duplicate for r in runs] == [True, True, False]


@pytest.mark.parametrize(
    ("times", "runs_at"),
    [
        ([0, 1, 9_999, 10_000, 10_001, 25_000], [0, 10_000, 25_000]),
        ([0, 20_000, 20_001], [0, 20_000]),
        ([5_000, 1_000, 14_999, 15_000], [5_000, 15_000]),  # a late stamp counts at the clock
    ],
)
def test_debounce_runs_the_first_record_of_each_window(
    times: list[int], runs_at: list[int]
) -> None:
    trigger = PartitionTrigger(rule(debounce_ms=10_000), 3, max_payload_bytes=LIMIT)
    runs = feed(trigger, [order(i, at=t) for i, t in enumerate(times)])
    assert [r.scheduled_ms - T0 for r in runs] == runs_at
    assert ids(runs)[0] == "j@evt:orders:3:0"


def test_debounce_by_key_keeps_a_window_per_group() -> None:
    trigger = PartitionTrigger(
        rule(debounce_ms=10_000, key="value.customer.id"), 3, max_payload_bytes=LIMIT
    )
    records = [
        order(0, customer="a"),
        order(1, customer="b"),
        order(2, at=5, customer="a"),
        order(3, at=6, customer="c"),
        order(4, at=11_000, customer="a"),
    ]
    assert ids(feed(trigger, records)) == [
        "j@evt:orders:3:0",
        "j@evt:orders:3:1",
        "j@evt:orders:3:3",
        "j@evt:orders:3:4",
    ]


def test_debounce_windows_outlive_a_restore_and_ended_ones_are_forgotten() -> None:
    trigger = PartitionTrigger(
        rule(debounce_ms=10_000, key="value.customer.id"), 3, max_payload_bytes=LIMIT
    )
    feed(trigger, [order(0, customer="a"), order(1, at=8_000, customer="b")])
    point = trigger.checkpoint()
    assert point.windows == (('"a"', T0 + 10_000), ('"b"', T0 + 18_000))
    again = PartitionTrigger(
        trigger.rule,
        3,
        max_payload_bytes=LIMIT,
        checkpoint=Checkpoint.from_json(json.loads(json.dumps(point.to_json()))),
    )
    assert ids(
        feed(
            again,
            [
                order(2, at=9_000, customer="a"),
                order(3, at=12_000, customer="b"),
                order(4, at=12_000, customer="a"),
            ],
        )
    ) == ["j@evt:orders:3:4"]
    assert again.checkpoint().windows == (('"a"', T0 + 22_000), ('"b"', T0 + 18_000))
    again.step(order(5, at=19_000, customer="a"))  # in a's window: the clock moves
    assert [g for g, _ in again.checkpoint().windows] == ['"a"']


def test_a_batch_runs_per_n_records_named_by_its_first() -> None:
    trigger = PartitionTrigger(
        rule(batch=3, filter="value.amount > 100", payload_fields={"o": "offset"}),
        3,
        max_payload_bytes=LIMIT,
    )
    records = [order(i, at=i, amount=150 if i % 2 else 0) for i in range(12)]
    runs = feed(trigger, records)
    assert ids(runs) == ["j@evt:orders:3:1", "j@evt:orders:3:7"]
    assert runs[0].payload == '{"count":3,"records":[{"o":1},{"o":3},{"o":5}]}'
    assert (runs[0].records, runs[0].scheduled_ms) == (3, T0 + 1)
    assert trigger.checkpoint().resume_offset == 12  # no batch open: 1, 3, 5 | 7, 9, 11


def test_an_open_batch_holds_the_resume_offset_and_is_read_again() -> None:
    trigger = PartitionTrigger(rule(batch=2, key="value.customer.id"), 3, max_payload_bytes=LIMIT)
    records = [
        order(0, customer="a"),
        order(1, customer="b"),
        order(2, customer="b"),
        order(3, customer="c"),
        order(4, customer="a"),
    ]
    assert ids(feed(trigger, records)) == ["j@evt:orders:3:1", "j@evt:orders:3:0"]
    point = trigger.checkpoint()  # c's batch (3) is open: read again from there
    assert (point.resume_offset, point.through) == (3, (('"a"', 4),))
    again = PartitionTrigger(trigger.rule, 3, max_payload_bytes=LIMIT, checkpoint=point)
    more = [*records, order(5, customer="a"), order(6, customer="c")]
    assert ids(feed(again, more)) == ["j@evt:orders:3:3"]  # c: 3 and 6; a: 5 opens a batch


def test_a_batch_closes_early_at_the_payload_limit() -> None:
    trigger = PartitionTrigger(
        rule(batch=100, payload_fields={"o": "offset"}), 3, max_payload_bytes=60
    )
    (run,) = feed(trigger, [order(i) for i in range(8)])  # a 5th item would make 63 bytes
    assert (run.run_id, run.records) == ("j@evt:orders:3:0", 4)
    assert len(run.payload) == 55
    assert trigger.checkpoint().resume_offset == 4  # 4..7 fill the next batch


def test_an_oversized_record_is_refused_and_the_partition_goes_on() -> None:
    trigger = PartitionTrigger(rule(), 3, max_payload_bytes=200)
    big = replace(order(1), value={"blob": "x" * 500})
    decisions = feed(trigger, [order(0), big, order(2)])
    assert isinstance(decisions[1], Refused)
    assert decisions[1].offset == 1
    assert "over the 200-byte limit" in decisions[1].reason
    assert ids(decisions) == ["j@evt:orders:3:0", "j@evt:orders:3:2"]
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    (refused,) = trigger.step(replace(order(3), value=deep))
    assert isinstance(refused, Refused)
    assert "nested too deeply" in refused.reason


def test_source_records_decode_key_and_headers_as_text() -> None:
    record = source_record(
        topic="t",
        partition=0,
        offset=0,
        timestamp_ms=-1,
        key=b"\xff",
        headers=[("h", b"1"), ("h", b"2"), ("n", None), ("bad", b"\xfe")],
    )
    assert record.key is MISSING
    assert dict(record.headers) == {"h": "2", "n": None, "bad": MISSING}
    assert record.value is MISSING
    (run,) = PartitionTrigger(rule(), 0, max_payload_bytes=LIMIT).step(record)
    assert isinstance(run, EventRun)
    assert run.scheduled_ms == 0  # no timestamp (-1): the epoch
    assert json.loads(run.payload)["key"] is None


def test_decoded_values_become_json_without_loss() -> None:
    when = datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert jsonable(
        {"d": Decimal("19.90"), "b": b"\x00\xff", "t": when, "n": float("nan"), 1: (1, 2)}
    ) == {"d": "19.90", "b": "AP8=", "t": when.isoformat(), "n": None, "1": [1, 2]}


def test_groups_tell_kinds_apart_and_keep_long_keys_short() -> None:
    key = rule(batch=2, key="value.g").key
    at = [replace(order(0), value={"g": g}) for g in (1, "1", None, "x" * 500)]
    groups = [group_of(key, r) for r in at]
    assert groups[:3] == ["1", '"1"', "null"]
    assert groups[3].startswith("#")
    assert len(groups[3]) <= MAX_GROUP_TEXT
    assert group_of(key, replace(order(0), value={})) == "-"


def test_a_trigger_whose_filter_does_not_parse_is_refused_when_loaded() -> None:
    with pytest.raises(FilterError):
        rule(filter="value.a ==")
    with pytest.raises(ValueError, match="no event trigger"):
        rule_of(JobDefinition(job_id="j", target=Target(type="http"), updated_at=datetime.now(UTC)))


def test_too_many_open_batches_close_the_oldest_early() -> None:
    trigger = PartitionTrigger(rule(batch=5, key="value.customer.id"), 3, max_payload_bytes=LIMIT)
    runs = feed(trigger, [order(i, customer=str(i)) for i in range(MAX_OPEN_BATCHES + 1)])
    assert [(r.run_id, r.records) for r in runs] == [("j@evt:orders:3:0", 1)]


# -- a crash anywhere -----------------------------------------------------------------
MODES = [
    {},
    {"debounce_ms": 3},
    {"debounce_ms": 4, "key": "value.g"},
    {"batch": 3},
    {"batch": 2, "key": "value.g"},
    {"batch": 4, "key": "value.g", "filter": "value.m"},
]
streams = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), st.booleans()),
    max_size=60,
).map(
    lambda rows: [
        source_record(
            topic="orders",
            partition=0,
            offset=i,
            timestamp_ms=sum(r[0] for r in rows[: i + 1]),
            key=None,
            value={"g": g, "m": m, "i": i},
        )
        for i, (_, g, m) in enumerate(rows)
    ]
)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: ",".join(m) or "each")
@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(records=streams, data=st.data())
def test_crashes_anywhere_run_each_record_once_and_re_emit_the_same_runs(
    mode: dict[str, Any], records: list[Record], data: st.DataObject
) -> None:
    """Uninterrupted vs. up to three crashes: each time the trigger checkpoints after
    some records, reads on, dies, and a new one restores the checkpoint and reads from
    its resume offset. The same runs (by id, each with one payload), no record in two."""
    one = rule(payload_fields={"i": "value.i"}, **mode)
    whole = {r.run_id: r for r in feed(PartitionTrigger(one, 0, max_payload_bytes=LIMIT), records)}
    trigger, position, emitted = PartitionTrigger(one, 0, max_payload_bytes=LIMIT), 0, []
    for _ in range(data.draw(st.integers(0, 3))):
        saved = data.draw(st.integers(position, len(records)))
        crash = data.draw(st.integers(saved, len(records)))
        emitted += feed(trigger, records[position:saved])
        point = trigger.checkpoint()
        emitted += feed(trigger, records[saved:crash])
        trigger = PartitionTrigger(
            one, 0, max_payload_bytes=LIMIT, checkpoint=point, replay_until=crash
        )
        position = point.resume_offset
    emitted += feed(trigger, records[position:])
    seen: dict[str, EventRun] = {}
    for run in emitted:
        assert seen.setdefault(run.run_id, run).payload == run.payload
    assert set(seen) == set(whole)
    covered = [item["i"] for run in seen.values() for item in _items(run.payload)]
    assert len(covered) == len(set(covered))  # no record in two runs


def _items(payload: str) -> list[dict[str, Any]]:
    data = json.loads(payload)
    return data.get("records", [data])  # type: ignore[no-any-return]
