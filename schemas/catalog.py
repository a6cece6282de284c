"""Every topic cronstream owns: name, partitions, configs and the event it carries.

Names are ``<prefix>.<suffix>`` with the prefix from the topic prefix setting
(``cronstream`` by default; docs/configuration.md), so tests and side-by-side
deployments stay apart. The bootstrap step creates exactly these topics and registers
one value subject per topic (``<topic>-value``, the registry's TopicNameStrategy, which
Kafka Connect uses too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from cronstream.schemas.alerts import Alert
from cronstream.schemas.audit import AuditRecord
from cronstream.schemas.events import (
    ControlCommand,
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    TimerRequest,
)
from cronstream.schemas.flows import FlowDefinition, FlowEvent
from cronstream.schemas.output import RunOutput
from cronstream.schemas.tenancy import (
    AnyEvent,
    TenantCommand,
    TenantResult,
    commands_topic,
    results_topic,
)

DAY_MS = 86_400_000


def _cfg(**kv: str) -> Mapping[str, str]:
    return MappingProxyType({k.replace("_", "."): v for k, v in kv.items()})


def _kept(days: int) -> Mapping[str, str]:
    """The configs of a topic whose records are deleted after ``days``."""
    return _cfg(retention_ms=str(days * DAY_MS))


# a topic of definitions: the last record of each key kept forever, a tombstone deletes it
_DEFINITIONS = _cfg(cleanup_policy="compact", retention_ms="-1", min_cleanable_dirty_ratio="0.1")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    suffix: str
    value_type: type[AnyEvent]
    doc: str
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fixed_partitions: int | None = None  # None: Settings.partitions


JOBS = TopicSpec(
    suffix="jobs",
    value_type=JobDefinition,
    doc="job definitions, key=job_id, compacted, kept forever; a tombstone deletes a job",
    config=_DEFINITIONS,
)
RUNS = {
    priority: TopicSpec(
        suffix=f"runs.{priority.value.lower()}",
        value_type=RunRequest,
        doc=f"run requests of {priority.value} priority for the workers, key=job_id",
        config=_kept(7),
    )
    for priority in Priority
}
TIMERS = TopicSpec(
    suffix="timers",
    value_type=TimerRequest,
    doc="retry/delay requests, key=job_id, co-partitioned with jobs",
    config=_kept(7),
)
HISTORY = TopicSpec(
    suffix="history",
    value_type=RunOutcome,
    doc="every outcome of every attempt, key=job_id; the sink writes it to Cassandra",
    config=_kept(7),
)
RUN_OUTPUT = TopicSpec(
    suffix="run-output",
    value_type=RunOutput,
    doc="what attempts printed or returned (docs/run-output.md), key=job_id; the sink "
    "writes it to Cassandra with a shorter TTL than history",
    config=_kept(7),
)
DLQ = TopicSpec(
    suffix="dlq",
    value_type=DeadLetter,
    doc="undecodable/invalid records and runs that exhausted their retries",
    config=_kept(30),
)
ALERTS = TopicSpec(
    suffix="alerts",
    value_type=Alert,
    doc="alerts: scheduled runs not succeeded by their deadline, and their clearing; key=job_id",
    config=_kept(30),
)
CONTROL = TopicSpec(
    suffix="control",
    value_type=ControlCommand,
    doc="cancel commands, key=run_id; every worker reads all of it",
    config=_kept(7),
    fixed_partitions=1,
)

FLOWS = TopicSpec(
    suffix="flows",
    value_type=FlowDefinition,
    doc="flow definitions, key=flow_id, compacted, kept forever; a tombstone deletes a flow",
    config=_DEFINITIONS,
)
FLOW_EVENTS = TopicSpec(
    suffix="flows.events",
    value_type=FlowEvent,
    doc="flow run starts, node run outcomes and reruns for the flows coordinator, key=flow_id",
    config=_kept(7),
)

AUDIT = TopicSpec(
    suffix="audit",
    value_type=AuditRecord,
    doc="the audit trail: every definition change and run command, who, when, from where, "
    "the field-level diff; key=job_id, append-only, kept 365 days (as history)",
    config=_kept(365),
)

CATALOG: tuple[TopicSpec, ...] = (
    JOBS,
    *RUNS.values(),
    TIMERS,
    HISTORY,
    DLQ,
    CONTROL,
    FLOWS,
    FLOW_EVENTS,
    ALERTS,
    AUDIT,
    RUN_OUTPUT,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class InternalTopic:
    """A topic of a framework's own, not Avro, not in CATALOG: the flows coordinator's
    (faust-streaming's leader topic and its table's changelog) and the Kafka Connect
    worker's (its configs, offsets and status); the bootstrap creates it, since
    cronstream's users may not create topics."""

    suffix: str
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fixed_partitions: int | None = None  # None: Settings.partitions (the events topic's)


FLOWS_APP = "flows-coordinator"  # the faust app id after "<prefix>."; its topics start so
FLOWS_TABLE = "runs"
CONNECT = "connect"  # the Kafka Connect worker's group and topics after "<prefix>."
TRIGGERS = "triggers-"  # the trigger processor's own topics after "<prefix>."
_COMPACT = _cfg(cleanup_policy="compact")
INTERNAL: tuple[InternalTopic, ...] = (
    InternalTopic(suffix=f"{FLOWS_APP}-__assignor-__leader", fixed_partitions=1),
    InternalTopic(suffix=f"{FLOWS_APP}-{FLOWS_TABLE}-changelog", config=_COMPACT),
    # Kafka Connect's (distributed mode): its configs must be one partition
    InternalTopic(suffix=f"{CONNECT}-configs", config=_COMPACT, fixed_partitions=1),
    InternalTopic(suffix=f"{CONNECT}-offsets", config=_COMPACT),
    InternalTopic(suffix=f"{CONNECT}-status", config=_COMPACT),
    # the trigger processor's checkpoints, key <job>|<topic>|<partition>, JSON
    # (streams.triggers.store): debounce windows and emitted batches per source partition
    InternalTopic(suffix=f"{TRIGGERS}checkpoints", config=_COMPACT),
)

# Per tenant (``tenants add``), not in CATALOG: the bootstrap does not make them.
TENANT_COMMANDS = TopicSpec(
    suffix="t.{tenant}.in",
    value_type=TenantCommand,
    doc="a tenant's commands on its own jobs, key=job_id; only that tenant may write",
    config=_kept(7),
)
TENANT_RESULTS = TopicSpec(
    suffix="t.{tenant}.out",
    value_type=TenantResult,
    doc="the admission's answer to each command, key=job_id; only that tenant may read",
    config=_kept(7),
)


TENANT_TOPICS = "t."  # after "<prefix>.": every tenant's command and result topics


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleAccess:
    """One of cronstream's processes, the one list of them (``ROLES``): what it does on
    Kafka, and so all the bootstrap lets
    its user (``cronstream-<role>``) do: read (and describe) ``reads``, write
    ``writes``; ``tenant_topics``: read and write every tenant's command and result
    topics (``<prefix>.t.``); ``group_configs``: describe and alter the configs of the
    groups under the prefix (a KIP-848 group's session timeout is one,
    ``runtime.kafka.groups``). Every role may use consumer groups under the prefix."""

    reads: tuple[TopicSpec, ...] = ()
    writes: tuple[TopicSpec, ...] = ()
    tenant_topics: bool = False
    # read and write the INTERNAL topics starting "<prefix>.<internal>" ("": none)
    internal: str = ""
    # The history tables in Cassandra, as its own login (cassandra_role_user):
    # "write" (SELECT and MODIFY), "read" (SELECT), "" (no login of its own).
    history: str = ""
    group_configs: bool = False
    # Beyond Kafka and Cassandra: ``make run``'s metrics port for it is the base port
    # (the metrics base port setting) plus this (None: no port of its own there); it
    # counts its record faults (``runtime.faults``) and dead letters under its name.
    metrics_slot: int | None = None
    faults: bool = False
    dead_letters: bool = False
    # A cronstream process: a command of its name, deployed by a Kubernetes manifest and
    # a systemd unit of its own (``infra/deploy/``). Not so: a user another program
    # connects as (Kafka Connect's worker).
    deployed: bool = True


_RUNS = tuple(RUNS.values())
# Who reads and writes what (the bootstrap's ACLs follow this table; a role that needs
# another topic fails with TOPIC_AUTHORIZATION_FAILED until it is added here).
ROLES: Mapping[str, RoleAccess] = MappingProxyType(
    {
        # fires due runs; records skipped slots and refused definitions; cancels the runs
        # it emitted ahead (--lookahead-ms) of a job paused or deleted before they were due
        "scheduler": RoleAccess(
            reads=(JOBS, TIMERS),
            writes=(*_RUNS, HISTORY, DLQ, TIMERS, CONTROL),
            metrics_slot=0,
            faults=True,
            dead_letters=True,
        ),
        # executes runs; replays history for dedup; retries go to timers; deadline alerts;
        # what runs printed; sets its group's session timeout (a KIP-848 group keeps it on
        # the broker)
        "worker": RoleAccess(
            reads=(*_RUNS, CONTROL, HISTORY),
            writes=(HISTORY, TIMERS, DLQ, FLOW_EVENTS, ALERTS, RUN_OUTPUT),
            group_configs=True,
            metrics_slot=1,
            faults=True,
            dead_letters=True,
        ),
        # history and run-output topics -> Cassandra; undecodable records to the dead letters;
        # sets its group's session timeout (each sink its share of each topic: KIP-848)
        "sink": RoleAccess(
            reads=(HISTORY, RUN_OUTPUT),
            writes=(DLQ,),
            history="write",
            group_configs=True,
            metrics_slot=2,
            faults=True,
            dead_letters=True,
        ),
        # history topic -> the Parquet archive (files; undecodable records skipped, records
        # it cannot archive to the dead letters)
        "archiver": RoleAccess(
            reads=(HISTORY,), writes=(DLQ,), metrics_slot=5, faults=True, dead_letters=True
        ),
        # tenants' commands -> jobs, triggers and cancels; answers to each tenant
        "admission": RoleAccess(
            reads=(JOBS,),
            writes=(JOBS, *_RUNS, CONTROL, AUDIT),
            tenant_topics=True,
            metrics_slot=3,
            faults=True,
        ),
        # the HTTP API: a tenant's commands go through the admission like the tenant's own
        "api": RoleAccess(reads=(JOBS,), tenant_topics=True, history="read"),
        # the dashboard (cronstream ui): the API's access, the dead letters, flows and audit
        # trail it shows, and the admin's acts: operators' jobs changed (audited), manual
        # runs and cancels, a flow run's failed part rerun (a flow event), and a dead
        # letter's source record replayed to where it came from
        "ui": RoleAccess(
            reads=(JOBS, DLQ, FLOWS, AUDIT),
            writes=(JOBS, *_RUNS, CONTROL, AUDIT, HISTORY, TIMERS, FLOW_EVENTS),
            tenant_topics=True,
            history="read",
        ),
        # flow runs: starts and node outcomes -> node run requests; flows' outcomes recorded;
        # a flow run replaced (concurrency replace) cancels its node runs; flow deadlines
        "flows-coordinator": RoleAccess(
            reads=(FLOWS, FLOW_EVENTS),
            writes=(*_RUNS, HISTORY, DLQ, CONTROL, ALERTS),
            internal=f"{FLOWS_APP}-",
            metrics_slot=4,
            faults=True,
            dead_letters=True,
        ),
        # dependent jobs (after:): definitions and history in, their runs out; refused
        # dependents to the dead letters
        "dependencies": RoleAccess(
            reads=(JOBS, HISTORY),
            writes=(*_RUNS, DLQ),
            metrics_slot=6,
            faults=True,
            dead_letters=True,
        ),
        # the Kafka Connect worker (infra.connect): its own topics; its sinks read history
        "connect": RoleAccess(reads=(HISTORY,), internal=f"{CONNECT}-", deployed=False),
        # event triggers (streams.triggers.processor): definitions with on: -> run requests; refused
        # definitions and records to the dead letters; its checkpoints. The source topics
        # it reads are granted apart: each tenant's <tenant>. (infra.tenants), operators'
        # with `python -m cronstream.infra trigger-sources add` (docs/event-triggers.md, "Access")
        "triggers": RoleAccess(
            reads=(JOBS,),
            writes=(*_RUNS, DLQ),
            internal=TRIGGERS,
            metrics_slot=7,
            faults=True,
            dead_letters=True,
        ),
    }
)


def role_user(role: str) -> str:
    """The Kafka user of cronstream's process ``role`` (a key of ROLES)."""
    return f"cronstream-{role}"


def triggers_group(prefix: str) -> str:
    """The trigger processor's consumer group (docs/event-triggers.md): the offsets of
    the source topics it has read are committed there, and a trigger's lag is read from
    them (the API, the dashboard)."""
    return f"{prefix}.triggers"


def cassandra_role_user(role: str) -> str:
    """The Cassandra login of ``role`` (one whose RoleAccess.history is set)."""
    return f"cronstream_{role}"


class Namespace(Protocol):
    """Where a deployment's topics live: ``runtime.settings.Settings`` is one. (The
    catalog takes only these two facts, so ``schemas`` depends on nothing of ours.)"""

    @property
    def topic_prefix(self) -> str: ...
    @property
    def partitions(self) -> int: ...


class _Named:
    """An attribute of ``Topics`` that is one catalog topic's full name."""

    def __init__(self, spec: TopicSpec) -> None:
        self.spec = spec

    def __get__(self, topics: Topics, owner: object = None) -> str:
        return topics.name(self.spec)


class Topics:
    """The catalog resolved against one namespace: concrete names and partition counts."""

    jobs = _Named(JOBS)
    timers = _Named(TIMERS)
    history = _Named(HISTORY)
    dlq = _Named(DLQ)
    run_output = _Named(RUN_OUTPUT)
    control = _Named(CONTROL)
    alerts = _Named(ALERTS)
    flows = _Named(FLOWS)
    flow_events = _Named(FLOW_EVENTS)
    audit = _Named(AUDIT)

    def __init__(self, settings: Namespace) -> None:
        self.prefix = settings.topic_prefix
        self._partitions = settings.partitions
        self._by_name = {self.name(spec): spec for spec in CATALOG}

    def name(self, spec: TopicSpec) -> str:
        return f"{self.prefix}.{spec.suffix}"

    def partitions(self, spec: TopicSpec | InternalTopic) -> int:
        return spec.fixed_partitions or self._partitions

    def spec(self, name: str) -> TopicSpec | None:
        """The spec of a full topic name, or None when cronstream does not own it."""
        return self._by_name.get(name)

    def subject(self, spec: TopicSpec) -> str:
        return f"{self.name(spec)}-value"

    def runs(self, priority: Priority) -> str:
        return self.name(RUNS[priority])

    def internal(self) -> list[tuple[str, InternalTopic]]:
        return [(f"{self.prefix}.{t.suffix}", t) for t in INTERNAL]

    def layout(self) -> dict[str, tuple[int, Mapping[str, str]]]:
        """Every topic the bootstrap makes, the catalog's and the flows coordinator's
        own: name -> (partitions, configs)."""
        both: list[tuple[str, TopicSpec | InternalTopic]] = [*self.all(), *self.internal()]
        return {name: (self.partitions(spec), spec.config) for name, spec in both}

    def names(self) -> list[str]:
        """Every topic name of the namespace (``layout``'s)."""
        return list(self.layout())

    def tenant_commands(self, tenant: str) -> str:
        return commands_topic(self.prefix, tenant)

    def tenant_results(self, tenant: str) -> str:
        return results_topic(self.prefix, tenant)

    def all(self) -> list[tuple[str, TopicSpec]]:
        return [(self.name(spec), spec) for spec in CATALOG]

    def resolve(self, name: str) -> str:
        """Accept a full topic name or a catalog suffix ('jobs', 'runs.high')."""
        if name in self._by_name:
            return name
        qualified = f"{self.prefix}.{name}"
        if qualified in self._by_name:
            return qualified
        return name
