"""What the trigger processor (``streams.triggers.processor``) keeps of each source partition it
owns (``Owned``), and the errors that drop a source topic (``TOPIC_ERRORS``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cronstream.runtime.kafka.clients import KafkaError, TopicPartition
from cronstream.streams.core.triggers import Checkpoint, PartitionTrigger

# Errors a consumer reports for a topic it subscribed to: gone, or not readable (its
# ACL removed): logged, and the topic is dropped at the next look at the topics.
TOPIC_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)


@dataclass(slots=True)
class Owned:
    """A source partition this processor owns, and its triggers (one per job)."""

    topic: str
    partition: int
    position: int  # the next offset to read
    replay_until: int  # the high watermark at assignment: runs before it maybe emitted
    triggers: dict[str, PartitionTrigger] = field(default_factory=dict)
    stored: dict[str, Checkpoint] = field(default_factory=dict)  # as last stored, per job
    tenants: tuple[str, ...] = ()  # the rate-limited tenants of its triggers
    held_until: int = 0  # held for a tenant's rate until then (ms; 0: not held)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
