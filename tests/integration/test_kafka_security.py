"""The secured broker: who may connect, and what cronstream's user may touch.

Every other test already runs on the SASL_SSL listener as ``cronstream-app``; these are
the refusals, each a clear error with nothing written."""

from __future__ import annotations

import contextlib
import subprocess
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import NewTopic

from cronstream.runtime.credentials import credentials_dir
from cronstream.runtime.errors import KafkaAuthError
from cronstream.runtime.kafka.clients import kafka_admin, kafka_consumer, kafka_producer
from cronstream.runtime.kafka.security import BENCH_PLAIN_PREFIX
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from tests.integration.helpers import cronstream, kcat, plaintext_listener, record_count

pytestmark = pytest.mark.integration


def _deliveries(producer: Producer, topic: str, count: int = 1) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        errors.append(err)

    for i in range(count):
        producer.produce(topic, value=b"x", key=f"k{i}".encode(), on_delivery=delivered)
    producer.flush(30)
    return errors


def test_a_wrong_password_ends_the_client_with_a_clear_error(
    ns: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "not-the-password-" + uuid.uuid4().hex
    monkeypatch.setenv("CRONSTREAM_KAFKA_PASSWORD", secret)
    producer = kafka_producer(ns, **{"message.timeout.ms": 20_000})
    producer.produce(Topics(ns).jobs, value=b"x", key=b"k")
    try:
        with pytest.raises(KafkaAuthError) as caught:
            producer.flush(20)
    finally:
        # Closed now: left to the garbage collector (the error's traceback holds it),
        # it went on logging in and failing through the next tests (seen in CI output).
        producer.purge()
        with contextlib.suppress(KafkaAuthError):
            producer.close()
    text = str(caught.value)
    assert "refused user 'cronstream-app'" in text
    assert "Authentication failed" in text
    assert secret not in text
    monkeypatch.delenv("CRONSTREAM_KAFKA_PASSWORD")
    assert record_count(ns, Topics(ns).jobs) == 0


def test_the_cli_says_so_and_exits_5_without_printing_the_password(ns: Settings) -> None:
    secret = "wrong-" + uuid.uuid4().hex
    run = cronstream(ns, "jobs", "list", env={"CRONSTREAM_KAFKA_PASSWORD": secret})
    assert run.returncode == 5, run.stderr
    assert "error: Kafka refused user 'cronstream-app'" in run.stderr
    assert secret not in run.stdout + run.stderr
    unknown = cronstream(ns, "jobs", "list", env={"CRONSTREAM_KAFKA_USER": "nobody"})
    assert unknown.returncode == 2, unknown.stderr
    assert "no password for Kafka user 'nobody'" in unknown.stderr


def test_anonymous_plaintext_clients_reach_the_benchmark_topics_only(ns: Settings) -> None:
    producer = kafka_producer(plaintext_listener(ns))
    (refused,) = _deliveries(producer, Topics(ns).jobs)
    assert refused is not None
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert record_count(ns, Topics(ns).jobs) == 0
    bench_topic = f"{BENCH_PLAIN_PREFIX}{uuid.uuid4().hex[:8]}"
    admin = kafka_admin(ns, superuser=True)
    admin.create_topics([NewTopic(bench_topic, num_partitions=1)])[bench_topic].result()
    try:
        assert _deliveries(producer, bench_topic, 3) == [None, None, None]
    finally:
        admin.delete_topics([bench_topic])[bench_topic].result()


def test_cronstreams_user_is_confined_to_its_topic_prefix(ns: Settings) -> None:
    other = f"cstest-other.{uuid.uuid4().hex[:8]}.jobs"  # shares no prefix boundary
    admin = kafka_admin(ns, superuser=True)
    admin.create_topics([NewTopic(other, num_partitions=1)])[other].result()
    try:
        (refused,) = _deliveries(kafka_producer(ns), other)
        assert refused is not None
        assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        consumer = kafka_consumer(ns)
        try:
            assert other not in consumer.list_topics(timeout=10).topics  # not even seen
        finally:
            consumer.close()
        with pytest.raises(subprocess.CalledProcessError) as denied:  # kcat: mTLS, same ACLs
            kcat(ns, other, "%k\n")
        assert "authoriz" in denied.value.stderr.lower(), denied.value.stderr
        as_app = kafka_admin(ns)
        name = f"{ns.topic_prefix}.made-by-app"
        with pytest.raises(KafkaException) as caught:
            as_app.create_topics([NewTopic(name, num_partitions=1)])[name].result()
        assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        admin.delete_topics([other])[other].result()


def test_credentials_are_files_only_their_owner_can_read(stack: Settings) -> None:
    secrets = list(credentials_dir(stack).glob("*.secret"))
    assert secrets, "the bootstrap writes cronstream's user's password"
    for path in [*secrets, *(credentials_dir(stack).parent / "tls").glob("*key*.pem")]:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
