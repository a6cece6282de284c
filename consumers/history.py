"""The execution history in Cassandra: its statements, the rows of an outcome, its queries.

Three tables (``cql/migrations/``), one per question, each bucketed by time
(``consumers.core.buckets``), and an index:

- ``runs_by_job``: a job's runs in a time range (one row per attempt; its columns hold
  the attempt's latest status);
- ``runs_by_tenant_status``: runs with a status in a time window, one partition per
  tenant, status, hour and shard (one row per outcome);
- ``runs_by_id``: every record of one run id, attempt by attempt;
- ``history_tenants``: the tenants with outcomes of a status in each hour. A status
  query across every tenant (an operator's) merges those tenants' partitions of the
  hour, and the ``runs_by_status`` rows of the pairs it does not name: sinks of an
  older release wrote every outcome there too, and no index.

An outcome is three rows (two for a DUPLICATE), and a tenant's first outcome of a
status in an hour in a sink process one more: each row costs the sink and Cassandra
about as much as any other (docs/benchmarks.md, "History's cost per outcome").

Statements live in ``cql/history.cql`` as named statements, prepared once per session
(``HistoryTables``). The sink writes with ``HistoryTables.rows``; ``History`` answers
the queries the CLI shows (``cronstream history``) with RunOutcome values (the
columns a table does not hold are None), as iterators that page through Cassandra
(``page_size`` rows per request) so a large result is never held at once.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronstream.consumers.core.buckets import (
    SHARDS,
    day_of,
    days_desc,
    hour_of,
    hours_desc,
    shard_of,
)
from cronstream.consumers.core.buckets import write_timestamp as _write_timestamp
from cronstream.consumers.errors import StatementsError
from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.events import RunOutcome, RunStatus, Trigger, to_ms

STATEMENTS_FILE = Path(__file__).resolve().parent / "cql" / "history.cql"
_NAMED = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.M)
# Outcomes that do not change what a job's attempt is: a DUPLICATE says a redelivered
# run was not executed again; it is in runs_by_id and runs_by_tenant_status only.
NOT_IN_JOB_VIEW = frozenset({RunStatus.DUPLICATE})
ERROR_MAX_CHARS = 4000  # longer error texts (from other producers) are cut: bounded rows
TENANT_HOURS_KEPT = 3  # the hours whose tenants a sink remembers having indexed
INDEX_TTL_MARGIN_S = 86_400  # the index, written at an hour's first outcome, outlives its last


def load_statements(path: Path = STATEMENTS_FILE) -> dict[str, str]:
    """``-- name: x`` followed by one statement ending with ``;`` -> {x: statement}."""
    text = path.read_text()
    marks = list(_NAMED.finditer(text))
    found: dict[str, str] = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        body = text[mark.end() : following.start() if following else len(text)]
        lines = [ln for ln in body.splitlines() if not ln.strip().startswith("--")]
        statement = "\n".join(lines).strip()
        if not statement.endswith(";") or statement.count(";") != 1:
            raise StatementsError(f"{path.name}: {mark[1]} must be one statement ending in ';'")
        if mark[1] in found:
            raise StatementsError(f"{path.name}: {mark[1]} is defined twice")
        found[mark[1]] = statement[:-1].strip()
    return found


class HistoryTables:
    """The history statements prepared on one session, for tables in ``keyspace``."""

    def __init__(self, session: Any, keyspace: str, *, ttl_s: int) -> None:
        from cassandra.query import UNSET_VALUE

        self.session = session
        self.ttl_s = ttl_s
        self._unset = UNSET_VALUE
        self.statements = {
            name: session.prepare(cql.format(keyspace=keyspace))
            for name, cql in load_statements().items()
        }
        # hour -> the (status, tenant) pairs indexed in history_tenants by this process
        self._indexed: dict[datetime, set[tuple[str, str]]] = {}

    def rows(self, o: RunOutcome) -> list[tuple[str, Any]]:
        """The (table, bound statement) pairs that record one outcome. Missing values
        are unset, not null: no tombstones, and a later record of the same attempt
        leaves the earlier one's cells (started_at, say) in place."""
        u = self._unset

        def v(value: Any) -> Any:
            return u if value is None else value

        status = o.status.value
        stamp = _write_timestamp(to_ms(o.recorded_at), status)
        ttl = self.ttl_s
        error = v(o.error[:ERROR_MAX_CHARS] if o.error else None)
        trigger, duration = o.trigger.value, v(o.duration_ms)
        target, worker = v(o.target_type), v(o.worker)
        hour = hour_of(o.recorded_at)
        st = self.statements
        # The attempt's cells, last in runs_by_id's and runs_by_job's rows alike
        attempt = (v(o.started_at), v(o.finished_at), duration, error, v(o.next_attempt_at))
        written = (target, worker, stamp, ttl)
        by_id = (o.run_id, o.attempt, o.recorded_at, status, o.job_id, o.tenant, trigger)
        by_status = (o.tenant, status, hour, shard_of(o.run_id), o.recorded_at, o.run_id)
        outcome = (o.attempt, o.job_id, trigger, o.scheduled_at, duration, error)
        out = [
            ("runs_by_id", st["insert_by_id"].bind((*by_id, o.scheduled_at, *attempt, *written))),
            (
                "runs_by_tenant_status",
                st["insert_by_tenant_status"].bind((*by_status, *outcome, *written)),
            ),
        ]
        if o.status not in NOT_IN_JOB_VIEW:
            slot = (o.job_id, day_of(o.scheduled_at), o.scheduled_at, o.run_id, o.attempt)
            by_job = (*slot, status, trigger, o.tenant, o.recorded_at, *attempt, *written)
            out.append(("runs_by_job", st["insert_by_job"].bind(by_job)))
        if (status, o.tenant) not in self._indexed.get(hour, ()):
            # last: an outcome whose rows cannot be built (dead-lettered) indexes nothing
            out.append(self._index(hour, status, o.tenant))
        return out

    def _index(self, hour: datetime, status: str, tenant: str) -> tuple[str, Any]:
        """The history_tenants row saying ``tenant`` has outcomes of ``status`` in
        ``hour``, noted as written (the sink writes every row it is given, or stops
        before committing; a process that starts again writes it again: the same cell,
        its TTL renewed). The last ``TENANT_HOURS_KEPT`` hours are remembered; a late
        outcome of an older hour writes its row again."""
        self._indexed.setdefault(hour, set()).add((status, tenant))
        while len(self._indexed) > TENANT_HOURS_KEPT:
            del self._indexed[min(self._indexed)]
        ttl = self.ttl_s + INDEX_TTL_MARGIN_S
        return "history_tenants", self.statements["insert_tenant_hour"].bind(
            (hour, status, tenant, ttl)
        )


_STATUS = {s.value: s for s in RunStatus}
_TRIGGER = {t.value: t for t in Trigger}


def _row_reader(columns: Sequence[str]) -> Callable[[Sequence[Any]], RunOutcome]:
    """Turns a row of a SELECT with these ``columns`` (a plain tuple: the driver's named
    tuples cost more than the query) into the RunOutcome it records. Columns a table
    does not hold stay None; the driver's naive instants are UTC."""
    names = tuple(columns)
    instants = tuple(i for i, name in enumerate(names) if name.endswith("_at"))
    status, trigger = names.index("status"), names.index("trigger")

    def read(row: Sequence[Any]) -> RunOutcome:
        values = list(row)
        for i in instants:
            value = values[i]
            if value is not None:
                values[i] = value.replace(tzinfo=UTC)
        values[status] = _STATUS[values[status]]
        values[trigger] = _TRIGGER[values[trigger]]
        return RunOutcome(**dict(zip(names, values, strict=True)))

    return read


def _one_ahead(buckets: Iterator[Iterator[RunOutcome]]) -> Iterator[RunOutcome]:
    """Chain the buckets' rows, asking for the next bucket (its first page is requested
    when it is built) before reading the current one: two buckets in flight, not all."""
    current = next(buckets, None)
    while current is not None:
        following = next(buckets, None)
        yield from current
        current = following


Outcomes = Iterator[RunOutcome]


def _unnamed(rows: Outcomes, named: set[tuple[str, str]]) -> Outcomes:
    """The rows of ``runs_by_status`` whose (status, tenant) the index does not name."""
    return (row for row in rows if (row.status.value, row.tenant) not in named)


def _merged(streams: Iterable[Iterator[RunOutcome]], key: str) -> Iterator[RunOutcome]:
    """Merge streams each sorted newest first by ``key`` into one, newest first."""
    return heapq.merge(*streams, key=lambda r: getattr(r, key), reverse=True)


class History:
    """The history queries (``cronstream history`` and its Python callers)."""

    def __init__(self, session: Any, keyspace: str, *, page_size: int = 1000) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.page_size = page_size
        self.tables = HistoryTables(session, keyspace, ttl_s=0)
        self._profile = session.execution_profile_clone_update(
            EXEC_PROFILE_DEFAULT, row_factory=tuple_factory
        )
        self._readers = {
            name: _row_reader([column[2] for column in statement.result_metadata])
            for name, statement in self.tables.statements.items()
            if name.startswith("select_")
        }

    def _query(
        self, name: str, params: Sequence[Any], fetch_size: int | None = None
    ) -> Iterator[RunOutcome]:
        """Rows of one partition query. The first page is requested now (so several
        queries run at once); the driver fetches each next page as iteration reaches it."""
        statement = self.tables.statements[name].bind(params)
        statement.fetch_size = fetch_size or self.page_size
        future = self.session.execute_async(statement, execution_profile=self._profile)
        read = self._readers[name]

        def rows() -> Iterator[RunOutcome]:
            for row in future.result():
                yield read(row)

        return rows()

    def job_runs(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        statuses: Sequence[str] = (),
        *,
        limit: int | None = None,
    ) -> Iterator[RunOutcome]:
        """A job's attempts scheduled in [start, end), latest first, each with its
        latest status; only those with a status in ``statuses`` when given; at most
        ``limit`` (pages of that size: the dashboard's 200 rows of a busy job fetched
        ~2,050 with the default page size, two or three days in flight)."""
        wanted = {s.upper() for s in statuses}
        fetch = min(self.page_size, limit) if limit else None
        days = (
            self._query("select_job_day", (job_id, day, start, end), fetch)
            for day in days_desc(start, end)
        )
        found = 0
        for row in _one_ahead(days):
            if not wanted or row.status in wanted:
                yield row
                found += 1
                if found == limit:
                    return

    def by_status(
        self, statuses: Sequence[str], start: datetime, end: datetime, tenant: str | None = None
    ) -> Iterator[RunOutcome]:
        """Outcomes with one of ``statuses`` recorded in [start, end), latest first,
        across every job, hour by hour, each hour's partitions merged. With ``tenant``:
        that tenant's partitions of ``runs_by_tenant_status``. Without: the partitions
        of the (status, tenant) pairs the hour's ``history_tenants`` rows name, and
        ``runs_by_status``'s rows of the pairs they do not name (outcomes recorded by
        sinks of an older release, which wrote both tables and no index: none twice)."""
        names = [s.upper() for s in statuses]
        shards = range(SHARDS)

        def tenant_rows(hour: datetime, pairs: Iterable[tuple[str, str]]) -> list[Outcomes]:
            return [
                self._query("select_tenant_status_hour", (who, status, hour, shard, start, end))
                for status, who in pairs
                for shard in shards
            ]

        def hour_rows(hour: datetime) -> Iterator[RunOutcome]:
            if tenant is not None:
                return _merged(tenant_rows(hour, [(s, tenant) for s in names]), "recorded_at")
            named = {pair for pair in self.tenants_of(hour) if pair[0] in names}
            older = [
                _unnamed(self._query("select_status_hour", (s, hour, shard, start, end)), named)
                for s in names
                for shard in shards
            ]
            return _merged([*tenant_rows(hour, sorted(named)), *older], "recorded_at")

        return _one_ahead(hour_rows(hour) for hour in hours_desc(start, end))

    def tenants_of(self, hour: datetime) -> list[tuple[str, str]]:
        """The (status, tenant) pairs with outcomes recorded in ``hour``
        (history_tenants)."""
        statement = self.tables.statements["tenants_of_hour"].bind((hour,))
        rows = self.session.execute(statement, execution_profile=self._profile)
        return [(status, who) for status, who in rows]

    def run(self, run_id: str) -> list[RunOutcome]:
        """Every record of one run: attempt by attempt, oldest first."""
        return list(self._query("select_run", (run_id,)))

    def flow_run(self, flow_run_id: str) -> list[RunOutcome]:
        """A flow run and its node runs: ``flow_rows``."""
        return flow_rows(self.run, self.job_runs, flow_run_id)


def flow_rows(
    run: Callable[[str], list[RunOutcome]],
    job_runs: Callable[[str, datetime, datetime], Iterable[RunOutcome]],
    flow_run_id: str,
) -> list[RunOutcome]:
    """A flow run and its node runs (``FLOW@slot/NODE``, reruns ``~rN``) from the
    queries ``run`` and ``job_runs`` (Cassandra's, or both tiers'): every attempt with
    its latest status, the flow run's own record first, then the nodes by start. A flow
    run and its nodes share the flow's id as job id and the run's slot as scheduled time,
    so one partition of ``runs_by_job`` holds them."""
    own = run(flow_run_id)
    if not own:
        return []
    job_id, slot = own[0].job_id, own[0].scheduled_at
    prefix = flow_run_id + "/"
    rows = [
        row
        for row in job_runs(job_id, slot, slot + timedelta(milliseconds=1))
        if row.run_id == flow_run_id or row.run_id.startswith(prefix)
    ]
    far = datetime.max.replace(tzinfo=UTC)
    rows.sort(
        key=lambda r: (
            r.run_id != flow_run_id,
            r.started_at or r.recorded_at or far,
            r.run_id,
            r.attempt,
        )
    )
    if rows and rows[0].run_id == flow_run_id and rows[0].worker == FLOWS_APP:
        # The flow run's row holds its start's timings (the run that started it):
        # show the flow's own, from its first node's start to the recorded end.
        starts = [r.started_at for r in rows[1:] if r.started_at is not None]
        first, end = min(starts, default=None), rows[0].recorded_at
        duration = to_ms(end) - to_ms(first) if first and end else None
        rows[0] = replace(rows[0], started_at=first, finished_at=end, duration_ms=duration)
    return rows
