"""A group member whose assignment hook asks its own consumer for a topic's metadata,
while statistics callbacks wait to be served by the same poll: run as a process of its
own by ``tests/integration/test_hook_metadata.py``, in the test's namespace
(``cli_env``): ``python -m tests.integration.hook_metadata HOW TOPIC GROUP``.

``HOW`` is ``list_topics`` (the consumer's own ``list_topics``, as the worker's
watermarks did after a refused query) or ``refresh_metadata`` (what it does now:
``runtime.kafka.offsets.refresh_metadata``). Prints ``assigned`` once the hook ran and
``served`` after polling on for two seconds."""

from __future__ import annotations

import logging
import sys
import time

from confluent_kafka import TopicPartition

from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.offsets import refresh_metadata
from cronstream.runtime.settings import Settings


def main(how: str, topic: str, group: str) -> int:
    member = GroupMember(
        Settings.from_env(),
        MemberConfig(group=group, name="hook-metadata"),
        log=logging.getLogger("hook-metadata"),
        **{"statistics.interval.ms": 50, "stats_cb": lambda _stats: None},
    )
    assigned_at: list[float] = []

    def assigned(partitions: list[TopicPartition]) -> None:
        if how == "list_topics":
            member.consumer.list_topics(topic, timeout=5)
        else:
            refresh_metadata(member.consumer, topic)
        time.sleep(0.3)  # statistics queue up for this poll to serve next
        print("assigned", flush=True)
        assigned_at.append(time.monotonic())

    member.subscribe([topic], assigned=assigned)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        member.poll(0.5)
        if assigned_at and time.monotonic() > assigned_at[0] + 2:
            member.close()
            print("served", flush=True)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
