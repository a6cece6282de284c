"""Fuzz: the worker reads, starts and settles any schema-valid run request,
however hostile (template of its outcome, verdicts on its retry policy and timeout, its
concurrency policy), or dead-letters it as bad input; no step raises or counts as a
record fault. No executor reaches a target (``tests.processors.Recording``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given

from cronstream.schemas.events import RunRequest
from tests.hostile import FUZZ, run_requests
from tests.processors import RUNS, WorkerHarness


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerHarness]:
    h = WorkerHarness()
    yield h
    h.close()


@FUZZ
@given(run=run_requests())
def test_a_hostile_run_request_is_run_or_dead_lettered(
    worker: WorkerHarness, run: RunRequest
) -> None:
    worker.read(worker.codec.encode(RUNS, run))
    worker.run_all()
    assert worker.intake.faults.streak == 0, [x.reason for x in worker.letters()[-1:]]
    assert worker.attempts.faults.streak == 0, [x.reason for x in worker.letters()[-1:]]
