"""A run's output (docs/run-output.md): what the worker keeps of what an attempt printed
or returned (its last bytes, an http body's first), redacted as its error is, published
with its outcome only when there is one; the sink's row of it; the CLI's rendering."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cronstream.cli import main
from cronstream.cli.history import _shown
from cronstream.consumers.core.output import Output, fit, head, kept, tail
from cronstream.consumers.errors import ExecutionFailed
from cronstream.consumers.executors.base import RunContext
from cronstream.schemas.events import RunOutcome, RunRequest, RunStatus, Target
from cronstream.schemas.output import RunOutput
from cronstream.schemas.redact import scrub
from tests.processors import NOW, RUNS, TOPICS, SinkHarness, WorkerHarness

SECRET = "op-s3cret-value-0042"  # a value resolved for the attempt (secret:NAME)


# -- the rule: at most the limit, the last bytes ------------------------------------------
def test_output_over_the_limit_keeps_its_last_bytes_not_its_first() -> None:
    printed = "first line\n" + "x" * 100 + "\nlast line\n"
    assert kept(printed, 20) == ("xxxxxxxxx\nlast line\n", "start")
    assert kept(b"a" * 10 + b"END", 3) == ("END", "start")


def test_an_output_within_the_limit_is_kept_whole_and_none_is_nothing() -> None:
    assert kept("done", 64) == ("done", None)
    assert kept(b"\x00\x01ok", 64) == ("\x00\x01ok", None)
    for nothing in ("", b"", Output(b"")):
        assert kept(nothing, 64) is None
    assert kept("something", 0) is None  # --output-limit 0: none kept


def test_the_cut_never_splits_a_character_and_bad_bytes_become_replacements() -> None:
    text = "é" * 10  # two bytes each
    assert tail(text.encode(), 5) == ("é" * 2).encode()  # not a lone continuation byte
    assert head(text.encode(), 5) == ("é" * 2).encode()
    assert head("a€".encode(), 3) == b"a"  # the euro sign's three bytes do not fit
    assert kept(b"ok \xff\xfe", 64) == ("ok \ufffd\ufffd", None)
    assert kept("lone \udc80 surrogate", 64) == ("lone \ufffd\ufffd\ufffd surrogate", None)


def test_an_http_body_keeps_its_start_and_says_its_end_was_dropped() -> None:
    body = Output(b"<html>" + b"x" * 100, dropped="end")
    assert kept(body, 6) == ("<html>", "end")
    assert kept(Output(b"short", dropped="end"), 64) == ("short", "end")  # the worker read no more
    assert kept(Output(b"0123456789", dropped="start"), 4) == ("6789", "start")
    assert fit("ab***cd", 4, "end") == ("ab**", "end")
    assert fit("ab***cd", 4, None) == ("**cd", "start")


def test_a_secret_cut_at_the_start_of_a_kept_output_is_scrubbed_too() -> None:
    assert scrub(SECRET[-10:] + " rest", [SECRET]) == "*** rest"
    assert scrub(SECRET[-5:] + " rest", [SECRET]) == SECRET[-5:] + " rest"  # under MIN_PART
    assert scrub("start " + SECRET[:8], [SECRET]) == "start ***"


# -- the worker: one RunOutput with the outcome, none without output ----------------------
class Printing:
    """An executor whose attempts print their payload, after resolving a secret; one whose
    payload starts with "fail" fails with that output."""

    kind = "printing"

    def execute(self, target: Target, context: RunContext) -> str | None:
        context.revealed.add(SECRET)
        payload = context.payload or ""
        if payload.startswith("fail"):
            raise ExecutionFailed("exit status 1", output=payload)
        return payload or None


@pytest.fixture
def worker() -> Iterator[WorkerHarness]:
    from cronstream.consumers.worker.config import WorkerConfig

    h = WorkerHarness(WorkerConfig(group="g", concurrency=4, output_limit=64))
    h.attempts.executors = dict.fromkeys(h.attempts.executors, Printing())
    yield h
    h.close()


def run(run_id: str, payload: str | None, **fields: Any) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        job_id="j",
        scheduled_at=NOW,
        fired_at=NOW,
        payload=payload,
        target=Target(type="python", callable="m:f"),
        **fields,
    )


def test_a_run_that_prints_nothing_writes_no_output_record(worker: WorkerHarness) -> None:
    worker.read(worker.codec.encode(RUNS, run("j@quiet", None)))
    worker.run_all()
    assert [o.status for o in worker.outcomes()] == [RunStatus.SUCCEEDED]
    assert worker.producer.on(TOPICS.run_output) == []


def test_a_runs_output_is_published_with_its_outcome_redacted_and_cut(
    worker: WorkerHarness,
) -> None:
    printed = "x" * 100 + f" token {SECRET} https://user:pw@example.com/x?token=abc end"
    worker.read(worker.codec.encode(RUNS, run("j@loud", printed)))
    worker.run_all()
    (output,) = worker.outputs()
    assert (output.run_id, output.job_id, output.tenant, output.attempt, output.status) == (
        "j@loud",
        "j",
        "default",
        1,
        "SUCCEEDED",
    )
    assert SECRET not in output.output
    assert "user:pw" not in output.output
    assert "token=abc" not in output.output
    assert output.output.endswith("/x?token=*** end")  # its end: the last 64 bytes
    assert len(output.output.encode()) <= 64
    assert output.dropped == "start"
    assert (output.target_type, output.worker) == ("python", "w1")
    (record,) = worker.producer.on(TOPICS.run_output)
    assert record.key == b"j"  # keyed as its outcome: the job id
    headers = dict(record.headers or [])
    assert (headers["run_id"], headers["status"]) == (b"j@loud", b"SUCCEEDED")
    # published in the flush before the commit, after its outcome
    order = [r.topic for r in worker.producer.produced]
    assert order.index(TOPICS.run_output) > order.index(TOPICS.history)


def test_a_failed_attempts_output_is_kept_with_its_failure(worker: WorkerHarness) -> None:
    worker.read(worker.codec.encode(RUNS, run("j@bad", f"fail: {SECRET} is wrong")))
    worker.run_all()
    (output,) = worker.outputs()
    assert (output.status, output.output, output.dropped) == ("FAILED", "fail: *** is wrong", None)
    assert [o.status for o in worker.outcomes()] == [RunStatus.FAILED]


# -- the sink: a row with the output's TTL ------------------------------------------------
def output_record(**fields: Any) -> RunOutput:
    base: dict[str, Any] = {
        "run_id": "j@1",
        "job_id": "j",
        "status": "SUCCEEDED",
        "scheduled_at": NOW,
        "recorded_at": NOW,
        "output": "hello\n",
    }
    return RunOutput(**{**base, **fields})


def test_the_sink_writes_an_output_to_its_table_with_its_own_ttl() -> None:
    h = SinkHarness()
    value = h.codec.encode(TOPICS.run_output, output_record(dropped="start"))
    (row,), reason = h.rows_of(value, TOPICS.run_output)
    assert reason is None
    table, values = row
    assert table == "run_output"
    assert values[:8] == ("j@1", 1, "j", "default", "SUCCEEDED", NOW, NOW, "hello\n")
    assert values[8] == "start"
    assert values[-1] == 14 * 86_400  # CRONSTREAM_OUTPUT_TTL, not history's year


def test_the_sink_dead_letters_an_output_it_cannot_write_and_goes_on() -> None:
    h = SinkHarness()
    huge = h.codec.encode(TOPICS.run_output, output_record(output="x" * (512 * 1024 + 1)))
    assert h.rows_of(huge, TOPICS.run_output) == (
        [],
        "over the limits: output of 524289 characters, over 524288",
    )
    outcome = RunOutcome(
        run_id="j@1", job_id="j", status=RunStatus.SUCCEEDED, scheduled_at=NOW, recorded_at=NOW
    )
    built, reason = h.rows_of(h.codec.encode(TOPICS.history, outcome), TOPICS.run_output)
    assert built == []
    assert str(reason).startswith("not a RunOutput")


# -- reading it ---------------------------------------------------------------------------
def test_the_cli_shows_an_output_with_its_line_breaks_and_no_escape_sequence() -> None:
    shown = _shown(output_record(output="line 1\n\x1b[31mred\x1b[0m https://u:p@h/\n"))
    assert shown == "line 1\n\\x1b[31mred\\x1b[0m https://***@h/"


def test_history_output_needs_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "j", "--output"]) == 2
    assert "--output shows one run's output: give --run RUN_ID" in capsys.readouterr().err
