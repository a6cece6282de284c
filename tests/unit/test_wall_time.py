"""One rule for wall times without an offset, whoever reads them: a cron slot, `--at`,
`--anchor`, `--start`, `--end`. A skipped wall time (spring-forward) is the transition
instant; a repeated one (fall-back) is its first occurrence. And `jobs preview` shows
what the scheduler's core computes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cronstream.cli import main
from cronstream.schemas.definition import job_from_spec, parse_instant
from cronstream.schemas.definition.cron import cron_times
from cronstream.schemas.definition.zones import TZDATA_VERSION, load_zone, wall_instant_ms
from cronstream.schemas.errors import ZoneError
from cronstream.schemas.events import IntervalSchedule, OnceSchedule, iso
from cronstream.streams.scheduler.checkpoint import Checkpoint

NY = "America/New_York"  # spring 2026-03-08 07:00Z (02:00 EST -> 03:00 EDT); fall 2026-11-01 06:00Z


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("wall", "zone", "instant"),
    [
        ("2026-03-08T02:30", NY, "2026-03-08T07:00"),  # skipped: the transition (03:00 EDT)
        ("2026-03-08T02:00", NY, "2026-03-08T07:00"),
        ("2026-03-08T03:00", NY, "2026-03-08T07:00"),  # the first wall time after the gap
        ("2026-11-01T01:30", NY, "2026-11-01T05:30"),  # repeated: the first (EDT) pass
        ("2026-07-01T09:00", "Europe/Paris", "2026-07-01T07:00"),  # exists once
        ("2026-10-04T02:15", "Australia/Lord_Howe", "2026-10-03T15:30"),  # 30-minute gap
        ("2011-12-30T12:00", "Pacific/Apia", "2011-12-30T10:00"),  # a skipped day
    ],
)
def test_a_wall_time_is_one_instant_by_one_rule(wall: str, zone: str, instant: str) -> None:
    assert wall_instant_ms(datetime.fromisoformat(wall), load_zone(zone)) == int(
        utc(instant).timestamp() * 1000
    )
    assert parse_instant(wall, zone) == utc(instant)


def test_cron_and_at_agree_on_a_skipped_wall_time() -> None:
    cron = cron_times("30 2 * * *", NY).next_after(int(utc("2026-03-08T00:00").timestamp() * 1000))
    spec = {"id": "j", "target": "python", "callable": "m:f", "tz": NY}
    at = job_from_spec({**spec, "at": "2026-03-08T02:30"}, max_payload_bytes=100).schedule
    anchor = job_from_spec(
        {**spec, "every": "1d", "anchor": "2026-03-08T02:30"}, max_payload_bytes=100
    ).schedule
    assert isinstance(at, OnceSchedule)
    assert isinstance(anchor, IntervalSchedule)
    assert iso(at.at) == iso(anchor.anchor) == "2026-03-08T07:00:00.000Z"
    assert cron == int(at.at.timestamp() * 1000)


def test_start_and_end_follow_the_same_rule() -> None:
    spec = {
        "id": "j",
        "target": "python",
        "callable": "m:f",
        "tz": NY,
        "cron": "0 * * * *",
        "start": "2026-03-08T02:10",
        "end": "2026-11-01T01:10",
    }
    job = job_from_spec(spec, max_payload_bytes=100)
    assert job.start_at == utc("2026-03-08T07:00")
    assert job.end_at == utc("2026-11-01T05:10")


@pytest.mark.parametrize("name", ["America", "Europe/../etc/passwd", "x" * 300, "Mars/Base", ""])
def test_a_zone_that_is_not_an_iana_name_is_refused(name: str) -> None:
    with pytest.raises(ZoneError):
        load_zone(name)


def test_zones_come_from_the_pinned_tzdata_package() -> None:
    import tzdata

    assert TZDATA_VERSION == tzdata.IANA_VERSION
    assert load_zone("Europe/Paris").key == "Europe/Paris"


def test_the_checkpoint_carries_the_zone_database_version() -> None:
    point = Checkpoint(
        fired_through=1, jobs_offset=2, timers_from=3, timers_offset=4, tzdata=TZDATA_VERSION
    )
    assert Checkpoint.from_metadata(point.to_metadata()) == point
    older = '{"v":1,"w":1,"j":2,"tf":3,"t":4}'  # written before the field existed
    assert Checkpoint.from_metadata(older) == Checkpoint(1, 2, 3, 4, None)


def test_preview_shows_the_cores_slots_in_utc_and_in_the_zone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "jobs",
            "preview",
            "--cron",
            "30 2 * * *",
            "--tz",
            NY,
            "--from",
            "2026-03-07T00:00",
            "--count",
            "3",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out) == [
        {"utc": "2026-03-07T07:30:00.000Z", "local": "2026-03-07T02:30:00-05:00"},
        {"utc": "2026-03-08T07:00:00.000Z", "local": "2026-03-08T03:00:00-04:00"},
        {"utc": "2026-03-09T06:30:00.000Z", "local": "2026-03-09T02:30:00-04:00"},
    ]


def test_preview_of_a_past_one_time_job_shows_nothing_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["jobs", "preview", "--at", "2026-01-01T00:00Z", "--from", "2026-02-01T00:00Z"]) == 0
    )
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["UTC                        LOCAL (UTC)"]
    assert "no more fires: 0 in all" in captured.err


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--cron", "0 0 30 2 *"], "never fires"),
        (["--every", "1h", "--count", "0"], "--count must be 1-1000"),
        (["--cron", "* * * * *", "--tz", "America"], "unknown time zone"),
        ([], "give --cron, --every or --at"),
    ],
)
def test_preview_refuses_bad_input_with_a_message(
    args: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["jobs", "preview", *args]) == 2
    assert problem in capsys.readouterr().err


def test_a_takeover_from_another_zone_database_is_logged_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from cronstream.streams.scheduler.loading import check_zone_database

    same = Checkpoint(1, 2, 3, 4, TZDATA_VERSION)
    check_zone_database(7, same)
    check_zone_database(7, Checkpoint(1, 2, 3, 4, None))  # from before the field existed
    assert caplog.records == []
    check_zone_database(7, Checkpoint(1, 2, 3, 4, "2019a"))
    (record,) = caplog.records
    assert record.levelname == "ERROR"
    assert "partition 7" in record.getMessage()
    assert "tzdata 2019a" in record.getMessage()
