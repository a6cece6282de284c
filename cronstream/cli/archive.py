"""`cronstream archiver` (history topic -> the archive's Iceberg table) and `cronstream
archive compact|expire|info` (its maintenance: the archiver does it hourly too). Each
command imports the archive's modules itself (pyiceberg, pyarrow and duckdb: about half
a second of every command's start when imported here)."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime
from typing import Any

from cronstream.cli.common import (
    add_role,
    at_least,
    duration_flag,
    invalid,
    member_group,
    old_seconds_flag,
)
from cronstream.runtime.options.services import ARCHIVE_KEEP
from cronstream.runtime.settings import Settings


def register(sub: Any) -> None:
    p = add_role(
        sub,
        "archiver",
        cmd_archiver,
        help="run an archiver (history topic -> the archive's Iceberg table)",
        group="archiver",
    )
    p.add_argument(
        "--flush-rows",
        type=at_least(1),
        default=200_000,
        help="commit a partition's outcomes once it buffers this many",
    )
    p.add_argument(
        "--flush-interval",
        type=duration_flag,
        default=60_000,
        help="... or once its oldest buffered outcome waited this long (60s)",
    )
    p.add_argument(
        "--flush-s", dest="flush_interval", type=old_seconds_flag, help=argparse.SUPPRESS
    )
    a = sub.add_parser("archive", help="the archive table of history: compact, expire, info")
    verbs = a.add_subparsers(dest="verb", required=True)
    c = verbs.add_parser(
        "compact",
        help="merge finished months' files into one per tenant, "
        "and the days before yesterday of the months still going",
    )
    c.add_argument(
        "--day",
        help="only this UTC day (YYYY-MM-DD), or its month when the "
        "month is finished; default: every finished month and day",
    )
    c.set_defaults(handler=cmd_compact, needs="settings")
    e = verbs.add_parser(
        "expire",
        help="delete the days and months wholly past the retention "
        f"(${ARCHIVE_KEEP.env}, default 366d; the archiver does it hourly)",
    )
    e.set_defaults(handler=cmd_expire, needs="settings")
    i = verbs.add_parser(
        "info", help="where the table is (catalog, warehouse) and its days, files and rows"
    )
    i.set_defaults(handler=cmd_info, needs="settings")


def cmd_archiver(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.archiver import Archiver, ArchiverConfig
    from cronstream.consumers.lakehouse import keep_days
    from cronstream.foreground import run_role

    settings = settings.as_role("archiver")  # its own Kafka user and ACLs
    if args.flush_interval <= 0:
        return invalid("--flush-interval must be above 0")
    try:
        keep = keep_days()
    except ValueError as exc:
        return invalid(str(exc))
    config = ArchiverConfig(
        group=member_group(args, settings),
        name=args.name,
        flush_rows=args.flush_rows,
        flush_s=args.flush_interval / 1000,
        keep_days=keep,
    )
    return run_role("archiver", config, Archiver, settings, args.metrics_port)


def cmd_compact(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.compaction import compact, compact_finished
    from cronstream.consumers.lakehouse import ArchiveTable
    from cronstream.runtime.lakehouse import lakehouse

    table = ArchiveTable(lakehouse(settings))
    try:
        if args.day:
            try:
                day = date.fromisoformat(args.day)
            except ValueError:
                return invalid(f"--day {args.day!r} is not YYYY-MM-DD")
            done = {day.isoformat(): compact(table, day)}
        else:
            done = {
                f"{part.label()} {part.tenant}": merged
                for part, merged in compact_finished(table, datetime.now(UTC).date()).items()
            }
    finally:
        table.close()
    for what, merged in sorted(done.items()):
        print(f"{what}: {merged} files merged")
    if not any(done.values()):
        print(f"nothing to compact in {table.where.table}")
    return 0


def cmd_expire(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.lakehouse import ArchiveTable, keep_days
    from cronstream.runtime.lakehouse import lakehouse

    try:
        keep = keep_days()
    except ValueError as exc:
        return invalid(str(exc))
    table = ArchiveTable(lakehouse(settings))
    try:
        gone = table.expire(datetime.now(UTC).date(), keep)
        removed = table.remove_orphans()
    finally:
        table.close()
    for part in gone:
        print(f"{part.label()} {part.tenant}: deleted (older than {keep} days)")
    if not gone:
        print(
            f"nothing older than {keep} days in {table.where.table}"
            if keep
            else "retention is off (0)"
        )
    print(f"{removed} files no snapshot references removed")
    return 0


def cmd_info(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.lakehouse import ArchiveTable
    from cronstream.runtime.lakehouse import lakehouse

    where = lakehouse(settings)
    table = ArchiveTable(where)
    try:
        partitions = table.partitions()
        snapshot = table.table.current_snapshot()
        rows = (
            table.table.inspect.partitions().column("record_count").to_pylist()
            if (snapshot is not None)
            else []
        )
    finally:
        table.close()
    uri = where.catalog_uri.split("@", 1)[-1]  # never the password
    print(f"table {where.table} (catalog {uri}, warehouse {where.warehouse})")
    if partitions:
        months = sum(part.month for part in partitions)
        print(
            f"{min(partitions).start} .. {max(p.end for p in partitions)}: "
            f"{len(partitions)} partitions ({months} of finished months, the rest days), "
            f"{sum(partitions.values())} files, {sum(rows)} outcomes"
        )
    else:
        print("empty")
    return 0
