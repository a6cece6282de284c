"""Fuzz: the history sink builds the rows of any schema-valid outcome,
however hostile, as Cassandra's driver would bind them, or dead-letters it as over the
limits; the archiver archives it (its data file written inside the archive table's
folder, the row read back as written) or dead-letters it. Neither raises nor counts a record fault."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given

from cronstream.consumers.lakehouse import ArchiveTable, eq, to_arrow
from cronstream.runtime.lakehouse import lakehouse, local_environment
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, RunStatus
from tests import factories
from tests.hostile import FUZZ, OUTCOMES
from tests.processors import TOPICS, ArchiverHarness, SinkHarness


@FUZZ
@given(OUTCOMES)
def test_a_hostile_outcome_becomes_rows_or_a_dead_letter(outcome: RunOutcome) -> None:
    h = SinkHarness()
    rows, reason = h.rows_of(h.codec.encode(TOPICS.history, outcome))
    assert h.sink.faults.streak == 0, reason
    assert rows or reason


@pytest.fixture(scope="module")
def local_table() -> Iterator[tuple[ArchiveTable, Path]]:
    """One single-machine archive table for every example (a table each would be most
    of the test's time)."""
    with tempfile.TemporaryDirectory() as tmp:
        table = ArchiveTable(lakehouse(Settings.from_env({}), local_environment(Path(tmp))))
        yield table, Path(tmp).resolve()
        table.close()


@FUZZ
@given(OUTCOMES)
# found: a tenant of 250 bytes, a name too long (its folder name URL-encoded: 757 bytes)
@example(factories.outcome("j@1", status=RunStatus.STARTED, tenant="é" * 125))
def test_a_hostile_outcome_is_archived_inside_the_archive_or_dead_lettered(
    local_table: tuple[ArchiveTable, Path], outcome: RunOutcome
) -> None:
    table, root = local_table
    h = ArchiverHarness()
    kept = h.accept(h.codec.encode(TOPICS.history, outcome))
    assert h.archiver.faults.streak == 0, [x.reason for x in h.letters()]
    if kept is None:
        assert h.letters()
        return
    first = table.checkpoint(0)
    table.write(0, first, (first or 0) + 1, to_arrow([kept]))
    for path in root.rglob("*.parquet"):
        assert path.resolve().is_relative_to(root)
    found = table.scan(eq("run_id", kept.run_id))
    assert kept.tenant in found.column("tenant").to_pylist()
