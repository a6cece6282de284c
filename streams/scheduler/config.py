"""The scheduler processor's settings (``cronstream scheduler`` builds them from its flags)."""

from __future__ import annotations

from dataclasses import dataclass

from cronstream.runtime.kafka.member import MemberConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig(MemberConfig):
    name: str = "scheduler"
    threshold_ms: int = 60_000
    checkpoint_ms: int = 1_000
    horizon_ms: int = 60_000
    tick_ms: int = 10
    # How long librdkafka keeps trying to deliver a run request (its message.timeout.ms):
    # past it the record fails and the partitions rewind to their checkpoint.
    delivery_timeout_ms: int = 300_000
    # Fires per second per tenant (0: no limit), and per-tenant exceptions; the excess
    # is deferred (``streams.core.rates``). Tenant "default" is never limited.
    tenant_fire_rate: float = 0.0
    tenant_fire_rates: tuple[tuple[str, float], ...] = ()
    # Run requests are emitted up to this long before they are due (with their due
    # time; the worker holds each until then), so a burst on one boundary has left the
    # scheduler before the boundary. 0: emitted when due.
    lookahead_ms: int = 1_000
    # Two tiers: a RocksDB store per partition under this directory holds every job,
    # memory only what is due within the horizon (``streams.scheduler.state``). None: all in memory.
    state_dir: str | None = None
    rebuild_index: bool = False  # rebuild each store from the jobs topic (once per partition)
    # With a state directory: keep standby stores of the partitions owned elsewhere warm,
    # and join the group once they are (``streams.scheduler.standby``).
    standby: bool = True
    # Static group membership: a process started again under the same id gets its
    # partitions back at once, not after the session timeout (see the README).
    instance_id: str | None = None
