"""The ``kafka`` target type: the payload produced to ``topic``, keyed by the run id (the
executor: ``consumers.executors.kafka``).

Its tenants' rule: a tenant may write to its own topics, named ``<tenant>.<anything>``;
an operator's grant ``kafka=PATTERN`` lets it write to the topics matching the glob
(``shared.events``, ``reports.*``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from cronstream.schemas.events import Target
from cronstream.schemas.targets import TargetType


def problems(target: Target) -> list[str]:
    return [] if target.topic else ["target kafka needs a topic"]


def why_not(tenant: str, _job_id: str, target: Target, grants: tuple[str, ...]) -> str | None:
    topic = target.topic or ""
    if topic.startswith(f"{tenant}.") or any(fnmatchcase(topic, p) for p in grants):
        return None
    return f"kafka topic {topic[:200]!r} is not one of the tenant's own ({tenant}.*)"


TARGET = TargetType(
    name="kafka",
    problems=problems,
    policy=why_not,
    executor="cronstream.consumers.executors.kafka:executor",
)
