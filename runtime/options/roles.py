"""The roles' own settings (a role: a key of ``schemas.catalog.ROLES``), the commands'
and ``make run``'s; each also a flag of its command (``Option.add_to``), the flag
winning. The services' settings: ``runtime.options.services``.
"""

from __future__ import annotations

from types import MappingProxyType

from cronstream.runtime.options.option import (
    NOTHING,
    PORT,
    SIZE,
    Family,
    Old,
    Option,
    duration,
    names,
    number,
    old_ms,
    old_per_minute,
    path,
    switch,
    text,
    whole,
)
from cronstream.schemas.catalog import ROLES

RUN_BY = "`make run`"
FIRING = "scheduler, dependencies, flows-coordinator, `runs backfill`"
TENANT_CLI = "`cronstream tenant`"


def _variable(role: str, name: str) -> str:
    """A role's own variable: ``CRONSTREAM_<ROLE>_<NAME>``."""
    return f"CRONSTREAM_{role.upper().replace('-', '_')}_{name}"


def _metrics_port(role: str) -> Option[int]:
    old = (Old("CRONSTREAM_FLOWS_METRICS_PORT", SIZE),) if role == "flows-coordinator" else ()
    return Option(
        _variable(role, "METRICS_PORT"),
        SIZE,
        0,
        "serve `/metrics`, `/healthz` and `/readyz` on this port (0: off)",
        role,
        flag="--metrics-port",
        old=old,
    )


def _session_timeout(role: str, help: str) -> Option[int]:
    """How long a silent member of ``role``'s consumer group keeps its partitions (its
    older variable ``..._MS`` and flag ``--session-timeout-ms`` in milliseconds)."""
    env = _variable(role, "SESSION_TIMEOUT")
    return Option(
        env,
        duration,
        10_000,
        help,
        role,
        flag="--session-timeout",
        old=(Old(f"{env}_MS", old_ms),),
        old_flags=("--session-timeout-ms",),
    )


def _commit_interval(env: str, role: str, help: str, *, old: str, old_flag: str) -> Option[int]:
    """How often ``role`` commits its progress (``old`` and ``old_flag``: its older
    variable and flag, in milliseconds)."""
    return Option(
        env,
        duration,
        1000,
        help,
        role,
        flag="--commit-interval",
        old=(Old(old, old_ms),),
        old_flags=(old_flag,),
    )


def _allowed(target: str, help: str, *, default_doc: str | None = None) -> Option[tuple[str, ...]]:
    """What the worker lets ``target``'s jobs reach (a target type's allow list)."""
    return Option(
        f"CRONSTREAM_{target.upper()}_ALLOW",
        names,
        NOTHING,
        help,
        "worker",
        flag=f"--{target}-allow",
        default_doc=default_doc,
    )


def _listening(role: str, port: int) -> tuple[Option[str], Option[int]]:
    """The address and the port ``role`` serves HTTP on."""
    host = Option(_variable(role, "HOST"), text, "127.0.0.1", "the address it listens on", role)
    return host, Option(_variable(role, "PORT"), PORT, port, "the port it listens on", role)


# role -> its metrics port, for every role ``make run`` gives one
METRICS_PORTS = MappingProxyType(
    {role: _metrics_port(role) for role, access in ROLES.items() if access.metrics_slot is not None}
)

# The scheduler

MISFIRE_THRESHOLD = Option(
    "CRONSTREAM_MISFIRE_THRESHOLD",
    duration,
    60_000,
    "a slot later than this is a misfire (its job's policy applies); later by less, it "
    "just fires late",
    "scheduler",
    flag="--misfire-threshold",
    old=(Old("CRONSTREAM_MISFIRE_THRESHOLD_MS", old_ms),),
    old_flags=("--misfire-threshold-ms",),
)
COMMIT_INTERVAL = _commit_interval(
    "CRONSTREAM_COMMIT_INTERVAL",
    "scheduler",
    "how often progress is committed (bounds the runs emitted again after a crash)",
    old="CRONSTREAM_CHECKPOINT_MS",
    old_flag="--checkpoint-ms",
)
SCHEDULER_SESSION_TIMEOUT = _session_timeout(
    "scheduler", "how long a silent (killed) scheduler keeps its partitions"
)
LOOKAHEAD = Option(
    "CRONSTREAM_LOOKAHEAD",
    duration,
    1000,
    "emit run requests up to this long before they are due (the worker holds each until "
    "its due time), so a boundary burst has left before the boundary; 0: when due; at "
    "most 60s",
    "scheduler",
    flag="--lookahead",
    old=(Old("CRONSTREAM_LOOKAHEAD_MS", old_ms),),
    old_flags=("--lookahead-ms",),
)
SCHEDULER_STATE_DIR = Option(
    "CRONSTREAM_SCHEDULER_STATE_DIR",
    path,
    None,
    "two tiers: every job in a RocksDB store per partition under this directory, in "
    "memory only what is due within the next minute",
    "scheduler",
    flag="--state-dir",
)
SCHEDULER_INSTANCE_ID = Option(
    "CRONSTREAM_SCHEDULER_INSTANCE_ID",
    text,
    None,
    "static group membership: a scheduler started again with the same id takes its "
    "partitions back at once",
    "scheduler",
    flag="--instance-id",
)
SCHEDULER_STANDBY = Option(
    "CRONSTREAM_SCHEDULER_STANDBY",
    switch,
    True,
    "with a state directory, keep standby stores of the partitions other schedulers own "
    "(0: `--no-standby`)",
    "scheduler",
)
TENANT_FIRES_PER_SECOND = Option(
    "CRONSTREAM_TENANT_FIRES_PER_SECOND",
    number,
    1000.0,
    "runs fired per second per tenant (0: no limit); the excess is deferred at the rate, "
    "never dropped; tenant 'default' is never limited",
    FIRING,
    flag="--tenant-fires-per-second",
)
TENANT_FIRE_RATES = Option(
    "CRONSTREAM_TENANT_FIRE_RATES",
    names,
    NOTHING,
    "`TENANT=N`, comma-separated: a tenant's own fires per second",
    FIRING,
    flag="--tenant-fire-rate",
)

# The worker

WORKER_CONCURRENCY = Option(
    "CRONSTREAM_WORKER_CONCURRENCY",
    whole(1),
    32,
    "attempts executing at once",
    "worker",
    flag="--concurrency",
)
WORKER_DESTINATION_SLOTS = Option(
    "CRONSTREAM_WORKER_DESTINATION_SLOTS",
    SIZE,
    None,
    "of those, at most this many to one destination (a kafka topic partition, an http "
    "origin); the rest wait for one",
    "worker",
    flag="--destination-slots",
    default_doc="half the concurrency",
)
WORKER_SESSION_TIMEOUT = _session_timeout(
    "worker",
    "how long a silent (killed) worker keeps its partitions: its group's, set on the "
    "broker at start",
)
WORKER_GRACE = Option(
    "CRONSTREAM_WORKER_GRACE",
    duration,
    30_000,
    "how long running attempts may finish on SIGTERM",
    "worker",
    flag="--grace",
)
WORKER_DEDUP_CAPACITY = Option(
    "CRONSTREAM_WORKER_DEDUP_CAPACITY",
    whole(1000),
    2_000_000,
    "run ids remembered for dedup at most (~130 bytes each; the oldest go first)",
    "worker",
    flag="--dedup-capacity",
)
WORKER_STARTED_AFTER = Option(
    "CRONSTREAM_WORKER_STARTED_AFTER",
    duration,
    1000,
    "publish a run's STARTED record once it has executed this long (0: at its start)",
    "worker",
    flag="--started-after",
    old=(Old("CRONSTREAM_WORKER_STARTED_AFTER_MS", old_ms),),
    old_flags=("--started-after-ms",),
)
WORKER_OUTPUT_LIMIT = Option(
    "CRONSTREAM_WORKER_OUTPUT_LIMIT",
    SIZE,
    64 * 1024,
    "bytes kept of what each attempt printed or returned, its last (at most 524288; 0 keeps none)",
    "worker",
    flag="--output-limit",
)
HTTP_ALLOW = _allowed(
    "http", "networks (CIDR), comma-separated, http targets may call although not public"
)
SHELL_ALLOW = _allowed(
    "shell", "patterns of whole commands shell targets may run, comma-separated (none: shell off)"
)
SHELL_ENV = Option(
    "CRONSTREAM_SHELL_ENV",
    names,
    NOTHING,
    "names of the worker's variables shell targets also get, comma-separated",
    "worker",
    flag="--shell-env",
)
PYTHON_ALLOW = Option(
    "CRONSTREAM_PYTHON_ALLOW",
    names,
    NOTHING,
    "module prefixes or `module:function`s python targets may call, comma-separated "
    "(added to the flag's)",
    "worker",
    default_doc="`examples` (the repository's)",
)
KAFKA_ALLOW = _allowed(
    "kafka",
    "topic patterns (fnmatch), comma-separated, kafka targets may write to",
    default_doc="none: any topic but cronstream's and `__*`",
)
SECRETS_DIR = Option(
    "CRONSTREAM_SECRETS_DIR",
    path,
    None,
    "a directory of secret files for `secret:NAME` header values",
    "worker",
    flag="--secrets-dir",
)
SECRET = Family(
    "CRONSTREAM_SECRET_",
    "an operators' job's `secret:NAME` when no file holds it",
    "worker",
    "CRONSTREAM_SECRET_<NAME>",
)
TENANT_SECRET = Family(
    "CRONSTREAM_TENANT_SECRET_",
    "a tenant's `secret:NAME` when no file holds it",
    "worker",
    "CRONSTREAM_TENANT_SECRET_<TENANT>__<NAME>",
)
TENANT_CREDENTIALS = Option(
    "CRONSTREAM_TENANT_CREDENTIALS",
    path,
    None,
    "where `tenant-<name>.secret` files are: a tenant's kafka targets write as the tenant",
    "worker",
    flag="--tenant-credentials",
    default_doc="the stack's credentials",
)
TENANT_WEIGHTS = Option(
    "CRONSTREAM_TENANT_WEIGHTS",
    names,
    NOTHING,
    "`TENANT=N`, comma-separated: a tenant's starts per turn (default 1 each)",
    "worker",
    flag="--tenant-weight",
)
# What a shell target's command is given besides its environment (not settings)
SHELL_RUN_ENV = ("CRONSTREAM_RUN_ID", "CRONSTREAM_JOB_ID", "CRONSTREAM_ATTEMPT")

# The admission (and the worker's grants)

TENANT_MAX_JOBS = Option(
    "CRONSTREAM_TENANT_MAX_JOBS",
    SIZE,
    1000,
    "jobs one tenant may have (a put of a new one over it is refused; 0: no limit)",
    "admission",
    flag="--max-jobs",
)
TENANT_MAX_EVENT_JOBS = Option(
    "CRONSTREAM_TENANT_MAX_EVENT_JOBS",
    SIZE,
    100,
    "of those, jobs with an event trigger (`on:`) one tenant may have (0: no limit)",
    "admission",
    flag="--max-event-jobs",
)
TENANT_TRIGGERS_PER_SECOND = Option(
    "CRONSTREAM_TENANT_TRIGGERS_PER_SECOND",
    number,
    10.0,
    "manual and event runs one tenant may start per second (a minute's worth at once; 0: no limit)",
    "admission, triggers",
    flag="--triggers-per-second",
    old=(Old("CRONSTREAM_TENANT_TRIGGERS_PER_MINUTE", old_per_minute),),
    # the admission's and the trigger processor's older flags, per minute
    old_flags=("--triggers-per-minute", "--tenant-runs-per-minute"),
)
TENANT_GRANTS = Option(
    "CRONSTREAM_TENANT_GRANTS",
    names,
    NOTHING,
    "`TENANT:KIND=VALUE` grants, comma-separated: targets beyond public http and the "
    "tenant's own topics",
    "admission, worker",
    flag="--grant",
)
TENANT_POLICY = Option(
    "CRONSTREAM_TENANT_POLICY",
    path,
    None,
    "a file of grants, one a line, re-read when it changes",
    "admission, worker",
    flag="--policy",
    default_doc="the stack's `security/tenant-grants`",
)

# Tenants' Kafka quotas (`tenants add`)

TENANT_PRODUCE_BYTES_PER_S = Option(
    "CRONSTREAM_TENANT_PRODUCE_BYTES_PER_S",
    SIZE,
    1_048_576,
    "a new tenant's Kafka produce quota, bytes per second (0: none)",
    "`tenants add`",
)
TENANT_FETCH_BYTES_PER_S = Option(
    "CRONSTREAM_TENANT_FETCH_BYTES_PER_S",
    SIZE,
    4_194_304,
    "a new tenant's Kafka fetch quota, bytes per second (0: none)",
    "`tenants add`",
)
TENANT_REQUEST_PERCENTAGE = Option(
    "CRONSTREAM_TENANT_REQUEST_PERCENTAGE",
    SIZE,
    25,
    "a new tenant's Kafka request-time quota, percent (0: none)",
    "`tenants add`",
)

# The API and the dashboard

API_HOST, API_PORT = _listening("api", 8780)
UI_HOST, UI_PORT = _listening("ui", 8780)
ALLOWED_HOSTS = Option(
    "CRONSTREAM_ALLOWED_HOSTS",
    names,
    NOTHING,
    "further `Host` names requests may be addressed to, comma-separated (DNS rebinding)",
    "api, ui",
    flag="--allowed-host",
)
API_TOKENS_FILE = Option(
    "CRONSTREAM_API_TOKENS_FILE",
    path,
    None,
    "the token book (SHA-256 digests), re-read when it changes",
    "api, ui",
    default_doc="the stack's `security/api-tokens.json`",
)

# `cronstream tenant`, a tenant's own command

TENANT = Option("CRONSTREAM_TENANT", text, None, "your tenant name", TENANT_CLI, flag="--tenant")
API_URL = Option(
    "CRONSTREAM_API_URL",
    text,
    None,
    "through `cronstream api` at this URL instead of Kafka",
    TENANT_CLI,
    flag="--api",
)
API_TOKEN = Option("CRONSTREAM_API_TOKEN", text, None, "the API token", TENANT_CLI)
API_TOKEN_FILE = Option(
    "CRONSTREAM_API_TOKEN_FILE",
    path,
    None,
    "a file holding the API token",
    TENANT_CLI,
    flag="--token-file",
)

# The flows coordinator, the dependency processor and the trigger processor

FLOWS_COORDINATOR_NICE = Option(
    "CRONSTREAM_FLOWS_COORDINATOR_NICE",
    SIZE,
    10,
    "its CPU niceness, below the scheduler's where they share cores (0: unchanged)",
    "flows-coordinator",
    flag="--nice",
    old=(Old("CRONSTREAM_FLOWS_NICE", SIZE),),
)
DEPENDENCIES_COMMIT_INTERVAL = _commit_interval(
    "CRONSTREAM_DEPENDENCIES_COMMIT_INTERVAL",
    "dependencies",
    "how often its offsets are committed (the runs of the records a start reads again are "
    "emitted again, flagged)",
    old="CRONSTREAM_DEPENDENCIES_COMMIT_MS",
    old_flag="--commit-ms",
)
TRIGGERS_COMMIT_INTERVAL = _commit_interval(
    "CRONSTREAM_TRIGGERS_COMMIT_INTERVAL",
    "triggers",
    "how often progress is committed (bounds the runs written again after a crash)",
    old="CRONSTREAM_TRIGGERS_CHECKPOINT_MS",
    old_flag="--checkpoint-ms",
)
TRIGGERS_SESSION_TIMEOUT = _session_timeout(
    "triggers", "how long a silent trigger processor keeps its source partitions"
)
TRIGGERS_ALLOW_TOPICS = Option(
    "CRONSTREAM_TRIGGERS_ALLOW_TOPICS",
    names,
    NOTHING,
    "cronstream's own topics operators' jobs may trigger on, comma-separated",
    "triggers",
    flag="--allow-topic",
)

# `make run`

RUN_EXAMPLES = Option(
    "CRONSTREAM_RUN_EXAMPLES", switch, True, "apply `examples/jobs.yaml` (0: do not)", RUN_BY
)
EXAMPLE_TARGET_PORT = Option(
    "CRONSTREAM_EXAMPLE_TARGET_PORT", PORT, 8787, "the example HTTP target's port", RUN_BY
)
METRICS_BASE_PORT = Option(
    "CRONSTREAM_METRICS_BASE_PORT",
    PORT,
    9301,
    "the roles' metrics ports, from this one on (the API serves them on 8780)",
    RUN_BY,
)
ALERT_RECEIVER_PORT = Option(
    "CRONSTREAM_ALERT_RECEIVER_PORT",
    PORT,
    8790,
    "the webhook that prints Alertmanager's alerts",
    RUN_BY,
)
