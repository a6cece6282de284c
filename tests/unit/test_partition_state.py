"""A partition's RocksDB store (``streams.scheduler.state``), on a temporary directory: entry order
(negative dues too), the budget, deletes held until the checkpoint covers them, what a
reopened store still holds, and a stale store rebuilt."""

from __future__ import annotations

import time
from pathlib import Path

from cronstream.streams.core.schedule import JobSchedule
from cronstream.streams.scheduler.state import (
    STALE_AFTER_MS,
    PartitionState,
    StoredDefinition,
    index_view,
)

NOW = 1_800_000_000_000


def schedule(job_id: str, raw: bytes) -> JobSchedule | None:
    """Stand-in for ``Definitions.stored_schedule``: raw is the interval in ms."""
    return JobSchedule(job_id, every_ms=int(raw)) if raw != b"bad" else None


def test_entries_come_in_due_order_within_the_window_and_the_budget(tmp_path: Path) -> None:
    state = PartitionState(tmp_path / "0", schedule)
    for due, job_id in [(5, "b"), (5, "a"), (-3, "z"), (100, "c"), (7, "é")]:
        state.hold(job_id, due, None)
    assert state.entries(None, 101, 0, 10) == [(-3, "z"), (5, "a"), (5, "b"), (7, "é"), (100, "c")]
    assert state.entries((5, "a"), 101, 0, 10) == [(5, "b"), (7, "é"), (100, "c")]
    assert state.entries(None, 7, 0, 10) == [(-3, "z"), (5, "a"), (5, "b")]  # before 7
    # all those due by the urgent point, others while fewer than the budget are taken
    assert state.entries(None, 101, 5, 1) == [(-3, "z"), (5, "a"), (5, "b")]
    assert state.entries(None, 101, 5, 4) == [(-3, "z"), (5, "a"), (5, "b"), (7, "é")]
    assert state.entries(None, 101, -10, 2) == [(-3, "z"), (5, "a")]
    state.close()


def test_a_replaced_entry_goes_only_once_the_checkpoint_covers_it(tmp_path: Path) -> None:
    state = PartitionState(tmp_path / "0", schedule)
    state.hold("j", 1_000, None)
    state.hold("j", 2_000, 1_000)  # fired at 1,000: its next slot is at 2,000
    state.hold("k", 3_000, None)
    state.forget("k", 3_000)  # deleted job
    state.flush(999, 5)  # the checkpoint does not cover 1,000 yet
    assert state.all_entries() == [(1_000, "j"), (2_000, "j"), (3_000, "k")]
    state.flush(1_000, 6)
    assert state.all_entries() == [(2_000, "j"), (3_000, "k")]
    state.flush(5_000, 7)
    assert state.all_entries() == [(2_000, "j")]
    meta = state.meta()
    assert meta is not None
    assert (meta.jobs_offset, meta.fired_through) == (7, 5_000)
    state.close()


def test_a_reopened_store_holds_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "3"
    state = PartitionState(path, schedule)
    state.put_definition("a", StoredDefinition(4, NOW, False, b"60000"))
    state.put_definition("b", StoredDefinition(9, NOW, True, b"bad"))
    state.put_definition("c", StoredDefinition(11, NOW, False, b"1000"))
    state.delete_definition("c")
    state.hold("a", NOW + 60_000, None)
    state.hold("b", NOW + 1, None)
    state.flush(NOW, 12)
    state.close()  # a kill -9 keeps this too: RocksDB's log is written at each put
    again = PartitionState.open(path, schedule, rebuild=False, now_ms=int(time.time() * 1000))
    assert [k for k, _ in again.definitions()] == ["a", "b"]
    assert again.definition("b") == StoredDefinition(9, NOW, True, b"bad")
    assert again.load("b") is None  # unusable: the core forgets its entry
    loaded = again.load("a")
    assert loaded is not None
    assert loaded.every_ms == 60_000
    assert [k for k, _ in again.definitions(after="a")] == ["b"]
    assert index_view(again, NOW) == {"a": (4, NOW + 60_000), "b": (9, None)}
    again.close()


def test_a_stale_store_and_a_rebuild_start_empty(tmp_path: Path) -> None:
    path = tmp_path / "1"
    state = PartitionState(path, schedule)
    state.put_definition("a", StoredDefinition(1, NOW, False, b"1000"))
    state.flush(NOW, 2)
    written = state.meta()
    assert written is not None
    state.close()
    kept = PartitionState.open(path, schedule, rebuild=False, now_ms=written.written_ms + 1000)
    assert kept.meta() == written
    kept.close()
    rebuilt = PartitionState.open(path, schedule, rebuild=True, now_ms=written.written_ms)
    assert rebuilt.meta() is None
    assert list(rebuilt.definitions()) == []
    rebuilt.flush(NOW, 2)
    rebuilt.close()
    late = written.written_ms + STALE_AFTER_MS + 60_000
    stale = PartitionState.open(path, schedule, rebuild=False, now_ms=late)
    assert stale.meta() is None  # a tombstone it missed may be compacted away by now
    stale.close()


def test_the_index_view_ignores_stale_lower_entries(tmp_path: Path) -> None:
    state = PartitionState(tmp_path / "0", schedule)
    state.put_definition("j", StoredDefinition(1, NOW, False, b"60000"))
    state.hold("j", NOW - 30_000, None)  # a lower bound left behind
    state.hold("j", NOW + 60_000, None)
    assert index_view(state, NOW) == {"j": (1, NOW + 60_000)}
    state.close()
    late = PartitionState(tmp_path / "1", schedule)
    late.put_definition("j", StoredDefinition(1, NOW, False, b"60000"))
    late.hold("j", NOW + 120_000, None)  # past the job's next slot: it would be missed
    assert index_view(late, NOW) == {"j": (1, NOW + 120_000)}  # differs from the truth
    late.close()
