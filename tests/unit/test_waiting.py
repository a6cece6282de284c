"""A role waits for a dependency that is away, and only for that (``runtime.waiting``):
unreachable or timing out waits, logged once and once more when it is back; a refusal
(bad credentials, TLS, a request the registry refuses) raises at once; a stop ends the
wait."""

from __future__ import annotations

import gc
import logging
import ssl
from collections.abc import Callable

import pytest
from cassandra import AuthenticationFailed, OperationTimedOut
from cassandra.cluster import NoHostAvailable
from confluent_kafka import KafkaError, KafkaException

from cronstream.foreground import GC_YOUNG, run_member
from cronstream.runtime import metrics
from cronstream.runtime.errors import KafkaAuthError
from cronstream.runtime.probes import Probes
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import (
    CASSANDRA,
    KAFKA,
    REGISTRY,
    away,
    learn_writers,
    wait_for,
)
from cronstream.schemas.avro import schema_json
from cronstream.schemas.errors import RegistryError, RegistryUnavailable
from cronstream.schemas.events import RunOutcome
from cronstream.schemas.serde import Codec
from tests.fakes import FakeMessage

LOG = logging.getLogger("test.waiting")
DOWN = RegistryUnavailable("schema registry at http://127.0.0.1:1 unreachable: refused")


def failing(*errors: BaseException, then: str = "started") -> tuple[Callable[[], str], list[int]]:
    """An attempt that raises ``errors`` in turn, then returns ``then``; and its calls."""
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return then

    return attempt, calls


def pauses() -> tuple[Callable[[float], bool], list[float]]:
    slept: list[float] = []

    def pause(seconds: float) -> bool:
        slept.append(seconds)
        return True

    return pause, slept


def kafka(code: int) -> KafkaException:
    return KafkaException(KafkaError(code, "test"))


def no_host(reason: BaseException) -> NoHostAvailable:
    return NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": reason})


@pytest.mark.parametrize(
    ("exc", "dependency"),
    [
        (DOWN, REGISTRY),
        (kafka(KafkaError._TRANSPORT), KAFKA),
        (kafka(KafkaError._TIMED_OUT), KAFKA),
        (kafka(KafkaError._ALL_BROKERS_DOWN), KAFKA),
        (kafka(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), KAFKA),
        (no_host(ConnectionRefusedError(111, "refused")), CASSANDRA),
        (OperationTimedOut("timed out"), CASSANDRA),
    ],
)
def test_unreachable_or_timing_out_is_away(exc: BaseException, dependency: str) -> None:
    assert away(exc) == dependency


@pytest.mark.parametrize(
    "exc",
    [
        RegistryError("401: the registry did not accept the credentials", status=401, code=None),
        kafka(KafkaError._AUTHENTICATION),
        kafka(KafkaError._SSL),
        kafka(KafkaError.UNKNOWN_TOPIC_OR_PART),
        kafka(KafkaError._RESOLVE),
        KafkaAuthError("Kafka refused user 'cronstream'"),
        no_host(
            AuthenticationFailed("Provided username cronstream_app and/or password are incorrect")
        ),
        no_host(ssl.SSLError(1, "CERTIFICATE_VERIFY_FAILED")),
        NoHostAvailable("Unable to connect to any servers using keyspace 'nosuch'", ["127.0.0.1"]),
        ValueError("a bug"),
    ],
)
def test_a_refusal_or_a_bug_is_not_away(exc: BaseException) -> None:
    assert away(exc) is None


def test_an_away_dependency_is_waited_for_and_logged_once_and_once_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempt, calls = failing(DOWN, DOWN, DOWN, DOWN)
    pause, slept = pauses()
    with caplog.at_level(logging.INFO, logger=LOG.name):
        assert wait_for("sink s1", attempt, log=LOG, pause=pause) == "started"
    assert len(calls) == 5
    assert slept == [0.5, 1.0, 2.0, 4.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("sink s1 is waiting for the schema registry (schema registry at")
    assert "sink s1: the schema registry is back after" in lines[1]


def test_the_delay_grows_to_its_bound() -> None:
    attempt, _ = failing(*[DOWN] * 7)
    pause, slept = pauses()
    wait_for("x", attempt, log=LOG, pause=pause, first_delay=0.5, max_delay=4.0)
    assert slept == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


def test_each_dependency_away_in_turn_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    attempt, _ = failing(kafka(KafkaError._TRANSPORT), DOWN, DOWN)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        wait_for("worker w1", attempt, log=LOG, pause=pauses()[0])
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == [
        "worker w1 is waiting for Kafka",
        "worker w1: Kafka is back",
        "worker w1 is waiting for the schema registry",
        "worker w1: the schema registry is back",
    ]


def test_bad_configuration_raises_at_once(caplog: pytest.LogCaptureFixture) -> None:
    refused = RegistryError("403: not allowed", status=403, code=None)
    attempt, calls = failing(refused)
    with pytest.raises(RegistryError):
        wait_for("x", attempt, log=LOG, pause=pauses()[0])
    assert len(calls) == 1
    assert not caplog.records


def test_a_refusal_after_an_outage_still_raises() -> None:
    attempt, calls = failing(DOWN, kafka(KafkaError._AUTHENTICATION))
    with pytest.raises(KafkaException):
        wait_for("x", attempt, log=LOG, pause=pauses()[0])
    assert len(calls) == 2


def test_a_stop_ends_the_wait() -> None:
    attempt, calls = failing(*[DOWN] * 100)
    stopping: list[int] = []

    def pause(_seconds: float) -> bool:
        if len(calls) == 3:
            stopping.append(15)  # SIGTERM while waiting
        return True

    with pytest.raises(StopWaiting):
        wait_for("x", attempt, log=LOG, stop=lambda: bool(stopping), pause=pause)
    assert len(calls) == 4


def test_a_pause_that_was_stopped_ends_the_wait() -> None:
    attempt, calls = failing(*[DOWN] * 100)
    with pytest.raises(StopWaiting):
        wait_for("x", attempt, log=LOG, pause=lambda _s: False)
    assert len(calls) == 1


def test_the_default_pause_sleeps_and_wakes_on_stop() -> None:
    attempt, _ = failing(DOWN, DOWN)
    assert wait_for("x", attempt, log=LOG, first_delay=0.01) == "started"
    stopped, _ = failing(*[DOWN] * 100)
    with pytest.raises(StopWaiting):
        wait_for("x", stopped, log=LOG, stop=lambda: True, first_delay=30.0)


class _Member:
    def __init__(self, seen: list[bool]) -> None:
        self.seen = seen

    def run(self, should_stop: Callable[[], bool]) -> None:
        self.seen.append(metrics.PROBES.ready()[0])


def test_a_member_is_not_ready_while_it_waits_and_ready_once_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "PROBES", Probes())
    seen: list[bool] = []
    attempt, _ = failing(DOWN, DOWN)

    def start() -> _Member:
        seen.append(metrics.PROBES.ready()[0])
        attempt()
        return _Member(seen)

    settings = Settings.from_env({})
    code = run_member(
        "sink", name="s1", group="g", start=start, metrics_port=0, settings=settings, needs=()
    )
    assert code == 0
    assert seen == [False, False, False, True]


def test_the_drivers_own_connect_failures_are_not_logged_at_each_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = logging.getLogger("cassandra.cluster")
    reason = ConnectionRefusedError(111, "refused")

    def attempt() -> str:
        driver.warning("[control connection] Error connecting to 127.0.0.1:9042:")
        driver.error("Control connection failed to connect, shutting down Cluster:")
        raise no_host(reason)

    with caplog.at_level(logging.INFO), pytest.raises(StopWaiting):
        wait_for("sink s1", attempt, log=LOG, pause=lambda _s: False)
    assert [r.name for r in caplog.records] == [LOG.name]
    driver.warning("[control connection] Error connecting to 127.0.0.1:9042:")  # after it
    assert [r.name for r in caplog.records] == [LOG.name, "cassandra.cluster"]


class _Registry:
    """Schemas by id, or RegistryUnavailable while ``down`` says so."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.asked: list[int] = []

    def schema_by_id(self, schema_id: int) -> tuple[str, str]:
        self.asked.append(schema_id)
        if self.down:
            self.down -= 1
            raise DOWN
        return schema_json(RunOutcome.AVRO_NAME), "AVRO"

    def register(self, subject: str, schema: str) -> int:
        raise AssertionError("nothing is written here")

    def lookup(self, subject: str, schema: str) -> int | None:
        raise AssertionError("nothing is written here")

    def close(self) -> None:
        pass


def test_the_writer_schemas_of_a_step_are_learned_waiting_for_the_registry() -> None:
    registry = _Registry(down=3)
    codec = Codec(registry)
    header = b"\x00" + (7).to_bytes(4, "big")
    messages = [FakeMessage("h", 0, n, header + b"body") for n in range(50)]
    messages.append(FakeMessage("h", 0, 50, None))  # a tombstone names no schema
    pause, slept = pauses()
    learn_writers(codec, messages, what="sink s1", log=LOG, pause=pause)
    assert registry.asked == [7, 7, 7, 7]  # once per try, not once per record
    assert len(slept) == 3
    assert codec.unknown_id(header + b"body") is None  # known: decoding needs no registry
    learn_writers(codec, messages, what="sink s1", log=LOG, pause=pause)
    assert registry.asked == [7, 7, 7, 7]


class _GcMember:
    def __init__(self) -> None:
        self.seen: tuple[tuple[int, int, int], int] | None = None

    def run(self, should_stop: Callable[[], bool]) -> None:
        self.seen = (gc.get_threshold(), gc.get_freeze_count())


def test_a_members_loop_runs_with_the_collector_tuned_for_it() -> None:
    """The loop's short-lived objects are collected every GC_YOUNG allocations
    (Python's 700 cost a worker a sixth of its runs/s), what startup built frozen."""
    before = gc.get_threshold()
    member = _GcMember()
    try:
        run_member(
            "sink",
            name="s1",
            group="g",
            start=lambda: member,
            metrics_port=0,
            settings=Settings.from_env({}),
            needs=(),
        )
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert member.seen is not None
    threshold, frozen = member.seen
    assert threshold[0] == GC_YOUNG == 50_000
    assert frozen > 0
