"""A standby store's entries (``streams.scheduler.standby``) on a temporary RocksDB store: moved
past a newer checkpoint of the owner to each job's first slot after it, a batch at a
time, and what a deleted job leaves dropped."""

from __future__ import annotations

from pathlib import Path

from cronstream.streams.core.schedule import JobSchedule
from cronstream.streams.scheduler.standby import StandbyCopy, move_entries
from cronstream.streams.scheduler.state import PartitionState, StoredDefinition

NOW = 1_800_000_000_000


def schedule(job_id: str, raw: bytes) -> JobSchedule | None:
    """Stand-in for ``Definitions.stored_schedule``: raw is the interval in ms."""
    return JobSchedule(job_id, every_ms=int(raw))


def _copy(tmp_path: Path, jobs: dict[str, int], fired: int) -> StandbyCopy:
    state = PartitionState(tmp_path / "0", schedule)
    for job_id, every in jobs.items():
        state.put_definition(job_id, StoredDefinition(1, NOW, False, str(every).encode()))
        job = schedule(job_id, str(every).encode())
        assert job is not None
        slot = job.slot_due_after(fired)
        assert slot is not None
        state.hold(job_id, slot, None)
    return StandbyCopy(state, next=7, end=7, fired=fired)


def test_entries_passed_by_a_newer_checkpoint_move_to_the_first_slot_after_it(
    tmp_path: Path,
) -> None:
    copy = _copy(tmp_path, {"second": 1_000, "minute": 60_000, "hour": 3_600_000}, NOW)
    assert copy.state.all_entries() == [
        (NOW + 1_000, "second"),
        (NOW + 60_000, "minute"),
        (NOW + 3_600_000, "hour"),
    ]
    copy.moving = (NOW + 90_500, None)  # the owner checkpointed through NOW + 90.5 s
    move_entries(copy, 10)
    assert copy.moving is None
    assert copy.fired == NOW + 90_500
    # each a lower bound of the job's next slot the owner has not emitted, none behind
    assert copy.state.all_entries() == [
        (NOW + 91_000, "second"),
        (NOW + 120_000, "minute"),
        (NOW + 3_600_000, "hour"),
    ]
    meta = copy.state.meta()
    assert meta is not None
    assert (meta.fired_through, meta.jobs_offset) == (NOW + 90_500, 7)
    copy.state.close()


def test_a_long_move_goes_in_batches_each_replacing_what_it_moved(tmp_path: Path) -> None:
    jobs = {f"j{i:02d}": 1_000 * (i + 1) for i in range(25)}
    copy = _copy(tmp_path, jobs, NOW)
    copy.moving = (NOW + 30_000, None)
    calls = 0
    while copy.moving is not None:
        move_entries(copy, 10)
        calls += 1
        entries = copy.state.all_entries()
        assert len(entries) == 25  # each moved entry replaced at once, none lost
        behind = sum(due <= NOW + 30_000 for due, _ in entries)
        assert behind == max(0, 25 - 10 * calls)
        if copy.moving is not None:
            meta = copy.state.meta()
            assert meta is None  # the store says it is computed from it only at the end
    assert calls == 3
    for due, job_id in copy.state.all_entries():
        assert due == ((NOW + 30_000) // jobs[job_id] + 1) * jobs[job_id]
    copy.state.close()


def test_a_deleted_job_loses_its_entry_when_the_checkpoint_passes_it(tmp_path: Path) -> None:
    copy = _copy(tmp_path, {"kept": 1_000, "gone": 1_000}, NOW)
    copy.state.delete_definition("gone")  # a tombstone read from the jobs topic
    copy.moving = (NOW + 5_000, None)
    move_entries(copy, 10)
    assert copy.state.all_entries() == [(NOW + 6_000, "kept")]
    copy.state.close()
