"""Job definitions as the scheduling core sees them.

Loading a partition turns every definition on it into a ``JobSchedule``: the timing
fields only (``Codec.decode_timing``: the head read by hand, see ``schemas.timing``),
with the raw record kept as the body. The whole definition is decoded, and its run
template built, only when a job comes within the wheel's horizon (``prepare``): at a
million schedules that is most of what a restart costs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from cronstream.runtime.faults import RecordFaults
from cronstream.schemas.definition import loading_problems
from cronstream.schemas.definition.memo import Memo
from cronstream.schemas.definition.zones import load_zone
from cronstream.schemas.errors import CronError, DecodeError, RegistryUnavailable, ZoneError
from cronstream.schemas.events import JobDefinition, RunRequest, Trigger, from_ms
from cronstream.schemas.limits import deadline_problems, refusal
from cronstream.schemas.serde import Codec
from cronstream.schemas.templates import RunTemplate
from cronstream.schemas.timing import schedule_args
from cronstream.streams.core.schedule import JobSchedule, Misfire

log = logging.getLogger("cronstream.scheduler")
EPOCH = from_ms(0)  # a placeholder: each fire fills in its own times


@dataclass(slots=True)
class Prepared:
    """A job's body once it is within the horizon: raw definition plus its run template,
    and for a job with a deadline what each fire's deadline check needs (the deadline,
    and the check's run request with the slot's fields left to fill in)."""

    raw: bytes
    template: RunTemplate
    deadline_ms: int | None = None
    deadline_check: RunRequest | None = None


class Definitions:
    """Reads definitions for one processor (misfire policies shared between jobs)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        # A definition that makes loading it raise (here, or in the core: ``Reading``).
        self.faults = RecordFaults("scheduler")
        # Jobs share a policy object (a million definitions, a handful of policies); the
        # key is what a definition chose (up to 1,000 x 30 days of milliseconds), so
        # the table is bounded: 4,096 policies, ~1 MB, forgotten at once when full.
        self._misfires: Memo[tuple[str, int, int], Misfire] = Memo(4096)

    def schedule(self, key: str, raw: bytes) -> JobSchedule:
        """The core's view of the definition ``raw`` stored under ``key``. Raises
        DecodeError (or the core's CronError/ZoneError) for one that cannot be used,
        whatever its schedule type."""
        t = self.codec.decode_timing(raw)
        if t.job_id != key:
            raise DecodeError(f"record key {key!r} differs from job_id {t.job_id!r}")
        problems = loading_problems(t, len(raw))
        if problems:
            raise DecodeError(refusal(problems))
        # Checked for every schedule type, not only cron: a definition the client would
        # refuse ("America") is refused here too (found by make chaos: an interval job
        # took such an update and carried it).
        load_zone(t.timezone)
        misfire = self._misfires.get(t.misfire)
        if misfire is None:
            misfire = self._misfires.keep(t.misfire, Misfire(*t.misfire))
        return JobSchedule(
            t.job_id,
            timezone=t.timezone,
            start_ms=t.start_ms,
            end_ms=t.end_ms,
            jitter_ms=t.jitter_ms,
            paused=t.paused,
            misfire=misfire,
            body=raw,
            tenant=t.tenant,
            **t.schedule,
        )

    def stored_schedule(self, key: str, raw: bytes) -> JobSchedule | None:
        """``schedule`` of a definition from a partition's store (``streams.scheduler.state``);
        None if it cannot be used. While the registry is unreachable (only a process
        that never read this schema asks it) this waits for it: a job taken for
        deleted would be lost."""
        while True:
            try:
                return self.schedule(key, raw)
            except (DecodeError, CronError, ZoneError):
                return None
            except RegistryUnavailable as exc:
                log.warning("loading job %r from the store waits for the registry: %s", key, exc)
                time.sleep(1)
            except Exception as exc:  # a bug it reaches: not loaded (dead-lettered at settling)
                self.faults.fault(
                    exc,
                    topic="(partition store)",
                    partition=-1,
                    offset=-1,
                    key=key,
                    tenant=self.tenant_of(raw),
                )
                return None

    def tenant_of(self, raw: bytes) -> str | None:
        """The tenant a definition names, if its timing fields can be read (a fault's
        source: ``runtime.faults``)."""
        try:
            return self.codec.decode_timing(raw).tenant
        except Exception:  # only names the source; the fault itself is reported
            return None

    def prepare(self, job: JobSchedule) -> Prepared:
        """Decode ``job``'s whole definition and build its run template (once)."""
        body = job.body
        if type(body) is Prepared:
            return body
        definition = self.codec.decode(body, JobDefinition)
        deadline = definition.deadline_ms
        if deadline_problems(deadline):  # from another producer than ``jobs put``
            log.warning(
                "job %r: deadline %s ms is out of range (1 ms to 7 days): ignored",
                definition.job_id,
                deadline,
            )
            deadline = None
        check = None
        if deadline is not None:
            check = definition.run_request(
                run_id="", scheduled_at=EPOCH, fired_at=EPOCH, trigger=Trigger.DEADLINE
            )
        prepared = Prepared(
            raw=body, template=RunTemplate(definition), deadline_ms=deadline, deadline_check=check
        )
        job.body = prepared
        return prepared


def preview_slots(job: JobDefinition, from_ms_: int, count: int) -> list[int]:
    """Up to ``count`` slots of ``job`` at or after ``from_ms_``, as the scheduler
    computes them (no jitter): `cronstream jobs preview`, the dashboard's next fires."""
    schedule = JobSchedule(job.job_id, timezone=job.timezone, **schedule_args(job.schedule))
    slots: list[int] = []
    after = from_ms_ - 1
    while len(slots) < count:
        slot = schedule.slot_after(after)
        if slot is None:
            break
        slots.append(slot)
        after = slot
    return slots
