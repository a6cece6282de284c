from datetime import UTC, date, datetime

import pytest

from cronstream.schemas.ids import (
    dependency_run_id,
    event_run_id,
    event_source,
    job_id_of,
    manual_run_id,
    murmur2,
    partition_for,
    run_id_for,
)
from cronstream.schemas.limits import MAX_JOB_ID, MAX_TOPIC, run_id_problems

# Vectors from Apache Kafka's UtilsTest.testMurmur2 (Java ints, i.e. signed 32-bit).
KAFKA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize(("text", "java"), KAFKA_MURMUR2.items())
def test_murmur2_matches_the_java_client(text: str, java: int) -> None:
    assert murmur2(text.encode()) == java & 0xFFFFFFFF


def test_partition_for_is_positive_murmur2_modulo_partitions() -> None:
    assert partition_for("foobar", 12) == (-790332482 & 0x7FFFFFFF) % 12
    assert all(0 <= partition_for(f"job-{i}", 7) < 7 for i in range(500))


def test_run_ids_are_deterministic_and_readable() -> None:
    when = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
    assert run_id_for("nightly", when) == "nightly@2026-11-22T02:00:00.000Z"
    assert run_id_for("nightly", when) == run_id_for("nightly", when.replace())
    assert manual_run_id("nightly", "deploy-1") == "nightly@manual:deploy-1"


def test_job_id_of_takes_the_part_before_the_last_at_sign() -> None:
    assert job_id_of("team@host@2026-11-22T02:00:00.000Z") == "team@host"
    assert job_id_of("a@manual:k") == "a"
    with pytest.raises(ValueError, match="not a cronstream run id"):
        job_id_of("no-at-sign")


def test_event_and_dependency_run_ids_name_their_cause() -> None:
    assert event_run_id("on-orders", "acme.orders", 3, 1042) == "on-orders@evt:acme.orders:3:1042"
    assert dependency_run_id("report", date(2026, 11, 22)) == "report@dep:2026-11-22"
    assert job_id_of(event_run_id("acme/j", "acme.orders", 0, 7)) == "acme/j"


def test_the_longest_event_run_id_is_within_the_run_id_limit() -> None:
    job, topic = "j" * MAX_JOB_ID, "t" * MAX_TOPIC
    run_id = event_run_id(job, topic, 2**31 - 1, 2**63 - 1)
    assert run_id_problems(run_id, job) == []


def test_an_event_run_id_has_no_slash_so_a_flow_node_is_found_after_the_first() -> None:
    flow_run = event_run_id("etl", "files.in", 0, 5)
    node_run = f"{flow_run}/extract"  # streams.core.flow.node_run_id
    assert node_run.partition("@")[2].partition("/") == ("evt:files.in:0:5", "/", "extract")


def test_an_event_run_id_gives_back_its_source_record() -> None:
    assert event_source(event_run_id("acme/j@x", "acme.orders", 3, 1042)) == (
        "acme.orders",
        3,
        1042,
    )
    assert event_source(event_run_id("etl", "files.in", 0, 5) + "/extract") == ("files.in", 0, 5)
    for other in (
        "j@2026-11-22T02:00:00.000Z",
        "j@manual:evt:t:0:1",
        "j@dep:2026-11-22",
        "j@evt:t:0",
        "j@evt::0:1",
        "j@evt:t:-1:5",
        "j@evt:t:0:x",
        "no-run-id",
    ):
        assert event_source(other) is None, other
