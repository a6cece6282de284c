from pathlib import Path

import pytest

from cronstream.consumers.migrations import MIGRATIONS_DIR, load_migrations, split_statements
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.kafka.clients import producer_config
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import AUDIT, CATALOG, JOBS, Topics
from cronstream.schemas.events import Priority


def test_defaults_match_the_local_stack() -> None:
    s = Settings.from_env({})
    assert s.bootstrap_servers == "127.0.0.1:9092"
    assert s.registry_url == "http://127.0.0.1:8081/apis/ccompat/v7"
    assert s.cassandra_hosts == ("127.0.0.1",)
    assert s.partitions == 12


def test_endpoints_can_point_elsewhere() -> None:
    s = Settings.from_env(
        {
            "CRONSTREAM_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
            "CRONSTREAM_REGISTRY_URL": "https://sr.example/",
            "CRONSTREAM_CASSANDRA_HOSTS": "c1, c2",
        }
    )
    assert s.bootstrap_servers == "k1:9092,k2:9092"
    assert s.registry_url == "https://sr.example"
    assert s.cassandra_hosts == ("c1", "c2")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CRONSTREAM_PARTITIONS": "twelve"}, "not a whole number"),
        ({"CRONSTREAM_KAFKA_PORT": "0"}, "must be positive"),
        ({"CRONSTREAM_KEYSPACE": "bad-name"}, "letters, digits and '_'"),
        ({"CRONSTREAM_TOPIC_PREFIX": "a b"}, "letters, digits"),
    ],
)
def test_bad_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


@pytest.mark.parametrize("security", ["sasl_ssl", "plaintext"])
def test_every_producer_uses_the_java_compatible_partitioner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, security: str
) -> None:
    # A stack home of its own holding the secured client's password, so a fresh clone
    # without a bootstrapped .stack builds the same configuration.
    for name in ("CRONSTREAM_KAFKA_PASSWORD", "CRONSTREAM_KAFKA_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    secret = tmp_path / "data" / "security" / "credentials" / "cronstream-app.secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("from-the-stack\n")
    settings = Settings.from_env(
        {"CRONSTREAM_HOME": str(tmp_path), "CRONSTREAM_KAFKA_SECURITY": security}
    )
    config = producer_config(settings)
    assert config["partitioner"] == "murmur2_random"
    if security == "sasl_ssl":
        assert config["sasl.password"] == "from-the-stack"


def test_catalog_names_partitions_and_configs() -> None:
    topics = Topics(
        Settings.from_env({"CRONSTREAM_TOPIC_PREFIX": "acme", "CRONSTREAM_PARTITIONS": "6"})
    )
    assert [name for name, _ in topics.all()] == [
        "acme.jobs",
        "acme.runs.high",
        "acme.runs.normal",
        "acme.runs.low",
        "acme.timers",
        "acme.history",
        "acme.dlq",
        "acme.control",
        "acme.flows",
        "acme.flows.events",
        "acme.alerts",
        "acme.audit",
        "acme.run-output",
    ]
    assert topics.audit == "acme.audit"
    assert topics.run_output == "acme.run-output"
    assert AUDIT.config["retention.ms"] == str(365 * 86_400_000)  # kept as long as history
    assert [name for name, _ in topics.internal()] == [
        "acme.flows-coordinator-__assignor-__leader",
        "acme.flows-coordinator-runs-changelog",
        "acme.connect-configs",
        "acme.connect-offsets",
        "acme.connect-status",
        "acme.triggers-checkpoints",
    ]
    assert dict(topics.layout())["acme.connect-configs"][0] == 1  # Connect demands one
    assert topics.runs(Priority.HIGH) == "acme.runs.high"
    assert JOBS.config["cleanup.policy"] == "compact"
    assert JOBS.config["retention.ms"] == "-1"
    assert topics.partitions(JOBS) == 6
    assert topics.resolve("runs.low") == "acme.runs.low"
    assert topics.resolve("elsewhere") == "elsewhere"
    assert len({spec.suffix for spec in CATALOG}) == len(CATALOG)


def test_migration_files_are_numbered_without_gaps() -> None:
    migrations = load_migrations(MIGRATIONS_DIR)
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert all(m.statements for m in migrations)


def test_statements_split_on_line_ending_semicolons_and_drop_comments(tmp_path: Path) -> None:
    text = "-- a comment; not a split\nCREATE TABLE a (x int, y text);\n\nCREATE TABLE b (z int)\n  WITH x = 'a;b';\n"
    assert split_statements(text) == (
        "CREATE TABLE a (x int, y text)",
        "CREATE TABLE b (z int)\n  WITH x = 'a;b'",
    )
