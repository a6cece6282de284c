"""A quiet CLI: librdkafka's lines go through logging (``runtime.kafka.logs``),
a SASL handshake cut short counts as connection churn (INFO), and ``-v``/``-vv`` show
more, before or after the command's name; the roles log as services and take no -v."""

from __future__ import annotations

import logging

import pytest

from cronstream.cli import build_parser
from cronstream.cli.common import KAFKA_DEBUG, command_logging
from cronstream.runtime.kafka import logs
from cronstream.runtime.kafka.clients import producer_config
from cronstream.runtime.settings import Settings

CUT = (
    "[thrd:GroupCoordinator]: GroupCoordinator: SASL authentication error: "
    "SaslAuthenticateRequest failed: Local: Broker transport failure (after 0ms in state "
    "DOWN)"
)
REFUSED = "[thrd:sasl_ssl://127.0.0.1:9092/bootstrap]: Connect to ipv4#127.0.0.1:9092 failed: "


@pytest.mark.parametrize(
    ("level", "text", "logged"),
    [
        (logging.ERROR, CUT, logging.INFO),  # the close of a short-lived reader
        (logging.ERROR, CUT.replace("transport failure", "handle destroyed"), logging.INFO),
        (logging.ERROR, REFUSED + "Connection refused", logging.ERROR),  # the broker is away
        (logging.ERROR, "SASL authentication error: Authentication failed", logging.ERROR),
        (logging.WARNING, "COORDINATOR_LOAD_IN_PROGRESS", logging.WARNING),
        (logging.DEBUG, "Broker changed state UP -> DOWN", logging.DEBUG),
    ],
)
def test_a_handshake_cut_short_is_churn_other_lines_keep_their_level(
    level: int, text: str, logged: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logs.LOG.name)
    logs.ClientLog().log(level, "%s [%s] %s", "FAIL", "rdkafka#consumer-3", text)
    (record,) = caplog.records
    assert (record.name, record.levelno) == ("librdkafka", logged)
    assert record.getMessage() == f"FAIL [rdkafka#consumer-3] {text}"


def test_routed_clients_get_the_logger_and_the_debug_contexts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "_ROUTED", {})
    settings = Settings.from_env({"CRONSTREAM_KAFKA_SECURITY": "plaintext"})
    assert "logger" not in producer_config(settings)  # a role's: librdkafka prints itself
    logs.route(debug="broker")
    config = producer_config(settings)
    assert isinstance(config["logger"], logs.ClientLog)
    assert config["debug"] == "broker"


@pytest.mark.parametrize(
    ("verbose", "librdkafka", "debug"),
    [(0, logging.ERROR, None), (1, logging.INFO, None), (2, logging.DEBUG, KAFKA_DEBUG)],
)
def test_each_v_shows_more(
    verbose: int, librdkafka: int, debug: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "_ROUTED", {})
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # pytest owns the root
    loggers = [logging.getLogger(name) for name in (logs.LOG.name, "httpx")]
    levels = [logger.level for logger in loggers]
    try:
        command_logging(verbose)
        assert loggers[0].level == librdkafka
        assert logs.routed().get("debug") == debug
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@pytest.mark.parametrize(
    ("argv", "verbose"),
    [
        (["jobs", "list"], 0),
        (["-v", "jobs", "list"], 1),
        (["jobs", "list", "-vv"], 2),
        (["jobs", "-v", "list"], 1),
        (["-vv", "flows", "trigger", "etl"], 2),
        (["tail", "jobs", "--verbose"], 1),
    ],
)
def test_v_comes_before_or_after_the_command(argv: list[str], verbose: int) -> None:
    assert build_parser().parse_args(argv).verbose == verbose


def test_the_roles_take_no_v(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "-v"])
    assert "unrecognized arguments: -v" in capsys.readouterr().err


def test_a_handshake_that_timed_out_is_not_a_refused_login() -> None:
    from cronstream.runtime.kafka.security import handshake_cut

    timed_out = "GroupCoordinator: 127.0.0.1:19112: SASL SCRAM-SHA-512 mechanism handshake "
    assert handshake_cut(timed_out + "failed: Local: Timed out: broker's supported mechanisms")
    assert not handshake_cut(
        "Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism SCRAM-SHA-512"
    )
