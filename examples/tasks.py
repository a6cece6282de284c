"""Example callables for `target: python` jobs (see examples/jobs.yaml)."""

from __future__ import annotations

from typing import Any


def send_digest(context: Any) -> str:
    """Stands in for real work; the run context carries run_id (the idempotency key)."""
    return f"digest for run {getattr(context, 'run_id', context)}"
