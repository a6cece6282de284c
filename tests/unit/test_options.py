"""Settings declared once (runtime.options): read through their declarations, one
duration syntax, older spellings still read with a warning, and no code file but the
two declaring ones spelling a variable."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
from pathlib import Path

import pytest

from cronstream.cli import build_parser
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import declared, doc, families, option, roles, services
from cronstream.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DECLARING = {"runtime/options/services.py", "runtime/options/roles.py"}
VARIABLE = re.compile(r"CRONSTREAM_[A-Z0-9_]*[A-Z0-9]\b")


def _code_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in listed if not f.startswith("tests/") and (ROOT / f).is_file()]


def test_only_the_declaring_files_spell_a_variable() -> None:
    spelling = {f for f in _code_files() if "CRONSTREAM_" in (ROOT / f).read_text()}
    assert spelling == DECLARING


def test_every_variable_the_deploy_files_and_makefile_set_is_declared() -> None:
    known = {o.env for o in declared()} | {old.env for o in declared() for old in o.old}
    known |= set(roles.SHELL_RUN_ENV)
    prefixes = tuple(f.prefix for f in families())
    texts = [ROOT / "Makefile", *sorted((ROOT / "infra" / "deploy").rglob("*"))]
    found = {v for p in texts if p.is_file() for v in VARIABLE.findall(p.read_text())}
    unknown = {v for v in found if v not in known and not v.startswith(prefixes[1:])}
    console = {v for v in unknown if v.split("_")[1] in ("PROMETHEUS", "ALERTMANAGER", "CONNECT")}
    assert unknown - console == set()


def test_every_declaration_is_read_somewhere() -> None:
    code = "\n".join((ROOT / f).read_text() for f in _code_files() if f not in DECLARING)
    names = {
        name
        for module in (services, roles)
        for name, value in vars(module).items()
        if isinstance(value, option.Option | option.Family)
    }
    unread = {name for name in names if not re.search(rf"\b{name}\b", code)}
    assert unread == set()


def test_configuration_doc_is_current() -> None:
    assert doc.DOC.read_text() == doc.render(), "docs/configuration.md: run `make docs`"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500ms", 500), ("30s", 30_000), ("5m", 300_000), ("1h30m", 5_400_000), ("2", 2000)],
)
def test_one_duration_syntax(text: str, ms: int) -> None:
    assert roles.LOOKAHEAD.get({"CRONSTREAM_LOOKAHEAD": text}) == ms


def test_an_older_variable_is_read_in_its_unit_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    option._WARNED.clear()
    with caplog.at_level(logging.WARNING, "cronstream.settings"):
        assert roles.COMMIT_INTERVAL.get({"CRONSTREAM_CHECKPOINT_MS": "250"}) == 250
    assert "CRONSTREAM_CHECKPOINT_MS is deprecated" in caplog.text
    assert "use CRONSTREAM_COMMIT_INTERVAL" in caplog.text
    both = {"CRONSTREAM_CHECKPOINT_MS": "250", "CRONSTREAM_COMMIT_INTERVAL": "2s"}
    assert roles.COMMIT_INTERVAL.get(both) == 2000  # the new one wins
    days = Settings.from_env({"CRONSTREAM_HISTORY_TTL_DAYS": "7", "CRONSTREAM_OUTPUT_TTL": "3d"})
    assert (days.history_ttl_days, days.output_ttl_days) == (7, 3)
    per_minute = {"CRONSTREAM_TENANT_TRIGGERS_PER_MINUTE": "120"}
    assert roles.TENANT_TRIGGERS_PER_SECOND.get(per_minute) == 2.0


def test_an_older_flag_is_read_in_its_unit(caplog: pytest.LogCaptureFixture) -> None:
    option._WARNED.clear()
    parser = argparse.ArgumentParser()
    roles.COMMIT_INTERVAL.add_to(parser)
    with caplog.at_level(logging.WARNING, "cronstream.settings"):
        assert parser.parse_args(["--checkpoint-ms", "500"]).commit_interval == 500
    assert "--checkpoint-ms is deprecated" in caplog.text
    assert parser.parse_args(["--commit-interval", "1m"]).commit_interval == 60_000
    assert parser.parse_args([]).commit_interval == 1000


@pytest.mark.parametrize(
    ("command", "old", "dest", "value"),
    [
        (["scheduler", "--checkpoint-ms", "500"], "--checkpoint-ms", "commit_interval", 500),
        (["scheduler", "--lookahead-ms", "250"], "--lookahead-ms", "lookahead", 250),
        (
            ["worker", "--session-timeout-ms", "6000"],
            "--session-timeout-ms",
            "session_timeout",
            6000,
        ),
        (["dependencies", "--commit-ms", "2000"], "--commit-ms", "commit_interval", 2000),
        (
            ["admission", "--triggers-per-minute", "120"],
            "--triggers-per-minute",
            "triggers_per_second",
            2.0,
        ),
        (
            ["triggers", "--tenant-runs-per-minute", "30"],
            "--tenant-runs-per-minute",
            "triggers_per_second",
            0.5,
        ),
    ],
)
def test_each_command_takes_its_settings_older_flags_from_their_declaration(
    command: list[str], old: str, dest: str, value: float, caplog: pytest.LogCaptureFixture
) -> None:
    option._WARNED.clear()
    with caplog.at_level(logging.WARNING, "cronstream.settings"):
        assert getattr(build_parser().parse_args(command), dest) == value
    assert f"{old} is deprecated" in caplog.text


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CRONSTREAM_LOOKAHEAD": "soon"}, "CRONSTREAM_LOOKAHEAD='soon': 'soon' is not a duration"),
        ({"CRONSTREAM_PARTITIONS": "0"}, "CRONSTREAM_PARTITIONS='0': must be positive"),
        ({"CRONSTREAM_HISTORY_TTL": "36h"}, "CRONSTREAM_HISTORY_TTL='36h': use whole days"),
        ({"CRONSTREAM_NETNS": "maybe"}, "CRONSTREAM_NETNS='maybe': use 1 or 0"),
        ({"CRONSTREAM_KAFKA_SECURITY": "tls"}, "use sasl_ssl or plaintext"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(says)):
        Settings.from_env(env) if "LOOKAHEAD" not in str(env) else roles.LOOKAHEAD.get(env)


def test_a_flag_refuses_a_bad_duration() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    roles.LOOKAHEAD.add_to(parser)
    with pytest.raises(argparse.ArgumentError, match="is not a duration"):
        parser.parse_args(["--lookahead", "later"])


def test_every_declaration_has_help_and_a_reader_named() -> None:
    assert all(f.prefix.startswith("CRONSTREAM_") for f in families())
    envs = [each.env for each in declared()]
    assert len(envs) == len(set(envs)), "a variable declared twice"
    for each in declared():
        assert each.env.startswith("CRONSTREAM_"), each.env
        assert each.help, each.env
        assert each.who, each.env
        assert each.kind in {
            "whole",
            "number",
            "text",
            "switch",
            "names",
            "choice",
            "path",
            "duration",
            "days",
        }, each.env
