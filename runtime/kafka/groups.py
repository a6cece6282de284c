"""A consumer group's own settings on the broker (KIP-848 groups, ``balance="per-topic"``).

Under the consumer protocol the member no longer chooses its session timeout: the
broker keeps it per group (``consumer.session.timeout.ms``, with
``consumer.heartbeat.interval.ms``), a dynamic GROUP config that
IncrementalAlterConfigs sets (ACL: ALTER_CONFIGS on the group; the bootstrap gives the
worker's user ALTER_CONFIGS and DESCRIBE_CONFIGS on the groups under the prefix). Left
unset, the broker's defaults apply (``group.consumer.session.timeout.ms``; the local
stack's are set in ``infra.services``); a value outside the broker's
``group.consumer.min/max.*`` is refused. So the member sets its group's timeouts before
it joins, and says so in the log when it cannot: how fast a killed member's partitions
move is the group's session timeout, whatever its flag asked.

A group has one session timeout: members started with different ones leave the last
one set.
"""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.settings import Settings

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
TIMEOUT_S = 15.0


def heartbeat_ms(session_timeout_ms: int) -> int:
    """The group's heartbeat interval for a session timeout: a tenth of it (0.5 s at
    least, the local broker's minimum). Under KIP-848 a member also learns of its new
    assignment, and acknowledges a revocation, at its heartbeat, so this interval sets
    how fast partitions move to a member that joins (about two heartbeats)."""
    return max(500, session_timeout_ms // 10)


def set_group_timeouts(
    settings: Settings, group: str, session_timeout_ms: int, *, log: logging.Logger
) -> bool:
    """Set ``group``'s session timeout (and heartbeat interval, ``heartbeat_ms``) on the
    broker as ``settings``' user. True when set; False (logged, with the session
    timeout in force where the broker tells it) when the broker refused: no right to
    alter the group's configs, a value outside the broker's bounds, a broker without
    group configs."""
    heartbeat = heartbeat_ms(session_timeout_ms)
    op = AlterConfigOpType.SET
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(SESSION, str(session_timeout_ms), incremental_operation=op),
            ConfigEntry(HEARTBEAT, str(heartbeat), incremental_operation=op),
        ],
    )
    admin = kafka_admin(settings)  # must outlive its futures
    try:
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(TIMEOUT_S)
    except (KafkaException, FutureTimeout) as exc:
        log.warning(
            "group %s: could not set its session timeout to %d ms (%s); a killed "
            "member's partitions move after %s",
            group,
            session_timeout_ms,
            _reason(exc),
            _in_force(admin, group),
        )
        return False
    log.info(
        "group %s: session timeout %d ms, heartbeat %d ms (the group's configs)",
        group,
        session_timeout_ms,
        heartbeat,
    )
    return True


def _in_force(admin: AdminClient, group: str) -> str:
    """The group's session timeout as the broker tells it, or what applies unknown."""
    try:
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
        for future in described.values():
            return f"{future.result(TIMEOUT_S)[SESSION].value} ms, the group's"
    except (KafkaException, FutureTimeout, KeyError):
        pass
    return "the group's session timeout (unknown here; the broker's default unless set)"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FutureTimeout):
        return f"no answer within {TIMEOUT_S:.0f} s"
    error = exc.args[0] if exc.args else exc
    return str(error.str() if hasattr(error, "str") else error)
