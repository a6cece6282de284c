"""How fast can a faust-streaming agent read the jobs topic? (the loading path)

    python -m tests.bench.faust_probe TOPIC COUNT

Runs a faust worker whose single agent counts the records of TOPIC (raw bytes, no
decoding: a lower bound on faust's cost) and prints the seconds from worker start to
the COUNT-th record and the rate. The scheduler's own loader (a confluent-kafka
consumer) reads and decodes the same topic in the `million` benchmark; this is the
side-by-side number behind choosing it for the processor.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import faust


def main() -> None:
    topic_name, count = sys.argv[1], int(sys.argv[2])
    app = faust.App(
        f"csbench-faust-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{os.environ.get('CRONSTREAM_BOOTSTRAP_SERVERS', '127.0.0.1:9092')}",
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        processing_guarantee="at_least_once",
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
    )
    topic = app.topic(topic_name, key_type=bytes, value_type=bytes)
    started = time.monotonic()
    seen = 0

    @app.agent(topic)
    async def count_records(stream: faust.Stream) -> None:  # type: ignore[type-arg]
        nonlocal seen
        async for _value in stream:
            seen += 1
            if seen == count:
                elapsed = time.monotonic() - started
                print(
                    f"faust agent: {count} records in {elapsed:.1f}s "
                    f"= {count / elapsed:,.0f} records/s",
                    flush=True,
                )
                os._exit(0)

    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
