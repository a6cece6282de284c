"""The hot-path metric helpers expose what prometheus_client's own types would."""

from __future__ import annotations

import random
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from cronstream.runtime.metrics import LoopHistogram, Tally
from cronstream.runtime.probes import Probes

BUCKETS = (0.001, 0.005, 0.01, 0.1, 1.0, 60.0)


def _samples(registry: CollectorRegistry) -> list[str]:
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    ]


def test_loop_histogram_exposes_what_a_histogram_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LoopHistogram("x_seconds", "doc", BUCKETS, ours)
    slow = Histogram("x_seconds", "doc", buckets=BUCKETS, registry=theirs)
    rng = random.Random(3)
    values = [0.0, 0.001, 0.005, 60.0, 61.0, *(rng.expovariate(20) for _ in range(500))]
    for value in values:
        fast.observe(value)
        slow.observe(value)
    assert _samples(ours) == _samples(theirs)
    assert f"x_seconds_count {float(len(values))}" in _samples(ours)


def test_loop_histogram_buckets_hold_their_upper_bound() -> None:
    registry = CollectorRegistry()
    histogram = LoopHistogram("y_seconds", "doc", BUCKETS, registry)
    for value in (0.001, 0.0011, 60.0, 61.0):
        histogram.observe(value)
    assert _samples(registry) == [
        'y_seconds_bucket{le="0.001"} 1.0',
        'y_seconds_bucket{le="0.005"} 2.0',
        'y_seconds_bucket{le="0.01"} 2.0',
        'y_seconds_bucket{le="0.1"} 2.0',
        'y_seconds_bucket{le="1.0"} 2.0',
        'y_seconds_bucket{le="60.0"} 3.0',
        'y_seconds_bucket{le="+Inf"} 4.0',
        "y_seconds_count 4.0",
        "y_seconds_sum 121.0021",
    ]


def test_a_labelled_loop_histogram_exposes_what_a_labelled_histogram_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LoopHistogram("z_seconds", "doc", BUCKETS, ours, ["priority"])
    slow = Histogram("z_seconds", "doc", ["priority"], buckets=BUCKETS, registry=theirs)
    series = {p: fast.labels(p) for p in ("HIGH", "NORMAL", "LOW")}
    for p in series:  # created at 0, as the worker creates its three
        slow.labels(p)
    assert fast.labels("HIGH") is series["HIGH"]  # found, not made again
    rng = random.Random(5)
    for i in range(300):
        value, priority = rng.expovariate(10), ("HIGH", "LOW")[i % 2]
        series[priority].observe(value)
        slow.labels(priority).observe(value)
    assert _samples(ours) == _samples(theirs)
    assert 'z_seconds_count{priority="NORMAL"} 0.0' in _samples(ours)
    with pytest.raises(ValueError, match="has labels"):
        fast.labels("HIGH", "extra")


def test_tally_applies_counts_in_bulk() -> None:
    registry = CollectorRegistry()
    runs = Counter("runs", "doc", ["status", "target"], registry=registry)
    tally = Tally()
    for _ in range(3):
        tally.add(runs, "SUCCEEDED", "python")
    tally.add(runs, "FAILED", "http")
    assert (
        registry.get_sample_value("runs_total", {"status": "SUCCEEDED", "target": "python"}) is None
    )
    tally.apply()
    tally.apply()  # nothing new: nothing added twice
    assert registry.get_sample_value("runs_total", {"status": "SUCCEEDED", "target": "python"}) == 3
    assert registry.get_sample_value("runs_total", {"status": "FAILED", "target": "http"}) == 1


def test_probes_answer_live_until_the_loop_stops_going_round_and_ready_once_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes = Probes()
    assert probes.live() == (True, "starting")
    assert probes.ready()[0] is False  # not set ready yet
    probes.set_ready(True)
    probes.beat()
    assert probes.live() == (True, "ok")
    assert probes.ready() == (True, "ok")
    beat = probes.last_beat
    assert beat is not None
    monkeypatch.setattr(time, "monotonic", lambda: beat + 61)
    live, why = probes.live()
    assert not live
    assert "main loop stuck: last went round 61 s ago" in why
    assert probes.ready() == (False, why)
