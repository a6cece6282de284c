"""The event triggers a trigger processor runs: the jobs topic read from its
beginning and followed, every definition with ``on:`` checked again and its rule parsed.

Every trigger processor follows the whole jobs topic (it is partitioned by source
partition, not by job: any of its partitions may need any job). A definition is
refused, dead-lettered (stage ``triggers``, with the jobs topic's partition and offset)
and its trigger stopped when:

- ``problems`` (the one check of every definition) finds anything: a definition can
  reach the jobs topic without the client or the admission;
- ``source_problems``: a tenant's source topic must be one of its own (``<tenant>.*``);
- its source topic is one of cronstream's own (under ``<prefix>.``: its jobs, runs,
  history...), unless the processor was started with ``--allow-topic`` naming it (an
  operator who means it: a job triggered by the history records of its own runs loops).

A definition that cannot be decoded is left to the scheduler, which dead-letters it. A
definition without ``on:`` (or a tombstone) stops the job's trigger if it had one.
Every processor refuses the same definitions, so each of them dead-letters a refused
one once per start (as the scheduler dead-letters a bad definition at each load).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cronstream.runtime.kafka.clients import Consumer, kafka_consumer
from cronstream.runtime.kafka.offsets import assign_whole
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter, is_record, text_key
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import problems as definition_problems
from cronstream.schemas.definition.triggers import source_problems
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import EPOCH, DeadLetter, JobDefinition, RunRequest, Trigger, to_ms
from cronstream.schemas.limits import refusal
from cronstream.schemas.serde import Codec
from cronstream.streams.core.triggers import Rule, rule_of

log = logging.getLogger("cronstream.triggers")
STAGE = "triggers"


@dataclass(frozen=True, slots=True)
class Active:
    """A job's trigger as the processor runs it."""

    job: JobDefinition
    rule: Rule
    template: RunRequest  # the job's run request with trigger EVENT; each run fills it in

    @property
    def since_ms(self) -> int:
        """Where a trigger without a checkpoint starts: at the first record stamped at
        or after its definition was written (what a re-read decides the same)."""
        return to_ms(self.job.updated_at)


def own_topic(settings: Settings, topic: str) -> bool:
    """Whether ``topic`` is one of cronstream's own: under its prefix (``<prefix>.``:
    the catalog's topics, the internal ones, every tenant's commands and answers)."""
    return topic.startswith(f"{settings.topic_prefix}.") or topic in Topics(settings).names()


def refusal_of(
    settings: Settings,
    key: str,
    job: JobDefinition,
    *,
    allow_topics: frozenset[str],
    max_payload_bytes: int,
) -> str | None:
    """Why ``job`` (with ``on:``, stored under ``key``) may not have its trigger run, or
    None (the module's text)."""
    assert job.on is not None
    problems = (
        [] if key == job.job_id else [f"record key {key!r} differs from job_id {job.job_id!r}"]
    )
    problems += definition_problems(job, max_payload_bytes=max_payload_bytes)
    problems += source_problems(job.tenant, job)
    topic = job.on.topic
    if own_topic(settings, topic) and topic not in allow_topics:
        problems.append(
            f"on.topic {topic[:80]!r} is one of cronstream's own topics "
            "(an operator may allow it: triggers --allow-topic)"
        )
    if problems:
        return f"invalid event trigger: {refusal(problems)}"
    return None


class TriggerDefinitions:
    """The jobs with an event trigger (``active``), read from the jobs topic."""

    def __init__(
        self,
        settings: Settings,
        codec: Codec,
        *,
        refuse: Callable[[DeadLetter], None],
        allow_topics: tuple[str, ...] = (),
        max_payload_bytes: int,
    ) -> None:
        self.settings = settings
        self.topic = Topics(settings).jobs
        self.codec = codec
        self.refuse = refuse
        self.allow_topics = frozenset(allow_topics)
        self.max_payload_bytes = max_payload_bytes
        self.consumer: Consumer = kafka_consumer(settings)
        self.active: dict[str, Active] = {}
        self.next: dict[int, int] = {}  # partition -> the next offset to read
        # What reading does while the registry is away (``runtime.waiting``)
        self.learn: Callable[[Sequence[ConsumedMessage]], None] = lambda _messages: None

    def load(self) -> list[tuple[str, Active | None]]:
        """Read the topic to the end it has now; the triggers found."""
        ends = assign_whole(self.consumer, self.topic)
        changes: list[tuple[str, Active | None]] = []
        while any(self.next.get(p, 0) < end for p, end in ends.items()):
            changes += self.follow(timeout=1.0)
        return changes

    def follow(self, timeout: float = 0.0) -> list[tuple[str, Active | None]]:
        """What arrived within ``timeout``: each job whose trigger started, changed
        (its Active) or stopped (None), in the order read."""
        messages = self.consumer.consume(num_messages=1000, timeout=timeout)
        if not messages:
            return []
        self.learn(messages)
        changes = []
        for msg in messages:
            if not is_record(msg):
                continue
            self.next[msg.partition() or 0] = (msg.offset() or 0) + 1
            change = self._read(msg)
            if change is not None:
                changes.append(change)
        return changes

    def _read(self, msg: ConsumedMessage) -> tuple[str, Active | None] | None:
        key = text_key(msg.key()) or ""
        value = msg.value()
        job = None
        if value is not None:
            try:
                job = self.codec.decode(value, JobDefinition)
            except DecodeError:
                job = None  # the scheduler dead-letters it: it is no job
        active = None
        if job is not None and job.on is not None:
            reason = self.refusal(key, job)
            if reason is None:
                active = self._active(job)
            else:
                log.warning("job %r: its event trigger is refused: %s", key, reason)
                self.refuse(
                    dead_letter(
                        stage=STAGE,
                        reason=reason,
                        topic=self.topic,
                        partition=msg.partition() or 0,
                        offset=msg.offset() or 0,
                        key=key.encode(),
                        value=value,
                    )
                )
        before = self.active.pop(key, None)
        if active is not None:
            self.active[key] = active
        if before == active:
            return None
        return key, active

    def refusal(self, key: str, job: JobDefinition) -> str | None:
        return refusal_of(
            self.settings,
            key,
            job,
            allow_topics=self.allow_topics,
            max_payload_bytes=self.max_payload_bytes,
        )

    @staticmethod
    def _active(job: JobDefinition) -> Active:
        template = job.run_request(
            run_id="", scheduled_at=EPOCH, fired_at=EPOCH, trigger=Trigger.EVENT
        )
        return Active(job=job, rule=rule_of(job), template=template)

    def topics(self) -> set[str]:
        """The source topics of every trigger."""
        return {active.rule.topic for active in self.active.values()}

    def on_topic(self, topic: str) -> list[Active]:
        return [active for active in self.active.values() if active.rule.topic == topic]

    def close(self) -> None:
        self.consumer.close()
