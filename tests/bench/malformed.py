"""A worker fed hostile run records among good ones keeps its rate.

Side by side in one run, in pairs: one worker drains ``good`` no-op run requests
alone (clean), and the same ``good`` interleaved with ``bad`` malformed records
(flood). Which of the two goes first alternates from pair to pair, so that a machine
growing slower or faster during the bench favours neither; the row is the median of
the pairs' ratios (the good runs' rate with the flood against the clean rate). Every
bad record must be dead-lettered, every good one SUCCEEDED, and the worker alive at the
end.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx

from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import Priority, RunRequest, utc_now
from cronstream.schemas.serde import Codec
from cronstream.schemas.wire import zigzag
from tests.bench.common import NOOP_TARGET, cpu_s, job, namespace, row
from tests.integration.helpers import CronstreamProcess, free_port, read_topic, record_count

UNKNOWN_IDS = tuple(range(900_000, 900_016))  # schema ids nobody registered


def hostile_values(
    codec: Codec, topic: str, jobs_topic: str, rng: random.Random
) -> list[Callable[[], bytes]]:
    """Makers of malformed run-record values, one per kind of damage."""
    good = codec.encode(topic, _run(0))
    definition = codec.encode(jobs_topic, job("x", every_ms=1000))
    head = good[:5]

    def flipped() -> bytes:
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(5, len(data))] = rng.randrange(256)
        return bytes(data)

    return [
        lambda: rng.randbytes(rng.randint(0, 200)),  # noise (rarely even the magic byte)
        lambda: good[: rng.randrange(1, len(good))],  # truncated
        flipped,  # bytes flipped inside a valid body
        lambda: b"\x00" + rng.choice(UNKNOWN_IDS).to_bytes(4, "big") + good[5:],
        lambda: definition[:5] + rng.randbytes(40),  # another record type's schema id
        lambda: head + b"\xff" * 11 + good[5:],  # a varint longer than 64 bits
        lambda: head + zigzag(2**70) + good[5:],  # an out-of-range run id length
        lambda: b"\x01" + good[1:],  # wrong magic byte
    ]


def malformed(codec: Codec, makers: list[Callable[[], bytes]], rng: random.Random) -> bytes:
    """A value the worker's decoder refuses (a flipped byte may still make a valid run:
    such a value is drawn again, so that every bad record must be a dead letter)."""
    while True:
        value = rng.choice(makers)()
        try:
            codec.decode_run(value)
        except DecodeError:
            return value


def _run(i: int) -> RunRequest:
    now = utc_now()
    return RunRequest(
        run_id=f"m{i}@manual:bench",
        job_id=f"m{i}",
        scheduled_at=now,
        fired_at=now,
        target=NOOP_TARGET,
        priority=Priority.NORMAL,
        timeout_ms=60_000,
    )


def produce(settings: Settings, good: int, bad: int, seed: int) -> None:
    """``good`` no-op run requests with ``bad`` hostile records spread among them."""
    topics = Topics(settings)
    topic = topics.runs(Priority.NORMAL)
    codec = Codec(registry_client(settings, writer=True))
    rng = random.Random(seed)
    makers = hostile_values(codec, topic, topics.jobs, rng)
    kinds = [True] * good + [False] * bad
    rng.shuffle(kinds)
    producer = kafka_producer(settings)
    template = _run(0)
    for i, is_good in enumerate(kinds):
        if is_good:
            run = replace(
                template,
                run_id=f"m{i}@manual:bench",
                job_id=f"m{i}",
                scheduled_at=template.scheduled_at + timedelta(milliseconds=i),
            )
            value, key, headers = codec.encode(topic, run), run.job_id, run.headers()
        else:
            value, key, headers = malformed(codec, makers, rng), f"bad{i}", []
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


def drain(
    settings: Settings, good: int, scrape_every: float | None = None
) -> tuple[float, float, int, bool]:
    """Start one worker on the produced records; (good runs/s over the middle 80 %,
    worker CPU us per good run, dead letters, worker still alive). ``scrape_every``:
    the worker serves its metrics and a thread reads /metrics that often, as
    Prometheus would."""
    logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
    options: tuple[str, ...] = ("--concurrency", "64", "--python-allow", "tests.bench")
    port = free_port()
    if scrape_every is not None:
        options += ("--metrics-port", str(port))
    worker = CronstreamProcess(settings, logdir, "w", *options, command="worker")
    topics = Topics(settings)
    stop = threading.Event()
    if scrape_every is not None:
        threading.Thread(target=_scrape, args=(port, scrape_every, stop), daemon=True).start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(1)
            if record_count(settings, topics.history) >= 2 * good:
                break
        alive = worker.proc.poll() is None
        used = cpu_s(worker.proc.pid)
    finally:
        stop.set()
        worker.stop()
    done = sorted(
        r.timestamp_ms
        for r in read_topic(settings, topics.history)
        if r.headers.get("status") == "SUCCEEDED"
    )
    if len(done) < good:
        raise RuntimeError(f"only {len(done)} of {good} good runs succeeded ({logdir})")
    lo, hi = done[len(done) // 10], done[len(done) * 9 // 10]
    rate = 0.8 * len(done) / max(0.001, (hi - lo) / 1000)
    return rate, used / good * 1e6, record_count(settings, topics.dlq), alive


def _scrape(port: int, every: float, stop: threading.Event) -> None:
    with httpx.Client(timeout=5) as client:
        while not stop.wait(every):
            with contextlib.suppress(httpx.HTTPError):  # not up yet, or stopping
                client.get(f"http://127.0.0.1:{port}/metrics")


def bench_malformed(base: Settings, pairs: int, goods: tuple[int, ...], bad: int = 10_000) -> None:
    """A row per ``good`` count: the same ``bad`` malformed records among more or fewer
    good runs (the issue names the 10,000, not the density; both are printed)."""
    for good in goods:
        _flood_row(base, pairs, good, bad, target=">= 90%" if good == goods[0] else "report")


def _flood_row(base: Settings, pairs: int, good: int, bad: int, target: str) -> None:
    clean: list[float] = []
    flood: list[float] = []
    cpu: dict[bool, list[float]] = {False: [], True: []}
    letters: list[int] = []
    for k in range(pairs):
        for hostile in (0, bad) if k % 2 == 0 else (bad, 0):
            with namespace(base) as settings:
                produce(settings, good, hostile, seed=k)
                rate, used, dead, alive = drain(settings, good)
            cpu[bool(hostile)].append(used)
            if not alive:
                raise RuntimeError("the worker died on the hostile records")
            (flood if hostile else clean).append(rate)
            if hostile:
                letters.append(dead)
    ratio = statistics.median(f / c for f, c in zip(flood, clean, strict=True))
    # What one malformed record costs the worker: the median of the pairs' CPU
    # differences (both drains of a pair include the same startup; noisy).
    extra_us = statistics.median(f - c for f, c in zip(cpu[True], cpu[False], strict=True))
    extra_us *= good / bad
    row(
        f"good runs/s, 1 worker, {bad:,} malformed among {good:,} vs clean",
        f"{ratio:.0%}",
        target,
        f"flood {[round(r) for r in flood]} vs clean {[round(r) for r in clean]} runs/s; "
        f"worker CPU us per good run {statistics.median(cpu[True]):.0f} vs "
        f"{statistics.median(cpu[False]):.0f} (startup included), ~{extra_us:.0f} us per "
        f"malformed record; dead letters {letters} (expected {bad:,}); worker alive",
    )


def bench_scrape(base: Settings, pairs: int, good: int = 30_000) -> None:
    """The cost of being scraped: the same drain of no-op runs by one worker,
    with a scraper reading its /metrics every second and without, side by side in pairs
    alternating which goes first."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for k in range(pairs):
        for scraped in (True, False) if k % 2 == 0 else (False, True):
            with namespace(base) as settings:
                produce(settings, good, 0, seed=k)
                rate, used, _, alive = drain(settings, good, 1.0 if scraped else None)
            if not alive:
                raise RuntimeError("the worker died")
            rates[scraped].append(rate)
            cpu[scraped].append(used)
    ratio = statistics.median(s / n for s, n in zip(rates[True], rates[False], strict=True))
    row(
        "no-op runs/s, 1 worker, scraped every 1 s vs not",
        f"{ratio:.0%}",
        "report",
        f"scraped {[round(r) for r in rates[True]]} vs not {[round(r) for r in rates[False]]} "
        f"runs/s; worker CPU us per run {statistics.median(cpu[True]):.0f} vs "
        f"{statistics.median(cpu[False]):.0f}",
    )
