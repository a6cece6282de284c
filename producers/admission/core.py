"""The admission's decisions, pure: a tenant's command, the jobs as known, the quotas and
``now`` in; what to write out (``Decision``).

- The tenant is the one whose commands topic the record came from (the caller says);
  a definition's own ``tenant`` and ``job_id`` fields are replaced, never trusted.
- A tenant's job ``x`` is stored as ``tenant/x`` (``schemas.tenancy.qualify``), so a
  tenant can name, change, delete, trigger and cancel only its own jobs: another
  tenant's job is simply not in its namespace ("no job").
- Quotas: at most ``max_jobs`` jobs per tenant (a put of a new job over it is refused);
  at most ``max_event_jobs`` of them with an event trigger (``on:``: each one is a
  trigger the trigger processor keeps per source partition, with its open windows and
  batches; a put that would make one more is refused); at most ``triggers_per_minute``
  accepted manual runs per tenant in any 60 s (a trigger over it is refused, saying when
  the next one fits). The event runs themselves are emitted by the trigger processor,
  which the admission never sees: that processor counts them against the tenant's rate
  (docs/event-triggers.md, "Tenants"). Every refusal is a result with its
  reason and its code (``schemas.tenancy.RefusalCode``: not_found, quota, invalid,
  policy; unreadable and internal for a record that is no command or that made the
  processor raise) on the tenant's results topic; nothing is dropped silently. Each
  refusal is made as a ``Refusal`` (code and reason together) where it is decided.
- Target policy (``schemas.policy``): a put whose target the tenant is not granted (a
  private address, another tenant's or cronstream's topic, python, shell) is refused
  naming the rule; ``policy`` is the current one (the processor keeps it fresh).
- Text no topic can hold (a lone surrogate in any field: ``schemas.limits.unencodable``)
  is refused first, naming the field, code ``invalid``; the answer quotes the command's
  ids as text a topic can hold (``carried``).
- Triggers: the jobs a tenant's job comes ``after`` are its own, qualified as its id is
  (``after: [extract]`` is stored ``acme/extract``); a source topic (``on:``) that is
  not one of the tenant's own (``source_problems``) is refused as the target policy
  refuses, code ``policy``, every rule broken named at once.
- A trigger without an idempotency key uses the command's id as the key, so a command
  read twice (after a crash of the admission) names the same run, which workers
  execute once.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, replace
from datetime import datetime

from cronstream.schemas.definition import problems as definition_problems
from cronstream.schemas.definition.triggers import source_problems
from cronstream.schemas.events import (
    ControlAction,
    ControlCommand,
    JobDefinition,
    RunRequest,
    Trigger,
)
from cronstream.schemas.ids import job_id_of, manual_run_id
from cronstream.schemas.instants import to_ms
from cronstream.schemas.limits import (
    MAX_JOB_ID,
    carried,
    idempotency_key_problems,
    name_problems,
    unencodable,
)
from cronstream.schemas.policy import TenantPolicy
from cronstream.schemas.redact import clip
from cronstream.schemas.tenancy import (
    RefusalCode,
    TenantAction,
    TenantCommand,
    TenantResult,
    qualify,
    unqualify,
)

MINUTE_MS = 60_000
MAX_REASON = 2000  # characters of a refusal's reason kept in the answer


@dataclass(frozen=True, slots=True)
class Quotas:
    max_jobs: int = 1000
    max_event_jobs: int = 100  # jobs with on: (of max_jobs)
    triggers_per_minute: int = 600


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a command is refused: its code for machines, its reason for people."""

    code: RefusalCode
    reason: str


def _refusal(code: RefusalCode, problems: list[str]) -> Refusal:
    """Every problem found, in one reason."""
    return Refusal(code, "; ".join(problems))


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What one command makes: always a result; at most one of the writes."""

    result: TenantResult
    job: tuple[str, JobDefinition | None] | None = None  # (stored id, None: delete)
    run: RunRequest | None = None
    cancel: ControlCommand | None = None


class JobsView:
    """The current definitions of every tenant, as the jobs topic has them."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobDefinition] = {}
        self.counts: Counter[str] = Counter()  # tenant -> jobs
        self.event_counts: Counter[str] = Counter()  # tenant -> jobs with on:

    def observe(self, job_id: str, job: JobDefinition | None) -> None:
        """A definition (None: a tombstone) as written to the jobs topic, by the
        admission or by an operator."""
        old = self.jobs.pop(job_id, None)
        if old is not None:
            self.counts[old.tenant] -= 1
            self.event_counts[old.tenant] -= int(old.on is not None)
        if job is not None:
            self.jobs[job_id] = job
            self.counts[job.tenant] += 1
            self.event_counts[job.tenant] += int(job.on is not None)

    def of_tenant(self, tenant: str, job_id: str) -> JobDefinition | None:
        """``tenant``'s job ``job_id`` (its own id), or None."""
        job = self.jobs.get(qualify(tenant, job_id))
        return job if job is not None and job.tenant == tenant else None


class Admission(JobsView):
    """The jobs as the admission knows them (all tenants'), and each tenant's recent
    triggers."""

    def __init__(
        self, quotas: Quotas, *, max_payload_bytes: int, policy: TenantPolicy | None = None
    ) -> None:
        super().__init__()
        self.quotas = quotas
        self.policy = policy or TenantPolicy()
        self.max_payload_bytes = max_payload_bytes
        self.triggers: dict[str, deque[int]] = {}  # tenant -> accepted triggers' ms

    def unreadable(self, key: str, offset: int, reason: str, now: datetime) -> Decision:
        """The answer to a record that is not a command this admission can read."""
        return Decision(
            result=TenantResult(
                command_id="",
                action=None,
                job_id=clip(key, MAX_JOB_ID),
                accepted=False,
                recorded_at=now,
                source_offset=offset,
                reason=clip(reason, MAX_REASON),
                code=RefusalCode.UNREADABLE,
            )
        )

    def faulted(self, command: TenantCommand, offset: int, reason: str, now: datetime) -> Decision:
        """The answer to a command that made the admission raise (``runtime.faults``:
        ``reason`` is the fault's)."""
        return self._answer(command, offset, now, Refusal(RefusalCode.INTERNAL, reason))

    def decide(
        self, tenant: str, command: TenantCommand, *, offset: int, now: datetime
    ) -> Decision:
        problems = unencodable(command)  # any field: alone, the others' reasons quote them
        if problems:
            return self._answer(command, offset, now, _refusal(RefusalCode.INVALID, problems))
        problems = [
            *name_problems("command id", command.command_id, 200),
            *name_problems("job id", command.job_id, MAX_JOB_ID - len(tenant) - 1),
        ]
        if problems:
            return self._answer(command, offset, now, _refusal(RefusalCode.INVALID, problems))
        stored = qualify(tenant, command.job_id)
        if command.action is TenantAction.PUT:
            return self._put(tenant, stored, command, offset, now)
        job = self.of_tenant(tenant, command.job_id)
        if job is None:
            why = Refusal(RefusalCode.NOT_FOUND, f"no job {command.job_id!r}")
            return self._answer(command, offset, now, why)
        if command.action is TenantAction.CANCEL:
            return self._cancel(tenant, command, offset, now)
        if command.action is TenantAction.DELETE:
            self.observe(stored, None)
            return replace(self._answer(command, offset, now), job=(stored, None))
        if command.action is TenantAction.TRIGGER:
            return self._trigger(tenant, job, command, offset, now)
        paused = command.action is TenantAction.PAUSE
        updated = replace(job, paused=paused, updated_at=now)
        self.observe(stored, updated)
        return replace(self._answer(command, offset, now), job=(stored, updated))

    def _put(
        self, tenant: str, stored: str, command: TenantCommand, offset: int, now: datetime
    ) -> Decision:
        if command.job is None:
            why = Refusal(RefusalCode.INVALID, "PUT without a job definition")
            return self._answer(command, offset, now, why)
        after = tuple(qualify(tenant, upstream) for upstream in command.job.after)
        job = replace(command.job, job_id=stored, tenant=tenant, after=after, updated_at=now)
        problems = definition_problems(job, max_payload_bytes=self.max_payload_bytes)
        if problems:
            return self._answer(command, offset, now, _refusal(RefusalCode.INVALID, problems))
        problems = [
            *self.policy.problems(tenant, stored, job.target),
            *source_problems(tenant, job),
        ]
        if problems:
            return self._answer(command, offset, now, _refusal(RefusalCode.POLICY, problems))
        over = self._over_quota(tenant, stored, job)
        if over is not None:
            return self._answer(command, offset, now, Refusal(RefusalCode.QUOTA, over))
        self.observe(stored, job)
        return replace(self._answer(command, offset, now), job=(stored, job))

    def _over_quota(self, tenant: str, stored: str, job: JobDefinition) -> str | None:
        """Why putting ``job`` as ``stored`` would take ``tenant`` over a job quota."""
        old = self.jobs.get(stored)
        have, limit = self.counts[tenant], self.quotas.max_jobs
        if old is None and have >= limit:
            return f"job quota: tenant {tenant!r} has {have} of its {limit} jobs"
        have, limit = self.event_counts[tenant], self.quotas.max_event_jobs
        if job.on is not None and (old is None or old.on is None) and have >= limit:
            return (
                f"event job quota: tenant {tenant!r} has {have} of its {limit} jobs with "
                "an event trigger (on:)"
            )
        return None

    def _trigger(
        self, tenant: str, job: JobDefinition, command: TenantCommand, offset: int, now: datetime
    ) -> Decision:
        key = command.idempotency_key or command.command_id
        problems = idempotency_key_problems(key)
        if problems:
            return self._answer(command, offset, now, _refusal(RefusalCode.INVALID, problems))
        now_ms = to_ms(now)
        recent = self.triggers.setdefault(tenant, deque())
        while recent and recent[0] <= now_ms - MINUTE_MS:
            recent.popleft()
        limit = self.quotas.triggers_per_minute
        if len(recent) >= limit:
            wait_s = (recent[0] + MINUTE_MS - now_ms) / 1000
            why = f"trigger quota: at most {limit} manual runs per minute; the next fits in "
            return self._answer(
                command, offset, now, Refusal(RefusalCode.QUOTA, f"{why}{wait_s:.1f} s")
            )
        recent.append(now_ms)
        run = job.run_request(
            run_id=manual_run_id(job.job_id, key),
            scheduled_at=now,
            fired_at=now,
            trigger=Trigger.MANUAL,
        )
        own = unqualify(tenant, run.run_id)
        return replace(self._answer(command, offset, now, run_id=own), run=run)

    def _cancel(self, tenant: str, command: TenantCommand, offset: int, now: datetime) -> Decision:
        run_id = command.run_id or ""
        try:
            owner = job_id_of(run_id)
        except ValueError as exc:
            return self._answer(command, offset, now, Refusal(RefusalCode.INVALID, str(exc)))
        if owner != command.job_id:
            why = f"run {run_id!r} is not a run of job {command.job_id!r}"
            return self._answer(command, offset, now, Refusal(RefusalCode.INVALID, why))
        stored = qualify(tenant, run_id)
        cancel = ControlCommand(
            command_id=command.command_id,
            action=ControlAction.CANCEL,
            run_id=stored,
            job_id=qualify(tenant, owner),
            issued_at=now,
            reason=command.reason,
        )
        return replace(self._answer(command, offset, now, run_id=run_id), cancel=cancel)

    @staticmethod
    def _answer(
        command: TenantCommand,
        offset: int,
        now: datetime,
        refusal: Refusal | None = None,
        *,
        run_id: str | None = None,
    ) -> Decision:
        """Refused for ``refusal``'s code and reason, else accepted."""
        return Decision(
            result=TenantResult(
                # an id too long to echo: answered by its offset, as an unreadable record is
                # (echoed as ``carried``: a command built in this process, not read from
                # Avro, may hold text no topic can: ``unencodable``)
                command_id=carried(command.command_id)
                if len(command.command_id) <= MAX_JOB_ID
                else "",
                action=command.action,
                job_id=carried(clip(command.job_id, MAX_JOB_ID)),
                accepted=refusal is None,
                recorded_at=now,
                source_offset=offset,
                run_id=run_id,
                reason=None if refusal is None else carried(clip(refusal.reason, MAX_REASON)),
                code=None if refusal is None else refusal.code,
            )
        )
