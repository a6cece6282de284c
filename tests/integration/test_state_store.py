"""Two tiers on the real stack (``cronstream scheduler --state-dir``): a scheduler killed
with -9 under load and a fresh process on the same store take over without replaying the
jobs topic, missing no slot; the store a live scheduler kept up to date equals the one
``--rebuild-index`` builds from the jobs topic, and ``--check-index`` says so (and says
when it does not)."""

from __future__ import annotations

import re
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cronstream.producers.client import JobClient
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import Priority
from cronstream.schemas.serde import Codec
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.state import PartitionState, index_view
from tests.integration.helpers import CronstreamProcess, cronstream, read_topic

pytestmark = pytest.mark.integration
URL = "https://example.com/hook"


def _put(ns: Settings, specs: list[dict[str, Any]]) -> None:
    with JobClient(ns) as client:
        client.put_many(
            job_from_spec({"target": "http", "url": URL, **spec}, max_payload_bytes=65536)
            for spec in specs
        )


def _slot_ms(run_id: str) -> int:
    from datetime import datetime

    text = run_id.rpartition("@")[2].replace("Z", "+00:00")
    return int(datetime.fromisoformat(text).timestamp() * 1000)


NEAR = [{"id": f"near-{i}", "every": "2s"} for i in range(150)]
# Due every 90 s, spread over it: most are beyond the 60 s horizon (in the store only).
FAR = [
    {"id": f"far-{i}", "every": "90s", "anchor": f"1970-01-01T00:00:{i % 60:02d}Z"}
    for i in range(150)
]


def _missed(ns: Settings, started_ms: int, ended_ms: int, killed_ms: int) -> list[tuple[str, int]]:
    """Slots of NEAR and FAR due from ``started_ms`` to ``ended_ms`` with no run request:
    (job id, ms after the kill)."""
    fired: dict[str, set[int]] = defaultdict(set)
    for record in read_topic(ns, Topics(ns).runs(Priority.NORMAL)):
        fired[record.headers["job_id"]].add(_slot_ms(record.headers["run_id"]))
    missing = []
    for spec in NEAR + FAR:
        every = 2000 if spec["id"].startswith("near") else 90_000
        anchor = int(spec.get("anchor", "1970-01-01T00:00:00Z")[-3:-1]) * 1000
        first_slot = anchor + ((started_ms - anchor) // every + 1) * every
        for slot in range(first_slot, ended_ms, every):
            if slot not in fired[spec["id"]]:
                missing.append((spec["id"], slot - killed_ms))
    return missing


def test_a_kill9_takeover_on_the_same_store_reads_no_definition_and_misses_no_slot(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    state = tmp_path / "state"
    _put(ns, NEAR + FAR)
    first = CronstreamProcess(
        ns, tmp_path, "first", "--state-dir", str(state), "--commit-interval", "500ms"
    )
    procs.append(first)
    first.wait_live(ns.partitions, timeout=120)
    started_ms = int(time.time() * 1000)
    time.sleep(20)
    first.kill9()
    killed_ms = int(time.time() * 1000)
    second = CronstreamProcess(ns, tmp_path, "second", "--state-dir", str(state))
    procs.append(second)
    second.wait_live(ns.partitions, timeout=120)
    time.sleep(max(0.0, started_ms / 1000 + 120 - time.time()))
    second.stop()
    ended_ms = int(time.time() * 1000) - 3000

    # The fresh process read only what came after the store's point: no definition.
    read = [int(n) for n in re.findall(r"reading (\d+) definitions", second.log())]
    assert read, "no assignment logged"
    assert sum(read) == 0, read
    held = [int(n) for n in re.findall(r"live: (\d+) jobs", second.log())]
    assert sum(held) < 300, f"{sum(held)} of 300 jobs held in memory right after the takeover"

    missing = _missed(ns, started_ms, ended_ms, killed_ms)
    assert not missing, f"{len(missing)} slots missed (ms after the kill): {missing[:10]}"


def test_a_host_lost_with_its_disk_is_taken_over_from_a_standby_store(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """The owner is killed with -9 and its state directory deleted (its host
    and disk are gone); a second scheduler that kept standby stores takes every
    partition over from them: no definition read again, no slot missed."""
    _put(ns, NEAR + FAR)
    session = ("--session-timeout", "6s", "--commit-interval", "500ms")
    lost_disk = tmp_path / "lost"
    first = CronstreamProcess(
        ns, tmp_path, "first", "--state-dir", str(lost_disk), "--instance-id", "first", *session
    )
    procs.append(first)
    first.wait_live(ns.partitions, timeout=120)
    started_ms = int(time.time() * 1000)
    second = CronstreamProcess(
        ns,
        tmp_path,
        "second",
        "--state-dir",
        str(tmp_path / "standby"),
        "--instance-id",
        "second",
        *session,
    )
    procs.append(second)
    _wait_log(second, r"standby stores warm", 120)
    time.sleep(20)  # it joined, and took its share from its standby stores
    first.kill9()
    shutil.rmtree(lost_disk)
    killed_ms = int(time.time() * 1000)
    second.wait_live(ns.partitions, timeout=120)  # its share, then the rest
    time.sleep(max(0.0, started_ms / 1000 + 120 - time.time()))
    second.stop()
    ended_ms = int(time.time() * 1000) - 3000

    log = second.log()
    taken = set(re.findall(r"partition (\d+) taken over from its standby store", log))
    assert taken == {str(p) for p in range(ns.partitions)}, log[-3000:]
    assert "not warm yet" not in log
    assert "rebuilt from the jobs topic" not in log
    read = [int(n) for n in re.findall(r"reading (\d+) definitions, checkpoint", log)]
    assert read, "no assignment logged"
    assert sum(read) == 0, read
    missing = _missed(ns, started_ms, ended_ms, killed_ms)
    assert not missing, f"{len(missing)} slots missed (ms after the kill): {missing[:10]}"


def _wait_log(proc: CronstreamProcess, pattern: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while not re.search(pattern, proc.log()):
        assert time.time() < deadline, f"{pattern!r} not logged: {proc.log()[-2000:]}"
        time.sleep(0.5)


def _view(store: Path, ns: Settings, after_ms: int) -> dict[str, dict[str, Any]]:
    with registry_client(ns, writer=True) as registry:
        definitions = Definitions(Codec(registry))
        views: dict[str, dict[str, Any]] = {}
        for path in sorted((store / Topics(ns).jobs).iterdir()):
            state = PartitionState(path, definitions.stored_schedule)
            try:
                views[path.name] = index_view(state, after_ms)  # type: ignore[assignment]
            finally:
                state.close()
        return views


def _fired_through(store: Path, ns: Settings) -> int:
    points = []
    for path in (store / Topics(ns).jobs).iterdir():
        state = PartitionState(path, lambda _k, _v: None)
        meta = state.meta()
        state.close()
        assert meta is not None
        points.append(meta.fired_through)
    return max(points)


def test_the_store_kept_live_equals_the_one_rebuilt_from_the_jobs_topic(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    kept = tmp_path / "kept"
    specs: list[dict[str, Any]] = [
        {"id": f"c-{i}", "cron": f"{i % 60} * * * * *"} for i in range(60)
    ]
    specs += [{"id": f"i-{i}", "every": f"{5 + i}s"} for i in range(40)]
    specs += [{"id": "once", "at": "2099-01-01T00:00:00Z"}, {"id": "manual"}]
    _put(ns, specs[:50])
    sched = CronstreamProcess(ns, tmp_path, "kept", "--state-dir", str(kept))
    procs.append(sched)
    sched.wait_live(ns.partitions, timeout=120)
    _put(ns, specs[50:])  # read live
    time.sleep(3)
    changed = [{**spec, "every": "7m"} for spec in specs[60:70]]  # from seconds to minutes
    _put(ns, [*changed, {"id": "c-3", "cron": "0 0 * * * *", "paused": True}])
    with JobClient(ns) as client:
        for job_id in ("c-5", "i-30", "once"):
            client.delete(job_id)
    time.sleep(5)
    sched.stop()

    check = cronstream(ns, "scheduler", "--state-dir", str(kept), "--check-index")
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        f"{ns.partitions} partition stores checked against the jobs topic: 0 differences"
        in check.stdout
    )

    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(kept, rebuilt)
    again = CronstreamProcess(
        ns, tmp_path, "rebuilt", "--state-dir", str(rebuilt), "--rebuild-index"
    )
    procs.append(again)
    again.wait_live(ns.partitions, timeout=120)
    again.stop()
    assert again.log().count("--rebuild-index") == ns.partitions
    check = cronstream(ns, "scheduler", "--state-dir", str(rebuilt), "--check-index")
    assert check.returncode == 0, check.stdout + check.stderr

    after = max(_fired_through(kept, ns), _fired_through(rebuilt, ns))
    kept_view, rebuilt_view = _view(kept, ns, after), _view(rebuilt, ns, after)
    assert kept_view == rebuilt_view
    jobs = {job_id for view in kept_view.values() for job_id in view}
    assert jobs == {s["id"] for s in specs} - {"c-5", "i-30", "once"}

    # A store that lost a definition is told apart.
    broken = tmp_path / "broken"
    shutil.copytree(kept, broken)
    for path in (broken / Topics(ns).jobs).iterdir():
        state = PartitionState(path, lambda _k, _v: None)
        if state.definition("c-7") is not None:
            state.delete_definition("c-7")
        state.close()
    check = cronstream(ns, "scheduler", "--state-dir", str(broken), "--check-index")
    assert check.returncode == 1
    assert "job 'c-7'" in check.stdout
    assert "1 differences" in check.stdout
