"""`cronstream runs backfill`: run a job's slots of a past range now (``cronstream.backfill``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cronstream.backfill import (
    MAX_PARALLEL,
    Backfill,
    Pace,
    backfill_slots,
    describe,
    ran_already,
)
from cronstream.cli.common import EXIT_UNAVAILABLE, known
from cronstream.cli.tenant_flags import fire_rates, register_fire_rates
from cronstream.producers.client import JobClient
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.errors import SettingsError
from cronstream.schemas.definition import parse_instant
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import Priority, from_ms, iso, to_ms, utc_now
from cronstream.schemas.ids import slot_run_id
from cronstream.streams.core.rates import TenantRates


def cmd_runs_backfill(client: JobClient, args: argparse.Namespace) -> int:
    job = known(client.get(args.job_id), args.job_id)
    problems = []
    bounds = []
    for flag, text in (("--from", args.start), ("--to", args.end)):
        try:
            bounds.append(to_ms(parse_instant(text, job.timezone)))
        except ValueError as exc:
            problems.append(f"{flag}: {exc}")
    if not 1 <= args.max_parallel <= MAX_PARALLEL:
        problems.append(f"--max-parallel must be 1 to {MAX_PARALLEL:,}")
    try:
        rate, overrides = fire_rates(args)
    except SettingsError as exc:
        problems.append(str(exc))
    if problems:
        raise SpecError(f"backfill {job.job_id}", problems)
    slots = backfill_slots(job, bounds[0], bounds[1], now_ms=to_ms(utc_now()))
    left_alone = 0
    if slots and not args.rerun:
        try:
            ran = _ran(client, job.job_id, slots)
        except Exception as exc:  # the driver's NoHostAvailable, ArchiveUnavailable...
            print(
                f"error: history unavailable: {exc}: the range's history tells which "
                "slots ran (or pass --rerun)",
                file=sys.stderr,
            )
            return EXIT_UNAVAILABLE
        todo = [s for s in slots if slot_run_id(job.job_id, s)[0] not in ran]
        left_alone, slots = len(slots) - len(todo), todo
    print(describe(job, slots, left_alone), file=sys.stderr)
    if args.dry_run or not slots:
        return _report(args, job.job_id, len(slots), left_alone, None)
    client.audit_backfill(
        job,
        f"{len(slots)} slot(s) from {iso(from_ms(bounds[0]))} to "
        f"{iso(from_ms(bounds[1]))}, max-parallel {args.max_parallel}, "
        f"priority {args.priority}{', rerun' if args.rerun else ''}; "
        f"{left_alone} left alone (ran)",
    )
    backfill = Backfill(
        client,
        job,
        slots,
        pace=Pace(args.max_parallel, TenantRates(rate, overrides=overrides)),
        priority=Priority(args.priority.upper()),
        rerun=args.rerun,
        left_alone=left_alone,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    progress = backfill.run()
    return _report(args, job.job_id, len(slots), left_alone, dict(progress.ended))


def _ran(client: JobClient, job_id: str, slots: list[int]) -> set[str]:
    """The run ids of the range that ran: Cassandra's and, for slots older than it
    keeps, the archive table's (``consumers.tiers``)."""
    from cronstream.consumers.history import History
    from cronstream.consumers.tiers import Tiers

    cluster, session = cassandra_session(client.settings)
    history = Tiers(History(session, client.settings.keyspace), client.settings)
    try:
        return ran_already(history.job_runs(job_id, from_ms(slots[0]), from_ms(slots[-1] + 1)))
    finally:
        history.close()
        cluster.shutdown()


def _report(
    args: argparse.Namespace,
    job_id: str,
    to_run: int,
    left_alone: int,
    ended: dict[str, int] | None,
) -> int:
    """The summary (``--json``: one object); exit 1 when a run did not succeed."""
    summary: dict[str, Any] = {
        "job_id": job_id,
        "slots_to_run": to_run,
        "already_ran": left_alone,
        "ended": ended or {},
    }
    if args.json:
        print(json.dumps(summary))
    failed = sum(n for status, n in (ended or {}).items() if status != "SUCCEEDED")
    return 1 if failed else 0


def add_backfill(runs: Any) -> None:
    p = runs.add_parser(
        "backfill",
        help="run a job's slots of a past range now (those that ran are left alone)",
        description="Sends one run per slot of the job due in [--from, --to), with the "
        "slot's own run id, flagged possible_duplicate. Slots whose history shows they ran "
        "(anything but MISSED or SKIPPED) are left alone, so running it twice runs "
        "nothing twice; --rerun runs them all again under fresh run ids. At most "
        "--max-parallel runs are in flight; Ctrl-C stops and cancels those. Exit 0 when "
        "every run succeeded, 1 when one did not.",
    )
    p.add_argument("job_id")
    p.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="T",
        help="first instant (ISO 8601; no offset: the job's zone)",
    )
    p.add_argument(
        "--to",
        dest="end",
        required=True,
        metavar="T",
        help="end of the range, excluded (not in the future)",
    )
    p.add_argument(
        "--max-parallel", type=int, default=16, help="runs in flight at most (default 16)"
    )
    p.add_argument(
        "--priority",
        default="low",
        choices=["high", "normal", "low"],
        help="execution topic of the backfilled runs (default low: live runs "
        "of the other priorities start first)",
    )
    p.add_argument(
        "--rerun",
        action="store_true",
        help="run every slot again, under fresh run ids (JOB@SLOT~KEY)",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would run, send nothing")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    register_fire_rates(p)  # a tenant's backfill runs at most at its fire rate
    p.set_defaults(handler=cmd_runs_backfill, needs="client")
