"""A dependent job end to end (a job's ``after:``): two upstream jobs fire on their
schedule and run on a worker against a real HTTP target; once both succeeded for the day,
the dependency processor emits ``report@dep:<date>`` and the worker runs it, once."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from cronstream.runtime.settings import Settings
from cronstream.schemas.events import utc_now
from tests.integration.helpers import CronstreamProcess, Target, cronstream

pytestmark = pytest.mark.acceptance


def test_two_upstream_jobs_run_then_their_dependent_runs_once(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    procs += [
        CronstreamProcess(ns, tmp_path, "scheduler"),
        CronstreamProcess(ns, tmp_path, "worker", "--http-allow", "127.0.0.0/8", command="worker"),
        CronstreamProcess(ns, tmp_path, "deps", command="dependencies"),
    ]
    for proc, text in zip(
        procs, (" live: ", "assigned", "runs owed at start emitted"), strict=True
    ):
        proc.wait_live(1, text=text, timeout=120)
    soon = utc_now() + timedelta(seconds=5)
    jobs = [
        {"id": "extract", "at": soon.isoformat(), "target": "http", "url": f"{target.url}/up"},
        {
            "id": "load",
            "at": (soon + timedelta(seconds=3)).isoformat(),
            "target": "http",
            "url": f"{target.url}/up",
        },
        {
            "id": "report",
            "after": ["extract", "load"],
            "target": "http",
            "url": f"{target.url}/report",
        },
    ]
    spec = tmp_path / "jobs.yaml"
    spec.write_text(yaml.safe_dump({"jobs": jobs}))
    applied = cronstream(ns, "jobs", "apply", "-f", str(spec))
    assert applied.returncode == 0, applied.stderr

    run_id = f"report@dep:{soon.date().isoformat()}"
    deadline = time.monotonic() + 120
    while not target.keys("/report") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert list(target.keys("/report").elements()) == [run_id]
    ups = [at for at, path, _ in target.calls if path == "/up"]
    report_at = next(at for at, path, _ in target.calls if path == "/report")
    assert len(ups) == 2
    assert report_at > max(ups)  # not before both ran
    time.sleep(5)  # nothing more comes
    assert list(target.keys("/report").elements()) == [run_id]
    assert sorted(key.split("@")[0] for key in target.keys("/up")) == ["extract", "load"]


def test_a_dependent_after_a_flow_runs_once_the_flow_run_ended_and_a_flow_after_it_then(  # long: one story
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    """The flow's success is the coordinator's record of its run's end: its schedule
    run (which only starts it) and its first node succeeding do not count. A flow with
    ``after:`` (on its schedule job) comes after the dependent: a chain, one date."""
    procs += [
        CronstreamProcess(ns, tmp_path, "worker", "--http-allow", "127.0.0.0/8", command="worker"),
        CronstreamProcess(
            ns, tmp_path, "flows", "--log-level", "INFO", command="flows-coordinator"
        ),
        CronstreamProcess(ns, tmp_path, "deps", command="dependencies"),
    ]
    for proc, text in zip(procs, ("assigned", "Ready", "runs owed at start emitted"), strict=True):
        proc.wait_live(1, text=text, timeout=120)
    flows = tmp_path / "flows.yaml"
    flows.write_text(
        yaml.safe_dump(
            {
                "flows": [
                    {
                        "id": "etl",
                        "nodes": [
                            {"name": "a", "target": "http", "url": f"{target.url}/node/a"},
                            {
                                "name": "b",
                                "after": ["a"],
                                "target": "http",
                                "url": f"{target.url}/slow/b",
                            },
                        ],
                    },
                    {
                        "id": "publish",
                        "after": ["report"],
                        "nodes": [
                            {"name": "p", "target": "http", "url": f"{target.url}/publish"},
                        ],
                    },
                ]
            }
        )
    )
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        yaml.safe_dump(
            {
                "jobs": [
                    {"id": "load", "target": "http", "url": f"{target.url}/load"},
                    {
                        "id": "report",
                        "after": ["etl", "load"],
                        "target": "http",
                        "url": f"{target.url}/report",
                    },
                ]
            }
        )
    )
    for args in (
        ("flows", "put", "-f", str(flows)),
        ("jobs", "apply", "-f", str(jobs)),
        ("runs", "trigger", "load", "--idempotency-key", "k1"),
        ("flows", "trigger", "etl", "--idempotency-key", "k1"),
    ):
        done = cronstream(ns, *args)
        assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 120
    while not target.keys("/report") and time.monotonic() < deadline:
        time.sleep(0.2)
    run_id = f"report@dep:{utc_now().date().isoformat()}"
    assert list(target.keys("/report").elements()) == [run_id]
    at = {path: when for when, path, _ in target.calls}
    assert at["/report"] > at["/slow/b"] + target.slow_s  # after b answered: the flow ended
    deadline = time.monotonic() + 60
    while not target.keys("/publish") and time.monotonic() < deadline:
        time.sleep(0.2)
    day = utc_now().date().isoformat()
    assert list(target.keys("/publish").elements()) == [f"publish@dep:{day}/p"]
    time.sleep(3)
    assert list(target.keys("/report").elements()) == [run_id]
    assert len(target.keys("/publish")) == 1
