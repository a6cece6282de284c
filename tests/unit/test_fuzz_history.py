"""Fuzz (issue 31): the history sink builds the rows of any schema-valid outcome,
however hostile, as Cassandra's driver would bind them, or dead-letters it as over the
limits; the archiver archives it (its Parquet part written inside the archive) or
dead-letters it. Neither raises nor counts a record fault."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given

from consumers import archive
from schemas.events import RunOutcome, RunStatus
from tests.hostile import FUZZ, OUTCOMES
from tests.processors import NOW, TOPICS, ArchiverHarness, SinkHarness


@FUZZ
@given(OUTCOMES)
def test_a_hostile_outcome_becomes_rows_or_a_dead_letter(outcome: RunOutcome) -> None:
    h = SinkHarness()
    rows, reason = h.rows_of(h.codec.encode(TOPICS.history, outcome))
    assert h.sink.faults.streak == 0, reason
    assert rows or reason


@FUZZ
@given(OUTCOMES)
@example(
    RunOutcome(
        run_id="j@1",
        job_id="j",
        status=RunStatus.STARTED,
        scheduled_at=NOW,
        recorded_at=NOW,
        tenant="é" * 125,
    )
)  # found: 250 bytes, a name too long
def test_a_hostile_outcome_is_archived_inside_the_archive_or_dead_lettered(
    outcome: RunOutcome,
) -> None:
    h = ArchiverHarness()
    kept = h.accept(h.codec.encode(TOPICS.history, outcome))
    assert h.archiver.faults.streak == 0, [x.reason for x in h.letters()]
    if kept is None:
        assert h.letters()
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "archive"
        for path in archive.write_parts(root, 0, 0, [kept]):
            assert path.resolve().is_relative_to(root.resolve())
