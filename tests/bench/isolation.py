"""What one tenant can take from the others (`--only security`), this code beside a
baseline revision (``CRONSTREAM_BENCH_SECURITY_BASELINE``, default c4846ca: the code the
outside review measured) in the same run:

- **redaction**: ``redact_text`` of a 64 KiB text built to make a backtracking URL
  pattern quadratic (``"://" + "a." * 32768``), ms, median of 5 calls;
- **refused crons**: the RSS growth of a real API process after 1,000 PUTs whose cron
  is 600 KB (each one refused), and of a real admission after 1,000 such commands
  written by the tenant's own Kafka client (the baseline after 100: it parses each);
- **fresh ids**: the RSS growth of a real scheduler after 200,000 job ids each put and
  then deleted (tombstoned), 1,000 at a time (what a tenant holds at once stays small;
  the first measure put all 200,000 before deleting any, and so measured the heap's
  high-water mark of 200,000 live jobs, not what deleted ids leave behind);
- **catch-up**: runs emitted in the first second after a 2-hour outage by 100 jobs due
  every second with misfire ``all``, at a tenant rate of 10/s (the pure core, driven with
  a virtual clock);
- **fuzzer**: server errors (5xx) of the real API under the OpenAPI-driven fuzzer, with a
  tenant token and with the admin token;
- **hostile target**: another tenant's due-to-start p99 on the same worker while one
  tenant's http target answers the 64 KiB text, beside the quiet figure (no hostile
  tenant) of the same code.

Each measure runs the code under test in its own processes (a checkout's ``cwd``:
``common.run_in`` for the pure ones, ``CronstreamProcess`` for the roles), so both
revisions are measured by the same driver.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import REPO_ROOT, Settings
from cronstream.runtime.tokens import token_path
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import CronSchedule, JobDefinition, Target, utc_now
from cronstream.schemas.tenancy import TenantAction, TenantCommand
from cronstream.schemas.wire import avro_string
from tests.api_fuzz import callers, fuzz
from tests.bench.catchup import catchup_first_second
from tests.bench.common import (
    NOOP_TARGET,
    checkout,
    cpu_s,
    every_second,
    job,
    namespace,
    pct,
    put_jobs,
    put_noop_jobs,
    read_runs,
    row,
    rss_mib,
    run_in,
)
from tests.bench.target_rows import http_server
from tests.bench.workers import Pipeline
from tests.integration.helpers import (
    CronstreamProcess,
    free_port,
    history_keyspace,
    wait_http_up,
)

BASELINE = os.environ.get("CRONSTREAM_BENCH_SECURITY_BASELINE", "c4846ca")
ADVERSARIAL = "://" + "a." * 32768  # 64 KiB + 3
CRON_BYTES = 600_000


def _redact_ms() -> dict[str, float]:
    """``redact_text`` of the 64 KiB adversarial text: ms, median of 5 calls (run in the
    checkout measured: ``run_in``)."""
    import statistics
    import time

    from cronstream.schemas.redact import redact_text

    text = "://" + "a." * 32768
    took = []
    for _ in range(5):
        started = time.perf_counter()
        redact_text(text)
        took.append((time.perf_counter() - started) * 1000)
    return {"ms": statistics.median(took)}


def _long_cron(i: int) -> str:
    """A valid cron whose minute field is a 600 KB list, distinct per ``i``."""
    return "0," * (CRON_BYTES // 2 + i) + "0 * * * *"


def _settled_rss(pid: int, quiet_s: float = 3.0, timeout: float = 300) -> float:
    """``pid``'s RSS (MiB) once it has been idle (under 5 % of a core) for ``quiet_s``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_s(pid)
        time.sleep(quiet_s)
        if cpu_s(pid) - before < 0.05 * quiet_s:
            return rss_mib(pid)
    raise RuntimeError(f"process {pid} never went idle")


def _put(url: str, token: str, job_id: str, body: bytes) -> int:
    request = urllib.request.Request(
        f"{url}/v1/jobs/{job_id}",
        data=body,
        method="PUT",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


class _Front(NamedTuple):
    """An admission and an API of ``code`` serving ``url``."""

    url: str
    admission: CronstreamProcess
    api: CronstreamProcess


@contextmanager
def _front(settings: Settings, code: Path | None, *admission_args: str) -> Iterator[_Front]:
    """An admission (with ``admission_args``) and an API of the checkout ``code`` (None:
    this one) in ``settings``' namespace, both live; stopped after."""
    logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
    port = free_port()
    admission = CronstreamProcess(
        settings, logdir, "admission", *admission_args, command="admission", code=code
    )
    api = CronstreamProcess(settings, logdir, "api", "--port", str(port), command="api", code=code)
    url = f"http://127.0.0.1:{port}"
    try:
        admission.wait_live(1, timeout=120, text="jobs topic read")
        wait_http_up(url)
        yield _Front(url, admission, api)
    finally:
        api.stop()
        admission.stop()


def refused_crons(base: Settings, code: Path | None, count: int) -> tuple[float, float]:
    """(API RSS growth, admission RSS growth) in MiB over ``count`` refused 600 KB crons,
    after 20 of them as a warm-up."""
    with namespace(base) as settings:
        tenant = f"bench{uuid.uuid4().hex[:6]}"
        add_tenant(settings, tenant)
        try:
            with _front(settings, code) as (url, admission, api):
                token = token_path(settings, tenant).read_text().strip()

                def api_round(first: int, n: int) -> None:
                    for i in range(first, first + n):
                        spec = {"cron": _long_cron(i), "target": "http", "url": "https://e.x/h"}
                        status = _put(url, token, f"j{i}", json.dumps(spec).encode())
                        if status < 400 or status >= 500:
                            raise RuntimeError(f"a 600 KB cron answered {status}, not a refusal")

                api_round(0, 20)
                api_before = _settled_rss(api.proc.pid)
                api_round(20, count)
                api_growth = _settled_rss(api.proc.pid) - api_before

                commands = _TenantCommands(settings, tenant)
                commands.write(0, 20)
                admission_before = _settled_rss(admission.proc.pid)
                commands.write(20, count)
                admission_growth = _settled_rss(admission.proc.pid) - admission_before
                return api_growth, admission_growth
        finally:
            remove_tenant(settings, tenant)


class _TenantCommands:
    """PUT commands with a 600 KB cron written as the tenant's own Kafka client would:
    the definition encoded with a short marker cron, the marker's bytes replaced (so no
    check of this code's stands between the bench and the admission under test)."""

    def __init__(self, settings: Settings, tenant: str) -> None:
        self.topic = Topics(settings).tenant_commands(tenant)
        self.publisher = Publisher(settings.acting_as(f"tenant-{tenant}"))

    def write(self, first: int, count: int) -> None:
        marker = "7 7 7 7 7"
        for i in range(first, first + count):
            definition = JobDefinition(
                job_id=f"j{i}",
                target=Target(type="http", url="https://example.com/h"),
                updated_at=utc_now(),
                schedule=CronSchedule(expression=marker),
            )
            command = TenantCommand(
                command_id=uuid.uuid4().hex,
                action=TenantAction.PUT,
                job_id=definition.job_id,
                issued_at=utc_now(),
                job=definition,
            )
            value = self.publisher.codec.encode(self.topic, command)
            value = value.replace(avro_string(marker), avro_string(_long_cron(i)), 1)
            self.publisher.produce_raw(self.topic, command.key(), value, command.headers())
            self.publisher.producer.poll(0)
        self.publisher.producer.flush(60)


CHURN_BLOCK = 1_000  # fresh ids alive at once: put, then deleted before the next block


def _named(template: JobDefinition, ids: list[str], i: int) -> JobDefinition:
    return dataclasses.replace(template, job_id=ids[i])


def fresh_ids(base: Settings, code: Path | None, count: int) -> float:
    """A scheduler's RSS growth (MiB) after ``count`` fresh job ids put then deleted,
    CHURN_BLOCK at a time (a tenant creating and deleting jobs: what it holds at once
    stays small, what it ever named grows), beside the same after 20,000 as a warm-up.
    Each id's hourly schedule is an hour away: the wheel holds its slot after the
    delete until due (or until purged)."""
    with namespace(base) as settings:
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        scheduler = CronstreamProcess(settings, logdir, "scheduler", code=code)
        try:
            scheduler.wait_live(12, timeout=240)
            template = job("fresh", cron="0 * * * *", target=NOOP_TARGET)
            jobs_topic = Topics(settings).jobs

            def churn(n: int) -> None:
                publisher = Publisher(settings)
                for _ in range(0, n, CHURN_BLOCK):
                    ids = [f"fresh-{uuid.uuid4().hex}" for _ in range(CHURN_BLOCK)]
                    put_jobs(settings, len(ids), partial(_named, template, ids))
                    for job_id in ids:
                        publisher.produce_raw(jobs_topic, job_id, None, [])
                        publisher.producer.poll(0)
                    publisher.flush()
                publisher.close()

            churn(20_000)
            before = _settled_rss(scheduler.proc.pid)
            churn(count)
            return _settled_rss(scheduler.proc.pid) - before
        finally:
            scheduler.stop()


class _Adversarial(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = ADVERSARIAL.encode()
    calls = 0  # requests answered, all servers together

    def do_POST(self) -> None:
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_args: object) -> None:
        return None


QUIET_JOBS, HOSTILE_JOBS = 100, 10


def hostile_target(base: Settings, code: Path | None, hostile: bool) -> float:
    """Tenant quiet's due-to-start p99 (ms) on one worker with 100 no-op jobs a second,
    beside (``hostile``) tenant hostile's 10 http jobs a second to a server answering
    the 64 KiB text."""
    with namespace(base) as settings, http_server(_Adversarial) as url:
        put_noop_jobs(settings, QUIET_JOBS, "q", tenant="quiet")
        if hostile:
            hook = Target(type="http", url=url)
            put_jobs(settings, HOSTILE_JOBS, every_second("h", target=hook, tenant="hostile"))
        grants = (
            "--grant",
            f"hostile:http={urlsplit(url).netloc}",
            "--grant",
            "quiet:python=tests.bench.targets:noop",
        )
        pipeline = Pipeline(settings, 1, 64, code=code, worker_args=grants)
        calls_before = _Adversarial.calls
        try:
            pipeline.wait_live()
            time.sleep(10.0)
            t0 = time.time() * 1000
            time.sleep(20.0)
            t1 = time.time() * 1000
        finally:
            # A worker whose loop is held ignores SIGTERM: it is killed then.
            with contextlib.suppress(AssertionError):
                pipeline.stop()
        ended = int(time.time() * 1000)
        if hostile and _Adversarial.calls == calls_before:
            raise RuntimeError("the hostile target was never called")
        # Every quiet run due in the window: one never started counts as late as the end
        # of the observation (a lower bound of its lateness).
        late = [
            (ended if run.started_ms is None else run.started_ms) - run.due_ms
            for run in read_runs(settings)
            if run.job_id.startswith("quiet/") and t0 <= run.due_ms < t1
        ]
        return pct(late, 0.99)


class _Measured:
    """Each measure's values by arm (this code, the baseline), over the rounds."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, list[float]]] = {}

    def keep(self, arm: str, name: str, value: float) -> None:
        self.values.setdefault(name, {}).setdefault(arm, []).append(value)

    def mine(self, name: str) -> float:
        return statistics.median(self.values[name]["this"])

    def shown(self, name: str, fmt: Callable[[float], str]) -> str:
        return "; ".join(
            f"{arm} {fmt(statistics.median(values))} {[fmt(v) for v in values]}"
            for arm, values in self.values[name].items()
        )


def _round(
    base: Settings, arm: str, code: Path | None, crons: int, ids: int, measured: _Measured
) -> None:
    keep = measured.keep
    keep(arm, "redact", run_in(code or REPO_ROOT, _redact_ms)["ms"])
    caught = catchup_first_second(code or REPO_ROOT)
    keep(arm, "catchup", caught["emitted_first_second"])
    keep(arm, "deferred", caught["deferred"])
    api, admission = refused_crons(base, code, crons)
    keep(arm, "api_rss", api)
    keep(arm, "admission_rss", admission)
    keep(arm, "fresh_rss", fresh_ids(base, code, ids))
    keep(arm, "fuzz", _fuzz(base, code))
    keep(arm, "quiet_p99", hostile_target(base, code, hostile=False))
    keep(arm, "hostile_p99", hostile_target(base, code, hostile=True))


def bench_isolation(base: Settings, runs: int, quick: bool) -> None:
    """The six rows, ``runs`` rounds each, this code then the baseline in each round."""
    measured = _Measured()
    crons = 200 if quick else 1000
    ids = 50_000 if quick else 200_000
    with checkout(BASELINE) as baseline:
        for _ in range(runs):
            _round(base, "this", None, crons, ids, measured)
            if baseline is not None:
                # The baseline parses each 600 KB cron (~1 s, in the API and again in the
                # admission): a tenth of them.
                _round(base, BASELINE, baseline, crons // 10, ids, measured)
    if baseline is None:
        row(f"baseline {BASELINE}", "-", "-", "not in this clone's history: not measured")
    _report(measured, crons, ids)


def _report(measured: _Measured, crons: int, ids: int) -> None:
    mine, shown = measured.mine, measured.shown
    ms, mib, whole = "{:.1f}".format, "{:.1f}".format, "{:.0f}".format
    row(
        "redaction of the 64 KiB adversarial text (ms)",
        ms(mine("redact")),
        "<= 5",
        shown("redact", ms),
    )
    for name, who in (("api_rss", "API"), ("admission_rss", "admission")):
        row(
            f"{who} RSS growth after {crons:,} refused 600 KB crons (MiB)",
            mib(mine(name)),
            "<= 5",
            f"{shown(name, mib)} ({BASELINE}: after {crons // 10:,})",
        )
    row(
        f"scheduler RSS growth after {ids:,} put/delete of fresh ids (MiB)",
        mib(mine("fresh_rss")),
        "<= 20",
        shown("fresh_rss", mib),
    )
    row(
        "runs emitted in the first second after a 2 h outage at 10/s",
        whole(mine("catchup")),
        "<= 10",
        f"{shown('catchup', whole)}; deferred {shown('deferred', whole)}",
    )
    row(
        "fuzzer's server errors (tenant + admin tokens)",
        whole(mine("fuzz")),
        "0",
        shown("fuzz", whole),
    )
    quiet, noisy = mine("quiet_p99"), mine("hostile_p99")
    row(
        "another tenant's due-to-start p99 beside the hostile target (ms)",
        f"{noisy:.0f} (quiet {quiet:.0f})",
        "<= quiet + 50",
        f"hostile {shown('hostile_p99', whole)}; quiet {shown('quiet_p99', whole)}",
    )


def _fuzz(base: Settings, code: Path | None) -> float:
    """Server errors of the real API (``code``'s, with its admission, as processes) under
    ``tests.api_fuzz`` (this checkout's document-driven fuzzer) with a tenant's token,
    the admin's and the admin's acting for the tenant."""
    with namespace(base) as ns, history_keyspace(ns) as settings:
        names = (f"fa{uuid.uuid4().hex[:8]}", f"fb{uuid.uuid4().hex[:8]}")
        for name in names:
            add_tenant(settings, name)
        try:
            with _front(settings, code, "--max-jobs", "3", "--triggers-per-minute", "2") as front:
                report = fuzz(front.url, callers(settings, names[0]), max_examples=15)
            print(f"  fuzz {'this' if code is None else BASELINE}: {report.summary()}")
            for line in report.server_errors[:5]:
                print(f"    {line}")
            return float(len(report.server_errors))
        finally:
            for name in names:
                remove_tenant(settings, name)
