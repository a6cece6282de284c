"""The roles' one list (``schemas.catalog.ROLES``): what the monitoring, the metrics and
``make run`` know of each role is derived from it, so a new role is one entry there (and
its own module with its command)."""

from __future__ import annotations

import argparse

import pytest

from cronstream.cli import build_parser
from cronstream.cli.common import member_group
from cronstream.monitoring import ROLES as SCRAPED
from cronstream.monitoring import metrics_ports
from cronstream.runtime.metrics import FAULT_ROLES
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import ROLES, triggers_group


def _commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_each_role_with_a_metrics_port_has_its_own_and_a_command() -> None:
    slots = [role.metrics_slot for role in ROLES.values() if role.metrics_slot is not None]
    assert sorted(slots) == list(range(len(slots)))  # one port each, no gap
    assert set(SCRAPED) == {name for name, role in ROLES.items() if role.metrics_slot is not None}
    assert len(set(metrics_ports().values())) == len(SCRAPED)
    commands = _commands()
    for name in SCRAPED:
        assert name in commands, name  # one name: the role's command is its name


def test_the_metrics_lists_are_the_registrys() -> None:
    assert set(FAULT_ROLES) == {name for name, role in ROLES.items() if role.faults}
    assert "admission" in FAULT_ROLES
    assert not ROLES["admission"].dead_letters
    assert {
        "scheduler",
        "worker",
        "sink",
        "archiver",
        "flows-coordinator",
        "dependencies",
        "triggers",
    } == {name for name, role in ROLES.items() if role.dead_letters}


def test_every_deployed_role_is_a_command_of_its_name_and_the_others_are_not() -> None:
    """A role the catalog says is deployed is a `cronstream` command of its name (and
    tests/unit/test_deploy.py wants its manifest and unit); Kafka Connect's user is not."""
    commands = _commands()
    deployed = {name for name, role in ROLES.items() if role.deployed}
    assert deployed <= commands
    assert not (set(ROLES) - deployed) & commands


@pytest.mark.parametrize(
    ("command", "group"),
    [
        ("scheduler", "scheduler"),
        ("worker", "workers"),
        ("sink", "sink"),
        ("admission", "admission"),
        ("archiver", "archiver"),
        ("dependencies", "dependencies"),
        ("triggers", "triggers"),
    ],
)
def test_a_roles_process_joins_its_group_under_the_topic_prefix(command: str, group: str) -> None:
    settings = Settings.from_env({"CRONSTREAM_TOPIC_PREFIX": "acme"})
    args = build_parser().parse_args([command])
    assert member_group(args, settings) == f"acme.{group}"
    told = build_parser().parse_args([command, "--group", "own"])
    assert member_group(told, settings) == "own"


def test_the_trigger_processors_group_is_the_one_its_lag_is_read_from() -> None:
    settings = Settings.from_env({"CRONSTREAM_TOPIC_PREFIX": "acme"})
    args = build_parser().parse_args(["triggers"])
    assert member_group(args, settings) == triggers_group("acme")
