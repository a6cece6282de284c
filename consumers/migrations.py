"""Numbered CQL migrations, applied once each, in order: the bootstrap and tests use this.

A migration is ``consumers/cql/migrations/NNN_name.cql``: statements separated by a
``;`` at the end of a line, applied inside the configured keyspace. Applied versions are
recorded in ``<keyspace>.schema_migrations``; every statement must be idempotent
(``IF NOT EXISTS``) because a crash between a statement and its record re-runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cronstream.consumers.errors import MigrationError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "cql" / "migrations"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.cql$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def split_statements(text: str) -> tuple[str, ...]:
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    return tuple(s.strip() for s in re.split(r";\s*$", body, flags=re.M) if s.strip())


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.cql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNN_name.cql")
        found.append(
            Migration(
                version=int(match[1]),
                name=match[2],
                statements=split_statements(path.read_text()),
            )
        )
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration numbers must run 1..N without gaps: {versions}")
    return found


def keyspace_replication(replication_factor: int, datacenter: str) -> str:
    """The replication map of cronstream's keyspaces: NetworkTopologyStrategy on one node
    as on a cluster (production's strategy; growing is an ALTER of the number)."""
    return f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': {replication_factor}}}"


def ensure_keyspace(
    session: Any, keyspace: str, replication_factor: int = 1, datacenter: str = "datacenter1"
) -> None:
    """The keyspace (an existing one keeps its replication: ``replication_of`` tells)."""
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
        + keyspace_replication(replication_factor, datacenter)
    )
    session.execute(
        f"CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations "
        "(version int PRIMARY KEY, name text, applied_at timestamp)"
    )


def applied_versions(session: Any, keyspace: str) -> set[int]:
    rows = session.execute(f"SELECT version FROM {keyspace}.schema_migrations")
    return {row.version for row in rows}


def replication_of(session: Any, keyspace: str, datacenter: str) -> int:
    """How many replicas ``keyspace`` keeps in ``datacenter`` (either strategy)."""
    row = session.execute(
        "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", [keyspace]
    ).one()
    if row is None:
        return 0
    replication = dict(row.replication)
    return int(replication.get(datacenter) or replication.get("replication_factor") or 0)


def migrate(
    session: Any, keyspace: str, replication_factor: int = 1, datacenter: str = "datacenter1"
) -> list[Migration]:
    """Create the keyspace if needed and apply every pending migration; returns those."""
    ensure_keyspace(session, keyspace, replication_factor, datacenter)
    done = applied_versions(session, keyspace)
    applied = []
    for migration in load_migrations():
        if migration.version in done:
            continue
        session.set_keyspace(keyspace)
        for statement in migration.statements:
            try:
                session.execute(statement, timeout=60)
            except Exception as exc:
                raise MigrationError(
                    f"migration {migration.version:03d}_{migration.name} failed on:\n"
                    f"{statement[:300]}\n{exc}"
                ) from exc
        session.execute(
            f"INSERT INTO {keyspace}.schema_migrations (version, name, applied_at) "
            "VALUES (%s, %s, toTimestamp(now()))",
            (migration.version, migration.name),
        )
        applied.append(migration)
    return applied
