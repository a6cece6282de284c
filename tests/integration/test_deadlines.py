"""Deadlines on the real stack: a scheduler fires one-time jobs with a deadline and the
checks at slot + deadline; the worker owning each job's partition answers them with
alerts on cronstream.alerts."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from cronstream.producers.client import JobClient
from cronstream.producers.flows import flow_from_spec, flow_schedule
from cronstream.runtime.settings import Settings
from cronstream.schemas.alerts import Alert
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import iso, utc_now
from tests.integration.helpers import CronstreamProcess, decoded

pytestmark = pytest.mark.integration


def _alerts(ns: Settings) -> list[Alert]:
    return decoded(ns, Topics(ns).alerts, Alert)


def test_a_missed_deadline_raises_one_alert_cleared_when_the_run_succeeds_late(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    for name, command, ready in (("s", "scheduler", " live: "), ("w", "worker", "assigned")):
        proc = CronstreamProcess(ns, tmp_path, name, command=command)
        procs.append(proc)
        proc.wait_live(1, text=ready, timeout=120)
    start = utc_now() + timedelta(seconds=4)
    specs = [
        # works 3 s: running at its deadline, then succeeds: late, then cleared
        {
            "id": "late",
            "callable": "examples.tasks:slow",
            "payload": {"seconds": 3},
            "deadline": "1s",
        },
        # dead-lettered at once: missed, never cleared
        {"id": "never", "callable": "examples.tasks:hopeless", "max_attempts": 1, "deadline": "1s"},
        # succeeds at once: no alert
        {"id": "ontime", "callable": "examples.tasks:send_digest", "deadline": "5s"},
    ]
    with JobClient(ns) as client:
        for spec in specs:
            client.put(
                job_from_spec(
                    {**spec, "at": iso(start), "target": "python"}, max_payload_bytes=65536
                )
            )
    deadline = time.monotonic() + 90
    while True:
        alerts = _alerts(ns)
        kinds = sorted((a.job_id, a.kind.value) for a in alerts)
        if ("late", "DEADLINE_CLEARED") in kinds or time.monotonic() > deadline:
            break
        time.sleep(1)
    # the on-time job's check (slot + 5 s) is answered by then
    time.sleep(max(0.0, (start - utc_now()).total_seconds() + 8))
    alerts = _alerts(ns)
    assert sorted((a.job_id, a.kind.value) for a in alerts) == [
        ("late", "DEADLINE_CLEARED"),
        ("late", "DEADLINE_MISSED"),
        ("never", "DEADLINE_MISSED"),
    ]
    by = {(a.job_id, a.kind.value): a for a in alerts}
    missed, cleared = by[("late", "DEADLINE_MISSED")], by[("late", "DEADLINE_CLEARED")]
    assert missed.last_status == "RUNNING"
    assert missed.alert_id == cleared.alert_id == f"{missed.run_id}:deadline"
    assert missed.deadline_at == missed.scheduled_at + timedelta(seconds=1)
    assert 0 <= missed.late_ms < 5000
    assert cleared.last_status == "SUCCEEDED"
    assert cleared.late_ms > missed.late_ms  # succeeded about 2 s after its deadline
    assert cleared.attempt == 1
    assert by[("never", "DEADLINE_MISSED")].last_status == "DEAD_LETTERED"


def test_a_flow_run_past_its_deadline_raises_one_alert_cleared_when_it_ends(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    for name, command, ready, *more in (
        ("s", "scheduler", " live: "),
        ("w", "worker", "assigned"),
        ("c", "flows-coordinator", "Ready", "--log-level", "INFO"),
    ):
        proc = CronstreamProcess(ns, tmp_path, name, *more, command=command)
        procs.append(proc)
        proc.wait_live(1, text=ready, timeout=120)
    spec = {
        "id": "slowflow",
        "at": iso(utc_now() + timedelta(seconds=4)),
        "deadline": "1s",
        "nodes": [
            {
                "name": "a",
                "target": "python",
                "callable": "examples.tasks:slow",
                "payload": {"seconds": 3},
            },
            {
                "name": "b",
                "after": ["a"],
                "target": "python",
                "callable": "examples.tasks:send_digest",
            },
        ],
    }
    with JobClient(ns) as client:
        client.put_flow(
            flow_from_spec(spec, max_payload_bytes=65536),
            flow_schedule(spec, max_payload_bytes=65536),
        )
    deadline = time.monotonic() + 90
    while True:
        kinds = [(a.kind.value, a.last_status, a.worker) for a in _alerts(ns)]
        if len(kinds) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert kinds == [
        ("DEADLINE_MISSED", "RUNNING", "flows-coordinator"),
        ("DEADLINE_CLEARED", "SUCCEEDED", "flows-coordinator"),
    ]
