"""The call path of `cronstream jobs put`, counted: from ``cmd_jobs_put`` to
the record handed to the producer, which module groups the calls stay in and how often
they climb back into a module they had left.

Run: ``python -m tests.bench.call_path`` (no stack needed: the producer and the jobs
topic are fakes). A *stay* is a run of consecutive events whose innermost frame of ours
is in one module; a *climb back up* is a stay entered by a return into a module the
path had left (a caller waiting on a callee in another module). Frames outside our
packages (the standard library, yaml) belong to the innermost frame of ours.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any
from unittest import mock

OURS = ("cronstream",)
ARGV = [
    "jobs",
    "put",
    "nightly",
    "--cron",
    "0 2 * * 1-5",
    "--tz",
    "Europe/Paris",
    "--target",
    "http",
    "--url",
    "https://example.com/hook",
    "--timeout",
    "1m",
    "--deadline",
    "2h",
    "--start",
    "2026-01-01T00:00:00",
]


class FakePublisher:
    """Records what would be produced; ``codec`` is never used by ``put``."""

    codec: Any = None

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []

    def publish(self, topic: str, event: Any) -> None:
        self.records.append((topic, event))

    def produce_raw(self, topic: str, key: str, value: Any, headers: Any) -> None:
        self.records.append((topic, value))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Partitions:
    def __init__(self) -> None:
        self.partitions = {0: None}
        self.error = None


class _Meta:
    def __init__(self, topic: str) -> None:
        self.topics = {topic: _Partitions()}


class FakeConsumer:
    """An empty jobs topic of one partition (what a client reads to find a job)."""

    def list_topics(self, topic: str, timeout: float = 0) -> _Meta:
        return _Meta(topic)

    def get_watermark_offsets(self, tp: Any, timeout: float = 0) -> tuple[int, int]:
        return 0, 0

    def close(self) -> None:
        pass


def _ours(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name.split(".")[0] in OURS else None


class PathCounter:
    """``sys.setprofile`` hook: the innermost module of ours after every event."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.stays: list[tuple[str, bool]] = []  # (module, entered by a return)

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = _ours(frame)
        if module is None:
            return
        if event == "call":
            self.stack.append(module)
        elif self.stack:
            self.stack.pop()
        if self.stack and (not self.stays or self.stays[-1][0] != self.stack[-1]):
            self.stays.append((self.stack[-1], event == "return"))

    def report(self, depth: int | None = None) -> str:
        """The stays by module, or by module group (the first ``depth`` parts of a
        module's name: ``schemas.definition``, ``producers.client``)."""
        stays: list[tuple[str, bool]] = []
        for module, back in self.stays:
            name = ".".join(module.split(".")[:depth])
            if not stays or stays[-1][0] != name:
                stays.append((name, back))
        visits = Counter(m for m, _ in stays)
        climbs = sum(1 for _, back in stays if back)
        path = " > ".join(m for m, _ in stays)
        top = ", ".join(f"{m} {n}" for m, n in visits.most_common())
        return f"{len(stays)} stays, {climbs} climbs back up\n  visits: {top}\n  path: {path}"


@contextmanager
def _fakes() -> Iterator[FakePublisher]:
    publisher = FakePublisher()
    with mock.patch("cronstream.producers.client.kafka_consumer", return_value=FakeConsumer()):
        yield publisher


def measure() -> str:
    from cronstream.cli import build_parser
    from cronstream.cli.jobs import cmd_jobs_put
    from cronstream.producers.client import JobClient
    from cronstream.runtime.settings import Settings

    args: argparse.Namespace = build_parser().parse_args(ARGV)
    out = []
    with _fakes() as publisher:
        client = JobClient(Settings.from_env({}), publisher=publisher)  # type: ignore[arg-type]
        for label in ("cold (first put of the process)", "warm (caches filled)"):
            counter = PathCounter()
            sys.setprofile(counter)
            try:
                cmd_jobs_put(client, args)
            finally:
                sys.setprofile(None)
            out.append(f"{label}, by module: {counter.report()}")
            out.append(f"{label}, by module group: {counter.report(depth=2)}")
        out.append(f"records produced: {[topic for topic, _ in publisher.records]}")
    return "\n".join(out)


if __name__ == "__main__":
    print(measure(), file=sys.stderr)
