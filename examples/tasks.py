"""Example callables for `target: python` jobs (see examples/jobs.yaml).

A callable gets the run context: ``run_id`` (the idempotency key), ``job_id``,
``attempt``, ``scheduled_at``, ``payload``, and ``cancelled``/``remaining()`` for
cooperative cancellation and timeouts. Raising fails the attempt (it is retried with
backoff until ``max_attempts``); the return value is the attempt's output, kept two weeks
(``cronstream history --run ID --output``, docs/run-output.md).
"""

from __future__ import annotations

import json
from typing import Any


def send_digest(context: Any) -> str:
    """Stands in for real work; the run context carries run_id (the idempotency key)."""
    return f"digest for run {getattr(context, 'run_id', context)}"


def flaky(context: Any) -> str:
    """Fails every first attempt, succeeds on the retry: shows retries in history."""
    if context.attempt == 1:
        raise RuntimeError("first attempts of this example always fail")
    return f"succeeded on attempt {context.attempt}"


def hopeless(context: Any) -> str:
    """Always fails: after max_attempts the run is dead-lettered."""
    raise RuntimeError(f"this example never succeeds (attempt {context.attempt})")


def slow(context: Any) -> str:
    """Works for the payload's ``seconds`` (default 3), stopping at once when the run is
    cancelled (a cancel, or a newer run replacing it: ``concurrency: replace``); raising
    then makes the attempt CANCELED, not retried."""
    try:
        seconds = float(json.loads(context.payload or "{}").get("seconds", 3))
    except (ValueError, TypeError, AttributeError):
        seconds = 3.0
    if context.cancelled.wait(max(0.0, min(seconds, context.remaining()))):
        raise RuntimeError("cancelled while working")
    return f"worked {seconds:g} s"
