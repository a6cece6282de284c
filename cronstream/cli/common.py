"""What every command shares: exit codes, argument types, and how much it logs.

Exit codes: 0 done; 2 invalid input (nothing was written); 3 a service is unreachable;
4 no such job (or run).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cronstream.producers.errors import UnknownJob
from cronstream.runtime.kafka import logs
from cronstream.runtime.options import roles as r
from cronstream.runtime.options.option import Option, duration, flag_type, old_seconds

if TYPE_CHECKING:
    from cronstream.runtime.settings import Settings

T = TypeVar("T")

EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_FOUND = 4
EXIT_REFUSED = 5  # Kafka refused the credentials (runtime.kafka.security)


def add_role(
    sub: Any,
    command: str,
    handler: Callable[[Settings, argparse.Namespace], int],
    *,
    help: str,
    description: str | None = None,
    name: str | None = None,
    group: str | None = None,
    flags: Sequence[Option[Any]] = (),
) -> argparse.ArgumentParser:
    """The parser of a role that runs as a consumer group's member (``command``, run by
    ``handler``): its --name (default ``<name>-<host>-<pid>``, ``name`` the command's
    unless told), its --group when it has one (default ``<topic prefix>.<group>``) and its
    --metrics-port (``METRICS_PORTS``), then the flags of ``flags``, the settings of its
    own a flag overrides; its other flags are the caller's to add."""
    p: argparse.ArgumentParser = sub.add_parser(command, help=help, description=description)
    if group is not None:
        p.add_argument("--group", help=f"consumer group (default <topic prefix>.{group})")
        p.set_defaults(default_group=group)
    p.add_argument("--name", default=f"{name or command}-{socket.gethostname()}-{os.getpid()}")
    r.METRICS_PORTS[command].add_to(p)
    for setting in flags:
        setting.add_to(p)
    p.set_defaults(handler=handler, needs="role")
    return p


def member_group(args: argparse.Namespace, settings: Settings) -> str:
    """The consumer group a role's process joins: its --group, else ``<topic
    prefix>.<group>`` with the group ``add_role`` was given."""
    return args.group or f"{settings.topic_prefix}.{args.default_group}"


def known(found: T | None, job_id: str) -> T:
    """``found``, the job (or flow) a command names, read back: UnknownJob (exit 4) when
    there is none."""
    if found is None:
        raise UnknownJob(job_id)
    return found


def invalid(why: str) -> int:
    """Refuse a command's input: ``error: <why>`` on stderr, and the exit code of
    invalid input (nothing was written)."""
    print(f"error: {why}", file=sys.stderr)
    return EXIT_INVALID


# Argument types of flags that have no variable, read as the settings' are: a duration
# (``500ms``, ``30s``, ``5m``; a bare number is seconds) in milliseconds, and an older
# flag given in seconds (``--flush-s``) in milliseconds, said to go.
duration_flag = flag_type(duration)
old_seconds_flag = flag_type(old_seconds, replaced=("--flush-s", "--flush-interval"))


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


# librdkafka's debug contexts at -vv: connections and logins, and the group coordinator.
KAFKA_DEBUG = "broker,cgrp,security"


def command_logging(verbose: int) -> None:
    """The logging of a one-shot command (a role logs as a service does:
    ``cronstream.foreground``), on stderr. By default its own warnings, and librdkafka's
    errors but a handshake cut short (connection churn: ``runtime.kafka.logs``); -v
    adds INFO lines, every librdkafka line (its warnings, the churn) and timestamps;
    -vv adds DEBUG lines, with librdkafka's debug contexts (``KAFKA_DEBUG``)."""
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    shape = "%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(message)s"
    logging.basicConfig(level=level, format=shape)
    logging.getLogger(logs.LOG.name).setLevel(logging.ERROR if not verbose else level)
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)
    logs.route(debug=KAFKA_DEBUG if verbose > 1 else None)


def add_verbosity(parser: argparse.ArgumentParser) -> None:
    """-v/--verbose on the top-level parser and on every command but the roles, so that
    it may come before or after the command's name (``cronstream -v jobs list``,
    ``cronstream jobs list -vv``)."""
    _verbose_flag(parser, 0)
    _on_commands(parser)


def _on_commands(parser: argparse.ArgumentParser) -> None:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in (c for sub in subs for c in sub.choices.values()):
        if command.get_default("needs") != "role":
            _verbose_flag(command, argparse.SUPPRESS)  # unless given: the top level's
            _on_commands(command)


def _verbose_flag(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="say more on stderr: -v librdkafka's lines and INFO, -vv "
        "DEBUG and librdkafka's debug contexts",
    )
