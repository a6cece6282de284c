"""What executes a worker's attempts (``consumers.worker.attempts``): an executor per
registered target type (``schemas.targets``), each built by its own module's factory from
what the worker lends it (the targets' producer, the tenants' producers, the grants
policy); the run slots per destination; the starters of the executors that run attempts
on the event loop without a thread each."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cronstream.consumers.executors.base import Executor, LoopExecutor, Starter
from cronstream.consumers.executors.egress import TenantProducers
from cronstream.consumers.executors.setup import ExecutorSetup, build_executors
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.destinations import Destinations
from cronstream.runtime.credentials import credentials_dir
from cronstream.runtime.grants import PolicyBook
from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics

CLOSE_FLUSH_S = 2.0  # the kafka targets' producers sent what they hold within this at a stop


class Runners:
    def __init__(
        self, settings: Settings, config: WorkerConfig, encode: Callable[[str, Any], bytes]
    ) -> None:
        self._target_producer = kafka_producer(settings)
        self._tenant_producers = (
            None
            if settings.kafka_security == "plaintext"
            else TenantProducers(
                settings, Path(config.tenant_credentials or credentials_dir(settings))
            )
        )
        self.policy = PolicyBook(
            config.grants, Path(config.policy_file) if config.policy_file else None
        )
        self.executors: dict[str, Executor] = build_executors(
            ExecutorSetup(
                settings=settings,
                config=config,
                topics=Topics(settings),
                producer=self._target_producer,
                tenant_producers=self._tenant_producers,
                encode=encode,
                policy=self.policy.current,
            )
        )
        # Run slots per destination: one that stops answering holds only its share.
        self.destinations = Destinations.of_worker(self.executors, config)
        # Executors that run attempts without a run thread each (http, kafka): what
        # starts one (``consumers.executors.base.LoopExecutor``); the others take a thread.
        self.starters: dict[str, Starter] = {
            kind: executor.start
            for kind, executor in self.executors.items()
            if isinstance(executor, LoopExecutor)
        }

    def close(self, executors: Mapping[str, Any]) -> None:
        """The producers flushed (within ``CLOSE_FLUSH_S``), then ``executors`` closed
        (those holding resources: http's connections)."""
        # Records still unacknowledged belong to runs not settled (read again by the next
        # owner); one to a partition without a leader would hold the stop for ever.
        deadline = time.monotonic() + CLOSE_FLUSH_S
        self._target_producer.flush(CLOSE_FLUSH_S)
        if self._tenant_producers is not None:
            self._tenant_producers.close(max(0.0, deadline - time.monotonic()))
        for executor in executors.values():
            close = getattr(executor, "close", None)
            if close is not None:
                close()
