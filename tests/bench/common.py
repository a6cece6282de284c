"""What every benchmark shares: the result table, namespaces, fast job writes, readers."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from cronstream.infra.bootstrap import ensure_subjects, ensure_topics
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import REPO_ROOT, Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    EPOCH,
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    Priority,
    RunOutcome,
    Target,
    to_ms,
    utc_now,
)
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import qualify
from cronstream.schemas.wire import avro_string
from cronstream.streams.core.schedule import jitter_offset
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.processor import Scheduler
from tests.conftest import cli_env
from tests.integration.helpers import (
    Record,
    read_topic,
)
from tests.layout import FOLDERS

ROWS: list[tuple[str, str, str, str]] = []


def row(name: str, value: str, target: str, note: str = "") -> None:
    ROWS.append((name, value, target, note))
    print(f"  {name}: {value}  (target {target}) {note}", flush=True)


@contextmanager
def namespace(base: Settings, prefix: str = "csbench") -> Iterator[Settings]:
    settings = base.with_namespace(topic_prefix=f"{prefix}.{uuid.uuid4().hex[:8]}")
    ensure_topics(settings)
    ensure_subjects(settings)
    try:
        yield settings
    finally:
        admin = kafka_admin(settings, superuser=True)
        names = Topics(settings).names()
        for future in admin.delete_topics(names, operation_timeout=60).values():
            future.result()


def put_jobs(settings: Settings, count: int, make: Callable[[int], JobDefinition]) -> float:
    """Write ``count`` definitions fast: one encode per shape, the job id spliced in."""
    topic = Topics(settings).jobs
    publisher = Publisher(settings)
    started = time.perf_counter()
    shapes: dict[int, tuple[bytes, bytes]] = {}
    for i in range(count):
        job = make(i)
        shape_key = hash((job.schedule, job.timezone, job.jitter_ms, job.priority))
        shape = shapes.get(shape_key)
        if shape is None:
            encoded = publisher.codec.encode(topic, job)
            head = encoded[:5]
            body = encoded[5 + len(avro_string(job.job_id)) :]
            shape = shapes[shape_key] = (head, body)
        value = shape[0] + avro_string(job.job_id) + shape[1]
        publisher.produce_raw(topic, job.job_id, value, [("job_id", job.job_id.encode())])
    publisher.close()
    return time.perf_counter() - started


HTTP_TARGET = Target(type="http", url="https://example.com/hook")
NOOP_TARGET = Target(type="python", callable="tests.bench.targets:noop")


def job(
    job_id: str,
    *,
    cron: str | None = None,
    every_ms: int = 0,
    jitter_ms: int = 0,
    zone: str = "UTC",
    target: Target = HTTP_TARGET,
) -> JobDefinition:
    schedule = (
        CronSchedule(expression=cron) if cron else IntervalSchedule(every_ms=every_ms, anchor=EPOCH)
    )
    return JobDefinition(
        job_id=job_id,
        target=target,
        updated_at=utc_now(),
        schedule=schedule,
        timezone=zone,
        jitter_ms=jitter_ms,
    )


def every_second(
    prefix: str, *, target: Target = HTTP_TARGET, tenant: str | None = None
) -> Callable[[int], JobDefinition]:
    """The i-th of the jobs ``<prefix>-<i>`` due every second, spread over the second by
    their jitter (999 ms): ``count`` of them (``put_jobs``) are a steady ``count`` fires a
    second; ``tenant``'s jobs (their ids qualified) when given."""

    def make(i: int) -> JobDefinition:
        job_id = f"{prefix}-{i}" if tenant is None else qualify(tenant, f"{prefix}-{i}")
        made = job(job_id, every_ms=1000, jitter_ms=999, target=target)
        return made if tenant is None else dataclasses.replace(made, tenant=tenant)

    return make


def put_noop_jobs(settings: Settings, count: int, prefix: str, tenant: str | None = None) -> None:
    """``count`` no-op python jobs every second (``every_second``), ``tenant``'s if given."""
    put_jobs(settings, count, every_second(prefix, target=NOOP_TARGET, tenant=tenant))


def run_records(settings: Settings) -> list[tuple[str, int, int]]:
    """(job_id, produce timestamp ms, slot ms) of every run request, from the topic."""
    return [
        (r.headers["job_id"], r.timestamp_ms, iso_ms(r.headers["scheduled_at"]))
        for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
    ]


_ISO: dict[str, int] = {}


def due_ms(job_id: str, slot_ms: int, jitter_ms: int = 999) -> int:
    """A run's due time: its slot plus its job's jitter offset (the benchmarks' jobs
    have ``jitter_ms`` 999)."""
    return slot_ms + jitter_offset(job_id, jitter_ms)


def header_due_ms(headers: Mapping[str, str]) -> int:
    """``due_ms`` of a record from its readable headers (job id, slot)."""
    return due_ms(headers["job_id"], iso_ms(headers["scheduled_at"]))


def iso_ms(text: str) -> int:
    cached = _ISO.get(text)
    if cached is None:
        from datetime import datetime

        cached = _ISO[text] = int(
            datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
        )
    return cached


def started_ms(settings: Settings, records: Sequence[Record] | None = None) -> dict[str, int]:
    """Run id -> when its attempt started (wall clock ms, its latest attempt's), read
    from the ``started_at`` of its outcomes on history (``records``, else all of them):
    a short run has no STARTED record of its own (the worker's ``--started-after-ms``)."""
    if records is None:
        records = read_topic(settings, Topics(settings).history)
    out: dict[str, int] = {}
    with registry_client(settings) as registry:
        codec = Codec(registry)
        for record in records:
            if record.headers.get("status") in (None, "STARTED") or record.value is None:
                continue
            outcome = codec.decode(record.value, RunOutcome)
            if outcome.started_at is not None:
                out[outcome.run_id] = to_ms(outcome.started_at)
    return out


class Run(NamedTuple):
    """A run request read back from the runs topic (the latest of its run id) and when
    its run started."""

    job_id: str
    emitted_ms: int  # the request's record timestamp
    slot_ms: int
    due_ms: int  # its slot plus its job's jitter offset (``due_ms``)
    started_ms: int | None  # its latest attempt's start (``started_ms``); None: never


def read_runs(settings: Settings, history: Sequence[Record] | None = None) -> list[Run]:
    """Every run requested on the runs topic (normal priority) with its start, read from
    the outcomes on history (``history``, else all of it): what due-to-start and
    fire-to-start lateness are measured from."""
    started = started_ms(settings, history)
    latest = {
        r.headers["run_id"]: r for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
    }
    return [_run(r, started.get(run_id)) for run_id, r in latest.items()]


def _run(record: Record, started: int | None) -> Run:
    job_id, slot = record.headers["job_id"], iso_ms(record.headers["scheduled_at"])
    return Run(job_id, record.timestamp_ms, slot, due_ms(job_id, slot), started)


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (``q`` a fraction: 0.99 for p99), the value at
    rank ``int(q * n)`` of the sorted ones; a percent (99) is refused: it read as the
    maximum."""
    if not 0 <= q <= 1:
        raise ValueError(f"pct takes a fraction in [0, 1], not {q!r} (p99 is 0.99)")
    if not values:
        raise ValueError("pct of no values: nothing was measured (no run in the window?)")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(processor: Scheduler, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        processor.step()


def live(processor: Scheduler, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        processor.step()
        if len(processor.owned) == processor.settings.partitions and all(
            not o.loading for o in processor.owned.values()
        ):
            return time.monotonic() - started
    raise RuntimeError("processor never went live")


def processor(settings: Settings) -> Scheduler:
    """An in-process scheduler without a lookahead: the skew and burst benchmarks
    measure the emission path itself (a run emitted when it is due); with the default
    lookahead (1 s) every run would be emitted ahead and its skew say nothing."""
    return Scheduler(
        settings.as_role("scheduler"),
        SchedulerConfig(group=f"{settings.topic_prefix}.scheduler", lookahead_ms=0),
    )


def scheduler_process(
    settings: Settings, log: Path, name: str, *args: str
) -> subprocess.Popen[bytes]:
    """A `cronstream scheduler` process in ``settings``' namespace, logging to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cronstream.cli", "scheduler", "--name", name, *args],
            env=cli_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_all_live(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> float:
    """Seconds until ``proc``'s log shows all 12 partitions live (it dying, or the
    timeout, raises with the log's tail)."""
    started = time.time()
    while log.read_text().count(" live: ") < 12:
        if proc.poll() is not None or time.time() - started > timeout:
            raise RuntimeError(log.read_text()[-3000:])
        time.sleep(0.2)
    return time.time() - started


PROBES = 100  # every-second jobs beside a benchmark's own: is it firing on time


def put_probed(settings: Settings, jobs: int, make: Callable[[int], JobDefinition]) -> None:
    """PROBES jobs ``probe-<i>`` every second, then ``jobs`` more made by ``make`` (its i
    from PROBES on); the time their writing took said."""

    def made(i: int) -> JobDefinition:
        return job(f"probe-{i}", every_ms=1000) if i < PROBES else make(i)

    wrote = put_jobs(settings, jobs + PROBES, made)
    print(f"  wrote {jobs + PROBES:,} definitions in {wrote:.1f}s", flush=True)


def on_time_probes(settings: Settings, since_s: float) -> dict[str, int]:
    """Each probe's first fire (its record's timestamp, ms) from ``since_s`` (wall clock
    s) on that was on time: emitted within 50 ms of its slot."""
    firsts: dict[str, int] = {}
    for job_id, ts, slot in run_records(settings):
        if job_id.startswith("probe-") and ts >= since_s * 1000 and ts - slot <= 50:
            firsts[job_id] = min(ts, firsts.get(job_id, ts))
    return firsts


class Up(NamedTuple):
    """A scheduler process's start, measured from ``since_s`` (its start, or the kill of
    the one it replaces)."""

    live_s: float  # until all 12 partitions live (from its own start)
    rss_mib: float  # its RSS once settled
    first_fire_s: float  # from since_s to the first on-time probe fire (inf: none)


def scheduler_up(
    settings: Settings,
    proc: subprocess.Popen[bytes],
    log: Path,
    since_s: float,
    *,
    timeout: float,
    settle_s: float,
) -> Up:
    """``proc`` (a `cronstream scheduler` logging to ``log``, PROBES among its jobs) once
    all its partitions are live and ``settle_s`` more have passed."""
    live_s = wait_all_live(proc, log, timeout)
    time.sleep(settle_s)
    rss = rss_mib(proc.pid)
    firsts = on_time_probes(settings, since_s)
    first = min(firsts.values()) / 1000 - since_s if firsts else float("inf")
    return Up(live_s, rss, first)


def cpu_s(pid: int, children: bool = False) -> float:
    """CPU seconds ``pid`` used so far (user + system), with ``children`` those of its
    children it has waited for too (a worker's shell commands)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


_INSTALLED_NAME = re.compile(rf"\bcronstream\.({'|'.join(FOLDERS)})\b")


def for_checkout(code_root: str | Path, source: str) -> str:
    """``source`` (Python importing ``cronstream.<folder>``) as a checkout imports it: as
    is, or with the folders' top-level names in a revision from before they were
    packages of cronstream (docs/design.md, "One installed name")."""
    if (Path(code_root) / "cronstream" / "schemas").exists():
        return source
    return _INSTALLED_NAME.sub(r"\1", source)


def run_in(code_root: str | Path, measure: Callable[[], Any], timeout: float = 900) -> Any:
    """``measure`` run in a child python whose working directory is ``code_root`` (a
    checkout: the modules it imports are that checkout's, so one driver measures this
    code and a baseline alike); its JSON answer. ``measure`` imports what it uses inside
    its own body: only its source goes to the child."""
    source = for_checkout(code_root, textwrap.dedent(inspect.getsource(measure)))
    script = (
        f"from typing import Any\n{source}\nimport json\nprint(json.dumps({measure.__name__}()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=code_root,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"{measure.__name__} in {code_root} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextmanager
def checkout(revision: str) -> Iterator[Path | None]:
    """A worktree of ``revision`` sharing this checkout's stack (``.stack``), removed
    after; None when the revision is not in this clone."""
    known = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        yield None
        return
    where = Path(tempfile.mkdtemp(prefix="cronstream-baseline-")) / "tree"
    subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(where), revision],
        check=True,
        capture_output=True,
    )
    try:
        (where / ".stack").symlink_to(REPO_ROOT / ".stack")
        yield where
    finally:
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(where)],
            check=False,
            capture_output=True,
        )
