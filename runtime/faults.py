"""One rule, for every processor, for "this record made my code raise".

Bad input is refused where it is recognised (a DecodeError, a limit, a validation
problem): that is data, with its own reason. What is left is an exception nobody
expected while handling one record: a bug of ours that this record's values reach. A
processor must neither stop for everyone on it (every restart would read the same
record again and stop again) nor pretend it did not happen. So, around the handling of
ONE record, a processor calls ``RecordFaults.fault`` when an exception escapes, and
``RecordFaults.ok`` when the handling succeeded:

- the record is named in one log line (topic, partition, offset, key), with the
  traceback the first time its code site is seen (a flood of one bad record does not
  write a traceback per record), and counted in ``cronstream_record_faults_total{role}``;
- the caller gets a ``Fault``: the reason (the exception's type and message, redacted,
  at most REASON_CHARS) and the record's place, from which it writes a refusal (the
  admission's TenantResult) or a DLQ record (``Fault.letter``), moves its offset on
  and goes on;
- infrastructure is never a record's fault: Kafka, the registry, the network or the
  disk (``INFRASTRUCTURE``, plus what a role adds, e.g. Cassandra's driver errors),
  our own stop, and MemoryError are raised again, unchanged, to the caller's outage
  handling, and nothing is dead-lettered for them.

**The crash rule.** A bug that fails every record still stops the process, with
RepeatedFault naming the count: when STREAK records in a row have failed (no success in
between: ``ok`` resets the streak) AND they came from at least SOURCES distinct sources.
A source is the record's tenant when it names one other than the operators'
(``default``); otherwise its key (the job id), or its topic-partition without one.

Why these numbers. One tenant sending hostile records, however many, is one source: it
cannot stop a processor that other tenants share, whatever the streak. A bug reached by
every record shows on any three sources at once, and in a processor shared by several
tenants (or by many operator jobs) records of different sources interleave, so twenty
failures in a row from three of them without a single success is not bad input by
chance. Twenty bounds what a bug costs before the process stops: twenty refusals or
dead letters per start, each of which can be replayed once the bug is fixed (a crash
loop is what the restart alerts and the dead-letter rate show). Operators' records
(tenant ``default``) are trusted: their distinct job ids count as distinct sources, so
a single-tenant deployment's bug stops the process as well.

Each handler of a process keeps its own ``RecordFaults``: a success in one handler (the
worker's intake decoding a run) says nothing about another (starting it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError, RepeatedFault
from cronstream.runtime.kafka.clients import KafkaException
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.events import DeadLetter
from cronstream.schemas.redact import clip, escape_controls, redact_text
from cronstream.schemas.tenancy import OPERATORS

log = logging.getLogger("cronstream.faults")
STREAK = 20
SOURCES = 3
REASON_CHARS = 1000
TRACED_SITES = 256  # code sites whose traceback was logged, per handler (then one line each)


# Not a record's fault: the outage handling of the caller deals with these (or the
# process stops). OSError covers the network (ConnectionError, TimeoutError) and the
# disk (full, read-only); a handler whose own record can cause one (a name too long for
# a file) refuses that record before it gets there.
INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    KafkaException,
    PublishError,
    RegistryUnavailable,
    OSError,
    MemoryError,
    RepeatedFault,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One record a handler raised on: its place, its source and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    source: str
    reason: str
    streak: int  # failures in a row, this one included

    def letter(
        self,
        stage: str,
        *,
        value: bytes | None = None,
        job_id: str | None = None,
        run_id: str | None = None,
        attempt: int | None = None,
    ) -> DeadLetter:
        """The DLQ record of the faulty record (counted in ``cronstream_dead_letters``)."""
        return dead_letter(
            stage=stage,
            reason=self.reason,
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            key=self.key,
            value=value,
            job_id=job_id,
            run_id=run_id,
            attempt=attempt,
        )


def reason_of(exc: BaseException) -> str:
    """The reason a refusal or dead letter gives: the exception's type and message,
    with URLs' credentials redacted and control characters escaped, cut short."""
    text = escape_controls(redact_text(f"{type(exc).__name__}: {exc}"))
    return f"internal error on this record: {clip(text, REASON_CHARS)}"


def source_of(tenant: str | None, key: bytes | str | None, topic: str, partition: int) -> str:
    """Who a record comes from, for the crash rule (the module's text)."""
    if tenant and tenant != OPERATORS:  # operators are trusted: their job ids count
        source = f"tenant {tenant}"
    elif key:
        source = f"job {key.decode('utf-8', 'replace') if isinstance(key, bytes) else key}"
    else:
        source = f"{topic}[{partition}]"
    return escape_controls(source[:200])


class RecordFaults:
    """The rule for one handler of one process (``role``: the metric's label)."""

    def __init__(
        self,
        role: str,
        *,
        infrastructure: tuple[type[BaseException], ...] = (),
        streak: int = STREAK,
        sources: int = SOURCES,
    ) -> None:
        self.role = role
        self.passing = INFRASTRUCTURE + infrastructure
        self.limit = streak
        self.min_sources = sources
        self.streak = 0
        self.sources: set[str] = set()
        self._traced: set[tuple[str, int]] = set()
        self._counter: Any = metrics.labelled(metrics.record_faults, role)

    def ok(self) -> None:
        """A record was handled: the streak, if any, ends."""
        if self.streak:
            self.streak = 0
            self.sources.clear()

    def fault(
        self,
        exc: BaseException,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | str | None = None,
        tenant: str | None = None,
    ) -> Fault:
        """``exc`` escaped the handling of the record at topic/partition/offset: logged,
        counted and described. Raises ``exc`` itself when it is infrastructure (or our
        stop), and RepeatedFault when it completes the crash rule."""
        if isinstance(exc, self.passing) or not isinstance(exc, Exception):
            raise exc
        raw_key = key.encode("utf-8", "replace") if isinstance(key, str) else key
        source = source_of(tenant, raw_key, topic, partition)
        self.streak += 1
        if len(self.sources) < max(self.limit, self.min_sources):
            self.sources.add(source)
        self._counter.inc()
        place = f"{topic}[{partition}]@{offset} key {escape_controls(repr(raw_key)[:120])}"
        if self.streak >= self.limit and len(self.sources) >= self.min_sources:
            raise RepeatedFault(
                f"{self.role}: {self.streak} records in a row failed, from {len(self.sources)} "
                f"sources ({', '.join(sorted(self.sources)[:5])}...): a bug, not bad input; "
                f"the last: {place}: {type(exc).__name__}: {exc}"
            ) from exc
        site = _site(exc)
        trace = site not in self._traced and len(self._traced) < TRACED_SITES
        if trace:
            self._traced.add(site)
        log.error(
            "%s: record %s (%s) skipped: %s (%d in a row)",
            self.role,
            place,
            source,
            reason_of(exc),
            self.streak,
            exc_info=exc if trace else None,
        )
        return Fault(
            topic=topic,
            partition=partition,
            offset=offset,
            key=raw_key,
            source=source,
            reason=reason_of(exc),
            streak=self.streak,
        )

    def fault_at(
        self, exc: BaseException, msg: ConsumedMessage, *, tenant: str | None = None
    ) -> Fault:
        """``fault`` for a consumed record."""
        key = msg.key()
        return self.fault(
            exc,
            topic=msg.topic() or "",
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            key=key,
            tenant=tenant,
        )


def _site(exc: BaseException) -> tuple[str, int]:
    """Where ``exc`` was raised (its innermost frame): one traceback per site."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return (type(exc).__name__, 0)
    return (tb.tb_frame.f_code.co_filename, tb.tb_lineno)


__all__ = ["INFRASTRUCTURE", "Fault", "RecordFaults", "reason_of", "source_of"]
