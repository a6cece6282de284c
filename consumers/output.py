"""The runs' output in Cassandra (docs/run-output.md): its statements, the row of a
``RunOutput``, the query by run id.

One table, ``run_output`` (``cql/migrations/003_run_output.cql``): one partition per
run, one row per attempt. The sink (``consumers.sink``) writes each ``RunOutput`` of the
``run-output`` topic with ``OutputTable.row``, TTL ``o.OUTPUT_TTL`` (14
days by default; history keeps a year); ``cronstream history --run ID --output``, the
API and the dashboard read it with ``OutputTable.of``.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

from cronstream.consumers.core.buckets import write_timestamp
from cronstream.consumers.history import load_statements
from cronstream.schemas.instants import to_ms
from cronstream.schemas.output import RunOutput

STATEMENTS_FILE = Path(__file__).resolve().parent / "cql" / "output.cql"
TABLE = "run_output"


class OutputTable:
    """The output statements prepared on one session, for the table in ``keyspace``."""

    def __init__(self, session: Any, keyspace: str, *, ttl_s: int = 0) -> None:
        """``ttl_s``: the TTL rows are written with (the sink's; 0 for a reader)."""
        self.session = session
        self.ttl_s = ttl_s
        self.statements = {
            name: session.prepare(cql.format(keyspace=keyspace))
            for name, cql in load_statements(STATEMENTS_FILE).items()
        }

    def row(self, o: RunOutput) -> tuple[str, Any]:
        """The (table, bound statement) that records one output: written again by a
        redelivery, the same cells with the same timestamp (``write_timestamp``)."""
        from cassandra.query import UNSET_VALUE

        def v(value: Any) -> Any:
            return UNSET_VALUE if value is None else value

        stamp = write_timestamp(to_ms(o.recorded_at), o.status)
        return TABLE, self.statements["insert_output"].bind(
            (
                o.run_id,
                o.attempt,
                o.job_id,
                o.tenant,
                o.status,
                o.scheduled_at,
                o.recorded_at,
                o.output,
                v(o.dropped),
                v(o.target_type),
                v(o.worker),
                stamp,
                self.ttl_s,
            )
        )

    def of(self, run_id: str) -> list[RunOutput]:
        """The output kept of each attempt of ``run_id`` that had one, by attempt
        (none: nothing printed, or older than the TTL)."""
        statement = self.statements["select_output"].bind((run_id,))
        return [_read(row) for row in self.session.execute(statement)]


def _read(row: Any) -> RunOutput:
    return RunOutput(
        run_id=row.run_id,
        attempt=row.attempt,
        job_id=row.job_id,
        tenant=row.tenant,
        status=row.status,
        scheduled_at=row.scheduled_at.replace(tzinfo=UTC),
        recorded_at=row.recorded_at.replace(tzinfo=UTC),
        output=row.output or "",
        dropped=row.dropped,
        target_type=row.target_type,
        worker=row.worker,
    )
