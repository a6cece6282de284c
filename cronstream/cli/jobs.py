"""`cronstream jobs`, `cronstream runs` and `cronstream tail`: write and inspect jobs,
trigger and cancel runs, print a topic's records."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from cronstream.cli.backfill import add_backfill
from cronstream.cli.common import EXIT_UNAVAILABLE, duration_flag, invalid, known
from cronstream.producers.client import JobClient
from cronstream.producers.spec import load_jobs_file
from cronstream.runtime.kafka.clients import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TopicPartition,
    kafka_consumer,
)
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec, literal_secrets, parse_instant
from cronstream.schemas.definition.spec import KNOWN_KEYS
from cronstream.schemas.definition.zones import load_zone
from cronstream.schemas.errors import DecodeError, SpecError
from cronstream.schemas.events import (
    JobDefinition,
    from_ms,
    iso,
    text_headers,
    to_jsonable,
    to_ms,
    utc_now,
)
from cronstream.schemas.redact import escape_controls, redact_jsonable
from cronstream.schemas.serde import Codec
from cronstream.schemas.targets import names as target_names


def _print_json(value: Any) -> None:
    """One JSON line, credentials redacted (``schemas.redact``); JSON escapes controls."""
    print(json.dumps(redact_jsonable(to_jsonable(value)), sort_keys=False), flush=True)


def _job_line(job: JobDefinition) -> str:
    state = "paused" if job.paused else "active"
    return escape_controls(
        f"{job.job_id:<32} {state:<7} {job.priority.value.lower():<7} "
        f"{job.target.type:<7} {job.describe_schedule()} ({job.timezone})"
    )


def _warn_literal_secrets(jobs: list[JobDefinition]) -> None:
    for job in jobs:
        for warning in literal_secrets(job):
            print(f"warning: {escape_controls(warning)}", file=sys.stderr)


# -- jobs -------------------------------------------------------------------------------
# The spec's keys whose flag gives the value as it is (``--catchup-window`` the key
# ``catchup_window``); the others are read below, or are the command's positionals.
_PLAIN_KEYS = sorted(KNOWN_KEYS - {"id", "target", "headers", "payload", "paused", "on", "after"})


def _spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {"id": args.job_id, "target": args.target}
    for name in _PLAIN_KEYS:
        value = getattr(args, name)
        if value is not None:
            spec[name] = value
    if args.payload is not None:
        try:
            spec["payload"] = json.loads(args.payload)
        except json.JSONDecodeError as exc:
            raise SpecError(f"job {args.job_id}", [f"--payload is not JSON: {exc}"]) from None
    if args.header:
        spec["headers"] = _pairs(args.job_id, "--header", args.header, ":", "NAME:VALUE")
    if args.paused:
        spec["paused"] = True
    return {**spec, **_triggers_from_args(args)}


def _triggers_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The spec's ``on:`` mapping from --on-topic and its companions, and its ``after:``
    (what is missing or wrong in them, a filter without a topic included,
    ``job_from_spec`` names)."""
    after = {"after": args.after} if args.after else {}
    on: dict[str, Any] = {}
    for flag, key in (
        ("on_topic", "topic"),
        ("filter", "filter"),
        ("debounce", "debounce"),
        ("batch", "batch"),
        ("on_key", "key"),
    ):
        if getattr(args, flag) is not None:
            on[key] = getattr(args, flag)
    if args.on_field:
        on["fields"] = _pairs(args.job_id, "--on-field", args.on_field, "=", "NAME=PATH")
    return {"on": on, **after} if on else after


def _pairs(job_id: str, flag: str, items: list[str], sep: str, shape: str) -> dict[str, str]:
    """A repeated ``flag``'s ``NAME<sep>VALUE`` items as a mapping (stripped)."""
    found = {}
    for item in items:
        name, cut, value = item.partition(sep)
        if not cut:
            raise SpecError(f"job {job_id}", [f"{flag} {item!r} is not {shape}"])
        found[name.strip()] = value.strip()
    return found


def cmd_jobs_put(client: JobClient, args: argparse.Namespace) -> int:
    job = client.put_spec(_spec_from_args(args))
    _warn_literal_secrets([job])
    print(f"put {_job_line(job)}")
    return 0


def cmd_jobs_apply(client: JobClient, args: argparse.Namespace) -> int:
    jobs = load_jobs_file(Path(args.file), max_payload_bytes=client.settings.max_payload_bytes)
    client.put_many(jobs)
    _warn_literal_secrets(jobs)
    for job in jobs:
        print(f"put {_job_line(job)}")
    print(f"applied {len(jobs)} jobs from {args.file}")
    return 0


def cmd_jobs_get(client: JobClient, args: argparse.Namespace) -> int:
    _print_json(known(client.get(args.job_id), args.job_id))
    return 0


def cmd_jobs_log(client: JobClient, args: argparse.Namespace) -> int:
    """The audit trail of one job (or flow): every change and command, oldest first."""
    try:
        records = client.audit_log(args.job_id)  # read to the partition's end, never part
    except RuntimeError as exc:  # the topic is missing (no bootstrap)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not records:
        print(f"no audit entries for {args.job_id!r}", file=sys.stderr)
    for record in records[-args.limit :] if args.limit else records:
        if args.json:
            _print_json(record)
            continue
        who = f"{record.principal} ({record.os_user + ', ' if record.os_user else ''}"
        print(escape_controls(f"{iso(record.at)}  {record.action.value:<11} {who}{record.origin})"))
        if record.detail:
            print(escape_controls(f"    {record.detail}"))
        for change in record.changes:
            print(
                escape_controls(
                    f"    {change.field}: {change.before or '(none)'} -> {change.after or '(none)'}"
                )
            )
    return 0


def cmd_jobs_list(client: JobClient, args: argparse.Namespace) -> int:
    jobs = client.list_jobs()
    for job in jobs:
        if args.json:
            _print_json(job)
        else:
            print(_job_line(job))
    for skipped in client.skipped:
        print(f"warning: skipped undecodable record {skipped}", file=sys.stderr)
    if not args.json:
        print(f"{len(jobs)} jobs", file=sys.stderr)
    return 0


def _to_the_job(
    act: Callable[[JobClient, str], object], done: str
) -> Callable[[JobClient, argparse.Namespace], int]:
    """The command that does ``act`` to the job named and says so (``done``: the verb's
    past tense): deleting, pausing and resuming a job."""

    def command(client: JobClient, args: argparse.Namespace) -> int:
        act(client, args.job_id)
        print(f"{done} {args.job_id}")
        return 0

    return command


cmd_jobs_delete = _to_the_job(lambda client, job: client.delete(job), "deleted")
cmd_jobs_pause = _to_the_job(lambda client, job: client.pause(job), "paused")
cmd_jobs_resume = _to_the_job(lambda client, job: client.resume(job), "resumed")


def cmd_jobs_preview(settings: Settings, args: argparse.Namespace) -> int:
    """The next fire instants of a schedule, computed by the scheduler's own core
    (``JobSchedule.slot_after``): check an expression before putting it."""
    from cronstream.streams.scheduler.definitions import (
        preview_slots,  # the scheduler's: only this command's
    )

    spec = {"id": "preview", "target": "python", "callable": "preview:preview"}
    for name in ("cron", "every", "at", "anchor", "tz"):
        if getattr(args, name) is not None:
            spec[name] = getattr(args, name)
    job = job_from_spec(spec, max_payload_bytes=settings.max_payload_bytes)
    if job.schedule is None:
        raise SpecError("preview", ["give --cron, --every or --at"])
    problems = [] if 1 <= args.count <= 1000 else ["--count must be 1-1000"]
    try:
        start = parse_instant(args.start, job.timezone) if args.start else utc_now()
    except ValueError as exc:
        problems.append(f"--from: {exc}")
    if problems:
        raise SpecError("preview", problems)
    slots = preview_slots(job, to_ms(start), args.count)
    zone = load_zone(job.timezone)
    rows = [{"utc": iso(from_ms(ms)), "local": _local(ms, zone)} for ms in slots]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'UTC':<26} LOCAL ({job.timezone})")
    for entry in rows:
        print(f"{entry['utc']:<26} {entry['local']}")
    if len(slots) < args.count:
        print(f"(no more fires: {len(slots)} in all)", file=sys.stderr)
    return 0


def _local(ms: int, zone: ZoneInfo) -> str:
    local = datetime.fromtimestamp(ms / 1000, zone)
    return local.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


# -- runs -------------------------------------------------------------------------------
def cmd_runs_trigger(client: JobClient, args: argparse.Namespace) -> int:
    run = client.trigger(args.job_id, idempotency_key=args.idempotency_key)
    print(f"triggered {run.run_id} on {client.topics.runs(run.priority)}")
    return 0


def cmd_runs_cancel(client: JobClient, args: argparse.Namespace) -> int:
    try:
        command = client.cancel(args.run_id, reason=args.reason)
    except ValueError as exc:
        raise SpecError(args.run_id, [str(exc)]) from None
    print(f"cancel requested for {command.run_id} ({command.command_id})")
    return 0


# -- tail -------------------------------------------------------------------------------
def cmd_tail(settings: Settings, args: argparse.Namespace) -> int:
    """Print records of a topic as JSON lines: decoded values for cronstream topics."""
    topics = Topics(settings)
    topic = topics.resolve(args.topic)
    codec = Codec(registry_client(settings))
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return invalid(f"topic {topic!r} does not exist")
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in meta.partitions])
        printed, idle_since = 0, time.monotonic()
        while args.n is None or printed < args.n:
            msg = consumer.poll(0.5)
            if msg is None:
                idle = time.monotonic() - idle_since
                if args.timeout is not None and idle > args.timeout / 1000:
                    break
                continue
            if msg.error():
                continue
            idle_since = time.monotonic()
            _print_json(_record_json(codec, msg))
            printed += 1
    finally:
        consumer.close()
    return 0


def _record_json(codec: Codec, msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp_ms": msg.timestamp()[1],
        "key": None if msg.key() is None else msg.key().decode("utf-8", "backslashreplace"),
        "headers": text_headers(msg.headers()),
    }
    value = msg.value()
    if value is None:
        out["value"] = None
        return out
    try:
        event = codec.decode_any(value)
        out["type"] = type(event).__name__
        out["value"] = to_jsonable(event)
    except DecodeError as exc:
        out["error"] = str(exc)
        out["value_bytes"] = len(value)
    return out


# -- wiring -----------------------------------------------------------------------------
def add_schedule_args(parser: argparse.ArgumentParser) -> None:
    """--cron | --every [--anchor] | --at, and --tz (jobs put, jobs preview)."""
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--cron", help="5 fields, or 6 with seconds first")
    when.add_argument("--every", help="a fixed interval, e.g. 30s, 15m, 1h")
    when.add_argument("--at", help="one run at an ISO 8601 instant")
    parser.add_argument("--anchor", help="--every: slot k fires at ANCHOR + k*EVERY")
    parser.add_argument("--tz", help="IANA time zone (default UTC)")


def add_job_schedule_args(parser: argparse.ArgumentParser) -> None:
    add_schedule_args(parser)
    parser.add_argument("--target", required=True, help=" | ".join(target_names()))
    parser.add_argument("--url", help="http: URL to call")
    parser.add_argument("--method", help="http: method (default POST)")
    parser.add_argument("--header", action="append", help="http: NAME:VALUE (repeatable)")
    parser.add_argument("--topic", help="kafka: topic to produce the payload to")
    parser.add_argument("--callable", help="python: module:function")
    parser.add_argument("--command", help="shell: command line (worker allowlist applies)")
    parser.add_argument("--payload", help="JSON handed to the target")
    parser.add_argument("--priority", help="high | normal | low (default normal)")
    parser.add_argument("--max-attempts", type=int, help="attempts in all (default 3)")
    parser.add_argument("--backoff", help="MIN..MAX retry delay (default 1s..5m)")
    parser.add_argument("--timeout", help="per-run timeout (default 30s)")
    parser.add_argument("--misfire", help="skip | once | all (default once)")
    parser.add_argument("--catchup", type=int, help="misfire=all: most slots to run (10)")
    parser.add_argument(
        "--concurrency",
        help="while another run of the job executes: "
        "allow | forbid | replace | queue (default allow)",
    )
    parser.add_argument("--catchup-window", help="older missed slots are only recorded (1h)")
    parser.add_argument(
        "--deadline",
        help="a scheduled run not succeeded this long after "
        "its slot raises an alert on cronstream.alerts (default none)",
    )
    parser.add_argument("--jitter", help="spread fires over 0..JITTER (default 0)")
    parser.add_argument("--start", help="no fire before this instant")
    parser.add_argument("--end", help="no fire after this instant")
    parser.add_argument("--tenant", help="owner of the job (default 'default')")
    parser.add_argument("--paused", action="store_true", help="create it paused")
    add_trigger_args(parser)


def add_trigger_args(parser: argparse.ArgumentParser) -> None:
    """A job's ``on:`` and ``after:`` (docs/event-triggers.md)."""
    on = parser.add_argument_group("event trigger (on:) and dependent job (after:)")
    on.add_argument(
        "--on-topic",
        metavar="T",
        help="run on the records of topic T (beside or instead of a schedule)",
    )
    on.add_argument(
        "--filter",
        metavar="EXPR",
        help="only the records it holds for, e.g. "
        '\'value.amount > 100 and headers["source"] == "web"\'',
    )
    window = on.add_mutually_exclusive_group()
    window.add_argument("--debounce", metavar="D", help="at most one run per D, e.g. 5m")
    window.add_argument("--batch", metavar="N", type=int, help="one run per N records")
    on.add_argument("--on-key", metavar="PATH", help="debounce or batch per value at PATH")
    on.add_argument(
        "--on-field",
        metavar="NAME=PATH",
        action="append",
        help="the run's payload: these fields (repeatable; default the record)",
    )
    on.add_argument(
        "--after",
        metavar="JOB",
        action="append",
        help="run once JOB succeeded for a day (repeatable: once all did)",
    )


def _add_log(jobs: Any) -> None:
    log_ = jobs.add_parser("log", help="a job's audit trail: who changed what, when, from where")
    log_.add_argument("job_id", help="the job's (or flow's) id; a tenant's: TENANT/JOB")
    log_.add_argument("--json", action="store_true", help="one JSON line per entry")
    log_.add_argument("--limit", type=int, default=0, help="only the last N entries")
    log_.set_defaults(handler=cmd_jobs_log, needs="client")


def register(sub: Any) -> None:
    """Add the jobs, runs and tail commands to the top-level subparsers."""
    jobs = sub.add_parser("jobs", help="create, change and inspect jobs").add_subparsers(
        dest="action", required=True
    )
    put = jobs.add_parser("put", help="create or replace a job")
    put.add_argument("job_id")
    add_job_schedule_args(put)
    put.set_defaults(handler=cmd_jobs_put, needs="client")
    apply = jobs.add_parser("apply", help="create or replace many jobs from a YAML file")
    apply.add_argument("-f", "--file", required=True)
    apply.set_defaults(handler=cmd_jobs_apply, needs="client")
    for name, handler, text in (
        ("get", cmd_jobs_get, "print one job as JSON"),
        ("delete", cmd_jobs_delete, "delete a job (tombstone)"),
        ("pause", cmd_jobs_pause, "stop firing a job until resumed"),
        ("resume", cmd_jobs_resume, "fire a paused job again from its next slot"),
    ):
        p = jobs.add_parser(name, help=text)
        p.add_argument("job_id")
        p.set_defaults(handler=handler, needs="client")
    preview = jobs.add_parser(
        "preview",
        help="the next fire times of a schedule (in UTC and its zone)",
        description="Computes the next fire instants with the scheduler's own core, "
        "before a job is put. Jitter is not applied (runs keep the nominal slot).",
    )
    add_schedule_args(preview)
    preview.add_argument(
        "--from", dest="start", metavar="T", help="from this instant (default now)"
    )
    preview.add_argument("--count", type=int, default=10, help="how many fire times (1-1000)")
    preview.add_argument("--json", action="store_true", help='a JSON list of {"utc", "local"}')
    preview.set_defaults(handler=cmd_jobs_preview, needs="settings")
    _add_log(jobs)
    lst = jobs.add_parser("list", help="every job, one line each")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=cmd_jobs_list, needs="client")

    runs = sub.add_parser("runs", help="trigger, cancel or backfill runs").add_subparsers(
        dest="action", required=True
    )
    trig = runs.add_parser("trigger", help="run a job now (straight to the execution topic)")
    trig.add_argument("job_id")
    trig.add_argument("--idempotency-key", help="the same key never yields two runs")
    trig.set_defaults(handler=cmd_runs_trigger, needs="client")
    cancel = runs.add_parser("cancel", help="cancel a queued or running run")
    cancel.add_argument("run_id")
    cancel.add_argument("--reason")
    cancel.set_defaults(handler=cmd_runs_cancel, needs="client")
    add_backfill(runs)

    tail = sub.add_parser("tail", help="print a topic's records as decoded JSON lines")
    tail.add_argument("topic", help="full name, or a catalog name such as jobs, runs.high")
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("-n", type=int, help="stop after N records")
    tail.add_argument(
        "--timeout", type=duration_flag, help="stop after this long without a record (e.g. 30s)"
    )
    tail.set_defaults(handler=cmd_tail, needs="settings")
