"""A worker's settings (``cronstream worker`` builds them from its flags)."""

from __future__ import annotations

from dataclasses import dataclass

from cronstream.consumers.executors.python import DEFAULT_ALLOW as PYTHON_DEFAULT_ALLOW
from cronstream.runtime.kafka.member import MemberConfig

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig(MemberConfig):
    name: str = "worker"
    concurrency: int = 32
    # Of those run slots, at most this many per destination (a kafka topic partition,
    # an http origin: consumers.core.bulkhead); 0: half of ``concurrency``.
    destination_slots: int = 0
    low_share: int = 8  # every low_share-th start goes to the lowest non-empty priority
    grace_s: float = 30.0
    lookback_ms: int = DAY_MS  # history and control are read this far back
    http_allow: tuple[str, ...] = ()
    shell_allow: tuple[str, ...] = ()  # argv patterns shell targets may run; () = shell off
    shell_env: tuple[str, ...] = ()  # the worker's variables a shell target also gets
    python_allow: tuple[str, ...] = PYTHON_DEFAULT_ALLOW  # module prefixes or module:function
    secrets_dir: str | None = None  # where secret:NAME values are files (else the env)
    kafka_allow: tuple[str, ...] = ()  # topic patterns kafka targets may write to; () = any
    # Where tenant-<name>.secret files are: a tenant's kafka targets write as the tenant
    # (consumers.executors.egress). None: the local stack's credentials.
    tenant_credentials: str | None = None
    # A run's STARTED record is published once it has executed this long; a run that
    # ends sooner leaves its final outcome alone, which carries its start (0: always).
    started_after_ms: int = 1000
    dedup_capacity: int = 2_000_000
    # Bytes of an attempt's output kept, its last (docs/run-output.md); 0: none kept.
    output_limit: int = 64 * 1024
    # Runs read before their due time (the scheduler's lookahead) held at most; past
    # it, fetching pauses (``Intake``). About 1 KB each.
    delay_limit: int = 200_000
    # Starts per turn of a tenant in each priority's round (FairQueue); others get 1.
    tenant_weights: tuple[tuple[str, int], ...] = ()
    # The tenants' target policy (schemas.policy), checked again before each tenant run:
    # the admission's grants (TENANT:KIND=VALUE) and its policy file (runtime.grants).
    grants: tuple[str, ...] = ()
    policy_file: str | None = None

    @property
    def read_ahead(self) -> int:
        """Runs read ahead of execution (the intake's backlog and the runs waiting for
        their destination's slot): fetching slows past it and pauses past twice it;
        enough to choose by priority, and to go on starting runs while a paused priority
        is fetched again."""
        return max(512, 8 * self.concurrency)
