"""`make run`: the foreground view of a running local cronstream.

The stack is already up and bootstrapped (the Makefile's `up` target ran first). This
prints where everything is, then follows the jobs, execution and history topics and
prints one compact line per record, so what you do with the CLI in another terminal
shows up here. Ctrl-C stops this view; `make down` stops the services.

It also runs one scheduler (`cronstream scheduler`) and one worker (`cronstream worker`),
logging to ``.stack/logs/<name>.log``, so schedules fire, runs execute and their outcomes
show up here. The history sink joins this list with issue #5. Ctrl-C stops them too.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from confluent_kafka import OFFSET_END, TopicPartition

from cronstream.connect import kafka_consumer
from cronstream.health import cassandra_health, kafka_health, registry_health
from cronstream.settings import Settings
from schemas.catalog import Topics
from schemas.events import Priority, text_headers


def main() -> int:
    settings = Settings.from_env()
    topics = Topics(settings)
    print("cronstream local stack")
    for name, health, where in (
        ("kafka", kafka_health(settings.bootstrap_servers), settings.bootstrap_servers),
        ("schema registry", registry_health(settings.registry_url), settings.registry_url),
        ("cassandra", cassandra_health(settings.cassandra_hosts, settings.cassandra_port),
         f"{settings.cassandra_hosts[0]}:{settings.cassandra_port}"),
    ):  # fmt: skip
        print(f"  {'ok  ' if health.ok else 'DOWN'} {name:<16} {where:<42} {health.detail}")
    print(
        "\nTry, in another terminal:\n"
        "  .venv/bin/cronstream jobs apply -f examples/jobs.yaml\n"
        "  .venv/bin/cronstream jobs list\n"
        "  .venv/bin/cronstream runs trigger hello-webhook --idempotency-key first\n"
        "\nFollowing "
        f"{topics.jobs}, {topics.prefix}.runs.*, {topics.history}, {topics.dlq} "
        "(Ctrl-C to stop; `make down` stops the services)\n",
        flush=True,
    )
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    children = []
    for command in ("scheduler", "worker"):
        with (logs / f"{command}.log").open("a") as log:
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "cronstream.cli",
                        command,
                        "--name",
                        f"make-run-{command}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        print(f"{command} started (pid {children[-1].pid}, log {logs / command}.log)", flush=True)
    print(flush=True)
    try:
        return _follow(settings, topics)
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _follow(settings: Settings, topics: Topics) -> int:
    followed = [topics.jobs, *(topics.runs(p) for p in Priority), topics.history, topics.dlq]
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(timeout=10).topics
        consumer.assign(
            [TopicPartition(t, p, OFFSET_END) for t in followed for p in meta[t].partitions]
        )
        while True:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = text_headers(msg.headers())
            summary = " ".join(
                f"{k}={headers[k]}"
                for k in ("op", "schedule", "run_id", "attempt", "status", "trigger")
                if k in headers
            )
            key = (msg.key() or b"").decode("utf-8", "replace")
            print(f"{msg.topic():<28} {key:<28} {summary}", flush=True)
    except KeyboardInterrupt:
        return 0
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
