"""Outcome observers: what else a settled run tells the rest of the system.

The outbox (``consumers.worker.outbox``) settles each attempt and each deadline check,
then asks every observer the worker was built with (``consumers.worker.loop``) for the
records that go with it; it names none of them. The built-in observers:

- ``flows.FlowNodes``: a flow's node ending, and a flow's deadline check, for the flows
  coordinator (``flows.events``);
- ``deadlines.DeadlineAlerts``: a job's deadline missed, and that alert cleared by a
  late success (``cronstream.alerts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cronstream.schemas.events import RunRequest, RunStatus
from cronstream.schemas.tenancy import AnyEvent

Record = tuple[str, AnyEvent]
"""A record to publish: its topic and its event (keyed and headed by the event)."""


class OutcomeObserver(Protocol):
    """Hears each outcome the worker settles, and answers with the records that go with
    it. Its records are published in step 1 of the commit procedure (``Outbox.settle``),
    in the order the observers were given, after the attempt's own timer or dead letter
    and before its outcome, which waits for their flush; the run's offset is committed
    only after both. A record returned is therefore durable before the run counts as
    done, and published again if the worker stops first (at least once: a reader
    dedupes by the record's identity, the run id).

    Observers are called on the worker's loop thread for every run: they answer at once,
    do no I/O (metrics and logging aside), and raise only on a bug (which stops the
    worker, its runs uncommitted)."""

    def written(self) -> Sequence[tuple[str, type[AnyEvent]]]:
        """Every (topic, event type) its records go to. Their schemas are resolved when
        the worker starts: publishing never waits for the registry."""
        ...

    def settled(
        self,
        run: RunRequest,
        status: RunStatus,
        error: str | None,
        *,
        retrying: bool,
        now_ms: int,
    ) -> Sequence[Record]:
        """The records ``run``'s attempt leaves, ended with ``status`` (every final
        status, DUPLICATE and SKIPPED included; never STARTED). ``error``: its error text
        (None on success); ``retrying``: a retry timer goes with it. Empty: none."""
        ...

    def checked(self, check: RunRequest, *, running: bool, now_ms: int) -> Sequence[Record]:
        """The records a deadline check leaves (a run request with trigger DEADLINE:
        ``consumers.core.deadlines``); ``running``: its run is executing on this worker.
        The check is settled like a run, once these are flushed. Empty: none."""
        ...

    def forget(self, before: datetime) -> None:
        """Drop what it keeps about runs before ``before`` (the worker's dedup
        lookback; called every few seconds)."""
        ...
