"""`cronstream history`: runs recorded, by job, by status, or one run's attempts (and with
``--output``, what each printed or returned: docs/run-output.md), across Cassandra's hot
days and the archive table (``consumers.tiers``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any

from cronstream.cli.common import EXIT_NOT_FOUND, EXIT_UNAVAILABLE
from cronstream.runtime.options.services import HISTORY_TTL, OUTPUT_TTL
from cronstream.runtime.settings import Settings
from cronstream.schemas.definition import parse_duration, parse_instant
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import RunOutcome, RunStatus, iso, to_jsonable, utc_now
from cronstream.schemas.output import RunOutput
from cronstream.schemas.redact import escape_controls, redact_jsonable, redact_text
from cronstream.schemas.tenancy import qualify, tenant_problems

if TYPE_CHECKING:  # the command imports them itself (the Cassandra driver, the archive's)
    from cronstream.consumers.output import OutputTable
    from cronstream.consumers.tiers import Tiers


def register(sub: Any) -> None:
    h = sub.add_parser(
        "history",
        help="runs recorded: a job's, by status, or one run's attempts",
        description="JOB_ID: the job's attempts (latest status each) in the window. "
        "--status without JOB_ID: outcomes with that status recorded in the window. "
        "--run: every record of one run, attempt by attempt (with --output: what each "
        f"attempt printed or returned, kept ${OUTPUT_TTL.env}). --flow-run: a flow run's "
        "status and each node run's attempts and timings. With --tenant T, ids are "
        "T's own (T/JOB_ID is stored); --status across jobs needs --tenant or "
        f"--all-tenants. Windows older than Cassandra keeps (${HISTORY_TTL.env}) "
        "are read from the archive table too, in one answer.",
    )
    h.add_argument("job_id", nargs="?", metavar="JOB_ID")
    h.add_argument("--run", metavar="RUN_ID", help="every attempt of one run")
    h.add_argument(
        "--output",
        action="store_true",
        help="with --run: what each attempt printed or returned (its last "
        "bytes; an http body's first), not its records",
    )
    h.add_argument(
        "--flow-run",
        metavar="FLOW_RUN_ID",
        help="a flow run (FLOW@slot) and each node run: attempts, timings",
    )
    h.add_argument(
        "--status",
        action="append",
        default=[],
        help="SUCCEEDED, FAILED, ... (comma-separated, repeatable)",
    )
    h.add_argument("--since", help="the window ends now and starts this long ago (default 24h)")
    h.add_argument("--from", dest="start", metavar="T", help="window start (ISO 8601)")
    h.add_argument("--to", dest="end", metavar="T", help="window end (ISO 8601; default now)")
    h.add_argument("--limit", type=int, default=100, help="at most N rows (0: all)")
    h.add_argument("--page-size", type=int, default=1000, help="rows per Cassandra request")
    h.add_argument("--json", action="store_true", help="one JSON object per line")
    h.add_argument("--archive", action="store_true", help=argparse.SUPPRESS)  # deprecated
    who = h.add_mutually_exclusive_group()
    who.add_argument(
        "--tenant",
        help="a tenant's: JOB_ID and RUN_ID are its own ids, --status rows only its jobs'",
    )
    who.add_argument(
        "--all-tenants", action="store_true", help="--status rows of every tenant (operators)"
    )
    h.set_defaults(handler=cmd_history, needs="settings")


def history_window(
    since: str | None, start: str | None, end: str | None, now: datetime
) -> tuple[datetime, datetime]:
    """[start, end) from --since or --from/--to (default: the last 24 hours)."""
    if since and (start or end):
        raise SpecError("history window", ["give --since or --from/--to, not both"])
    try:
        if since:
            return now - timedelta(milliseconds=parse_duration(since)), now
        hi = parse_instant(end) if end else now
        lo = parse_instant(start) if start else hi - timedelta(hours=24)
    except ValueError as exc:
        raise SpecError("history window", [str(exc)]) from None
    if lo >= hi:
        raise SpecError("history window", [f"--from {iso(lo)} is not before --to {iso(hi)}"])
    return lo, hi


def history_statuses(values: list[str]) -> list[str]:
    names = [v.strip().upper() for value in values for v in value.split(",") if v.strip()]
    known = {s.value for s in RunStatus}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SpecError(
            "--status", [f"unknown status {', '.join(unknown)} (one of {', '.join(sorted(known))})"]
        )
    return names


def _checked(args: argparse.Namespace) -> list[str]:
    """The statuses asked for, once the arguments make one query; with --tenant, the
    ids made the tenant's (``tenant/...``)."""
    statuses = history_statuses(args.status)
    if not (args.job_id or args.run or args.flow_run or statuses):
        raise SpecError(
            "history", ["give a JOB_ID, --run RUN_ID, --flow-run FLOW_RUN_ID or --status S"]
        )
    for name, value in (("--run", args.run), ("--flow-run", args.flow_run)):
        others = (
            args.job_id,
            statuses,
            args.since,
            args.start,
            args.end,
            args.flow_run if name == "--run" else None,
        )
        if value and any(others):
            raise SpecError("history", [f"{name} takes no JOB_ID, --status, window or other run"])
    if args.output and not args.run:
        raise SpecError("history", ["--output shows one run's output: give --run RUN_ID"])
    if args.archive:
        print(
            "warning: --archive is no longer needed (every query reads the archive for "
            "what Cassandra no longer holds); it will be refused in the next release",
            file=sys.stderr,
        )
    if args.limit < 0 or args.page_size < 1:
        raise SpecError("history", ["--limit must be 0 or more, --page-size 1 or more"])
    if statuses and not args.job_id and not (args.tenant or args.all_tenants):
        raise SpecError("history", ["--status across jobs needs --tenant T or --all-tenants"])
    if args.tenant:
        if problems := tenant_problems(args.tenant):
            raise SpecError("--tenant", problems)
        args.job_id = args.job_id and qualify(args.tenant, args.job_id)
        args.run = args.run and qualify(args.tenant, args.run)
        args.flow_run = args.flow_run and qualify(args.tenant, args.flow_run)
    return statuses


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.errors import ArchiveUnavailable
    from cronstream.consumers.history import History
    from cronstream.consumers.tiers import Tiers
    from cronstream.runtime.cassandra import cassandra_session

    statuses = _checked(args)
    try:
        cluster, session = cassandra_session(settings)
    except Exception as exc:  # the driver's NoHostAvailable, InvalidRequest (no keyspace)
        print(
            f"error: cassandra unavailable: {exc} (is the stack up? 'cronstream status')",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    history = Tiers(History(session, settings.keyspace, page_size=args.page_size), settings)
    try:
        return _answer(history, settings, args, statuses)
    except ArchiveUnavailable as exc:
        print(
            f"error: {exc} (needed for what is older than the {settings.history_ttl_days} "
            f"days Cassandra keeps: {HISTORY_TTL.env})",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    finally:
        history.close()
        cluster.shutdown()


def _answer(
    history: Tiers, settings: Settings, args: argparse.Namespace, statuses: list[str]
) -> int:
    """The query the arguments make, its rows printed."""
    if args.run:
        return _show_run(history, settings.keyspace, args)
    if args.flow_run:
        rows = history.flow_run(args.flow_run)
        if not rows:
            print(f"no records for flow run {args.flow_run}", file=sys.stderr)
            return EXIT_NOT_FOUND
        _print_rows(iter(rows), args.json, FLOW_COLUMNS, node_of=args.flow_run)
        return 0
    now = utc_now()
    start, end = history_window(args.since, args.start, args.end, now)
    found: Iterator[RunOutcome]
    if args.job_id:
        found = history.job_runs(args.job_id, start, end, statuses, tenant=args.tenant)
        columns = JOB_COLUMNS
    else:
        found = history.by_status(statuses, start, end, args.tenant)
        columns = STATUS_COLUMNS
    shown = _print_rows(islice(found, args.limit or None), args.json, columns)
    if args.limit and shown == args.limit and next(found, None) is not None:
        print(f"(more than {args.limit} rows: raise --limit or narrow the window)", file=sys.stderr)
    if not shown and not args.json:
        print(f"nothing recorded from {iso(start)} to {iso(end)}", file=sys.stderr)
    return 0


JOB_COLUMNS = ("scheduled_at", "run_id", "attempt", "status", "trigger", "duration_ms", "error")
STATUS_COLUMNS = ("recorded_at", "status", "job_id", "run_id", "attempt", "duration_ms", "error")
RUN_COLUMNS = (
    "attempt",
    "status",
    "recorded_at",
    "started_at",
    "finished_at",
    "duration_ms",
    "next_attempt_at",
    "worker",
    "error",
)
FLOW_COLUMNS = (
    "node",
    "attempt",
    "status",
    "started_at",
    "finished_at",
    "duration_ms",
    "worker",
    "error",
)
_WIDTH = {
    "node": 20,
    "attempt": 3,
    "status": 15,
    "trigger": 8,
    "duration_ms": 8,
    "worker": 16,
    "run_id": 40,
    "job_id": 24,
}
_TITLE = {"attempt": "ATT", "duration_ms": "MS"}


def _cell(row: RunOutcome, column: str, node_of: str = "") -> str:
    if column == "node":  # FLOW@slot/NODE[~rN] -> NODE[~rN]; the flow run itself: (flow)
        return escape_controls(row.run_id[len(node_of) + 1 :] or "(flow)")
    value = getattr(row, column)
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return iso(value)
    return escape_controls(redact_text(str(value)))


def _print_rows(
    rows: Iterator[RunOutcome], as_json: bool, columns: tuple[str, ...], node_of: str = ""
) -> int:
    count = 0
    for row in rows:
        if as_json:
            print(json.dumps(redact_jsonable(to_jsonable(row))))
        else:
            if not count:
                print(
                    " ".join(
                        _TITLE.get(c, c.upper()).ljust(_WIDTH.get(c, 24)) for c in columns
                    ).rstrip()
                )
            print(
                " ".join(_cell(row, c, node_of).ljust(_WIDTH.get(c, 24)) for c in columns).rstrip()
            )
        count += 1
    sys.stdout.flush()
    return count


def _show_run(history: Tiers, keyspace: str, args: argparse.Namespace) -> int:
    """``--run ID``: every record of the run, or with ``--output`` what it printed."""
    if args.output:
        from cronstream.consumers.output import OutputTable

        return _show_output(OutputTable(history.hot.session, keyspace), args)
    rows = history.run(args.run)
    if not rows:
        print(f"no records for run {args.run}", file=sys.stderr)
        return EXIT_NOT_FOUND
    _print_rows(iter(rows), args.json, RUN_COLUMNS)
    return 0


def _show_output(table: OutputTable, args: argparse.Namespace) -> int:
    """``--run ID --output``: each attempt's output, oldest first (as text: a header line
    per attempt, then the output with its control characters escaped, newlines kept;
    with --json one object per attempt). With --tenant, only that tenant's."""
    found = [o for o in table.of(args.run) if args.tenant in (None, o.tenant)]
    if not found:
        print(
            f"no output kept for run {args.run} (it printed nothing, or it is older than "
            f"{OUTPUT_TTL.env})",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    for output in found:
        if args.json:
            print(json.dumps(redact_jsonable(to_jsonable(output))))
            continue
        note = output.cut_note()
        print(
            f"--- attempt {output.attempt} {output.status} {iso(output.recorded_at)}"
            + (f" ({note})" if note else "")
            + " ---"
        )
        print(_shown(output))
    sys.stdout.flush()
    return 0


def _shown(output: RunOutput) -> str:
    """An output for a terminal: redacted, every control character escaped but the line
    breaks (a recorded escape sequence must not drive the terminal)."""
    text = redact_text(output.output)
    return "\n".join(escape_controls(line) for line in text.removesuffix("\n").split("\n"))
