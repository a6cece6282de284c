"""Writer schemas looked up off the worker's loop.

A run request written with a schema id the worker has not seen needs one registry call
before it can be read (about 5 ms here, 12 ms under load). Made in the loop, each call
stops every partition: a flood of records with made-up ids cost the good runs around
it 15 % of their rate (the malformed-records bench, docs/benchmarks.md). Instead the
record's partition waits alone
(``Intake``: the record and those read after it are kept in order; the partition
is paused only if a slow answer lets many pile up)
while a thread asks the registry; the other partitions keep flowing. Once the answer
is in the codec (known, or refused for a while), the kept records are accepted again.

When the registry cannot be reached the answer is "unavailable": the records are then
decoded in the loop once, which raises RegistryUnavailable there, and the loop's
``runtime.kafka.stall`` holds all input with backoff, as for any registry outage.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.serde import Codec, SchemaRegistry


class SchemaLookups:
    def __init__(self, codec: Codec, registry: SchemaRegistry) -> None:
        self.codec = codec
        self.registry = registry  # its own client: the loop's is not shared with a thread
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="schema-lookup")
        self._asked: dict[int, Future[None]] = {}
        self._unavailable: set[int] = set()

    def wait_for(self, schema_id: int) -> bool:
        """Start looking ``schema_id`` up, or False: its last lookup found the registry
        unavailable, so the caller decodes in line this once (and meets the outage)."""
        if schema_id in self._unavailable:
            self._unavailable.discard(schema_id)
            return False
        if schema_id not in self._asked:
            self._asked[schema_id] = self._pool.submit(self.codec.learn, schema_id, self.registry)
        return True

    def answered(self, schema_id: int) -> bool:
        """Whether the lookup of ``schema_id`` is over. A failure that is not the
        registry's unavailability is a bug and is raised here, in the loop."""
        asked = self._asked.get(schema_id)
        if asked is None:
            return True
        if not asked.done():
            return False
        del self._asked[schema_id]
        error = asked.exception()
        if isinstance(error, RegistryUnavailable):
            self._unavailable.add(schema_id)
        elif error is not None:
            raise error
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.registry.close()
