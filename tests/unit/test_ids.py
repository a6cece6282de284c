from datetime import UTC, datetime

import pytest

from schemas.ids import job_id_of, manual_run_id, murmur2, partition_for, run_id_for

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
