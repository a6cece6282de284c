"""What a setting is: its environment variable, how its text is read, its default, its
help, who reads it, the command-line flag that overrides it, and the older spellings
still accepted for one release.

A setting is declared once (``runtime.options.services`` and ``runtime.options.roles``:
``runtime.options.declared`` finds them there) and read through its declaration:
``PARTITIONS.get(env)``. The flags of the commands
(``Option.add_to``), ``Settings.from_env`` and docs/configuration.md
(``runtime.options.doc``) are made from the declarations, so a setting's name, default
and help are written in one place.

Values: ``whole`` numbers (with a minimum), ``number`` (a rate, per second), ``text``,
``switch`` (1, true, yes or on; 0, false, no or off), ``names`` (comma-separated),
``choice`` (one of a few words), ``path`` and ``duration``: one syntax for every
duration, ``500ms``, ``30s``, ``5m``, ``1h30m``, ``2d`` (``schemas.definition.values``);
a bare number is seconds.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from cronstream.runtime.errors import SettingsError
from cronstream.schemas.definition.values import parse_duration

log = logging.getLogger("cronstream.settings")
T = TypeVar("T")
_WARNED: set[str] = set()


def deprecated(old: str, new: str) -> None:
    """Say once per process that ``old`` (a variable or a flag) is an older spelling of
    ``new``, accepted for one release."""
    if old not in _WARNED:
        _WARNED.add(old)
        log.warning("%s is deprecated and goes in the next release: use %s", old, new)


@dataclass(frozen=True, slots=True)
class Old:
    """An older variable of a setting, read when the setting's own is unset: its text
    read by ``parse`` into the setting's value (``ms``: milliseconds -> a duration)."""

    env: str
    parse: Callable[[str], Any]


@dataclass(frozen=True, slots=True, eq=False)
class Option(Generic[T]):
    """One setting. ``default`` is its value when unset (None: none, or computed where
    it is read, ``default_doc`` then saying how); ``who`` names the roles and commands
    that read it; ``flag`` the option of theirs that overrides it; ``old`` its older
    variables and ``old_flags`` the flag's older spellings, accepted with a warning for
    one release (their values read by the first older variable's parser, in its unit)."""

    env: str
    parse: Callable[[str], T]
    default: T | None
    help: str
    who: str = "every process"
    flag: str | None = None
    default_doc: str | None = None
    old: tuple[Old, ...] = ()
    old_flags: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """What its text is: the reader's name (``whole``, ``duration``, ...)."""
        return self.parse.__name__

    @property
    def default_text(self) -> str:
        """The default as docs/configuration.md and ``--help`` say it."""
        if self.default_doc is not None:
            return self.default_doc
        value = self.default
        if value is None or value == ():
            return "none"
        if isinstance(value, bool):
            return "1" if value else "0"
        if self.kind == "duration":
            return duration_text(int(str(value)))
        if self.kind == "days":
            return f"{value}d"
        return f"{value:g}" if isinstance(value, float) else str(value)

    def is_set(self, env: Mapping[str, str] | None = None) -> bool:
        """Whether the variable has a text (unset and empty are alike)."""
        return bool((os.environ if env is None else env).get(self.env))

    def get(self, env: Mapping[str, str] | None = None, default: Any = ...) -> Any:
        """The value: the variable read, else an older spelling's (with a warning),
        else ``default`` when given, else the declared default."""
        env = os.environ if env is None else env
        raw = env.get(self.env) or None
        parse: Callable[[str], Any] = self.parse
        name = self.env
        if raw is None:
            for old in self.old:
                if env.get(old.env):
                    deprecated(old.env, self.env)
                    raw, parse, name = env[old.env], old.parse, old.env
                    break
        if raw is None:
            return self.default if default is ... else default
        try:
            return parse(raw)
        except (ValueError, TypeError) as exc:
            raise SettingsError(f"{name}={raw!r}: {exc}") from None

    def add_to(self, parser: Any, *names: str, **kwargs: Any) -> Any:
        """This setting's flag on ``parser`` (``argparse``): its default this process's
        variable, its help the declaration's with the variable named. ``names`` are
        the flag's spellings (the declared ``flag`` when none); its declared
        ``old_flags`` are accepted too, with a warning."""
        flags = names or ((self.flag,) if self.flag else ())
        if not flags:
            raise ValueError(f"{self.env} has no flag")
        if "default" not in kwargs:
            value = self.get()
            # a path flag's value is the text given, as its variable's
            kwargs["default"] = str(value) if self.kind == "path" and value else value
            if self.kind == "names":  # argparse's append adds to a copy of a list
                kwargs["default"] = list(value)
        kwargs.setdefault("help", f"{self.help} (default {self.default_text}; ${self.env})")
        if self.kind in _METAVARS:
            kwargs.setdefault("metavar", _METAVARS[self.kind])
        if self.kind == "path":
            kwargs.setdefault("type", str)
        elif self.kind not in ("switch", "names"):
            kwargs.setdefault("type", flag_type(self.parse))
        action = parser.add_argument(*flags, **kwargs)
        old_parse = self.old[0].parse if self.old else self.parse  # the old variable's unit
        for old_flag in self.old_flags:
            parser.add_argument(
                old_flag,
                dest=action.dest,
                type=flag_type(old_parse, replaced=(old_flag, flags[0])),
                help=argparse.SUPPRESS,
            )
        return action


_METAVARS = {
    "duration": "DURATION",
    "days": "DURATION",
    "whole": "N",
    "number": "N",
    "path": "PATH",
}


def duration_text(ms: int) -> str:
    """Milliseconds as the duration syntax writes them, in the largest whole unit."""
    for unit, size in (("d", DAY_MS), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def flag_type(
    parse: Callable[[str], T], *, replaced: tuple[str, str] | None = None
) -> Callable[[str], T]:
    """A reader of a variable's text as an argparse type (what is wrong said as argparse
    says it); ``replaced``: (an older flag, the flag to use) said once when given."""

    def read(text: str) -> T:
        if replaced:
            deprecated(*replaced)
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = parse.__name__  # argparse names it in "invalid <kind> value"
    return read


@dataclass(frozen=True, slots=True)
class Family:
    """Variables named by a prefix and a part the user chooses (``<prefix><NAME>``)."""

    prefix: str
    help: str
    who: str
    pattern: str

    def name(self, part: str) -> str:
        return self.prefix + part

    def option(self, part: str) -> Option[str]:
        """The variable ``<prefix><part>`` read as a text setting (not declared apart:
        the family's line in docs/configuration.md says it)."""
        return Option(self.name(part), text, None, self.help, self.who)


# Readers of a variable's text: each raises ValueError saying what is wrong.


def whole(minimum: int = 1) -> Callable[[str], int]:
    def whole(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("not a whole number") from None
        if value < minimum:
            raise ValueError("must be positive" if minimum == 1 else f"must be at least {minimum}")
        return value

    return whole


def number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("not a number") from None
    if not value >= 0:  # also NaN
        raise ValueError("must not be negative")
    return value


def text(raw: str) -> str:
    return raw


def switch(raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError("use 1 or 0 (true/false, yes/no, on/off)")


PORT = whole(1)  # a port number
SIZE = whole(0)  # a count, a size or a rate where 0 means "none" or "off"


NOTHING: tuple[str, ...] = ()  # a ``names`` setting's default: none


def names(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def choice(*words: str) -> Callable[[str], str]:
    def choice(raw: str) -> str:
        word = raw.lower()
        if word not in words:
            raise ValueError(f"use {' or '.join(words)}")
        return word

    return choice


def path(raw: str) -> Path:
    return Path(raw).expanduser()


def duration(raw: str) -> int:
    """A duration (``500ms``, ``30s``, ``5m``; a bare number is seconds) in ms."""
    return parse_duration(raw)


DAY_MS = 86_400_000


def days(raw: str) -> int:
    """A duration of whole days (``30d``; ``0`` where that means "none") in days."""
    ms = parse_duration(raw)
    if ms % DAY_MS:
        raise ValueError("use whole days, e.g. 30d")
    return ms // DAY_MS


def old_ms(raw: str) -> int:
    """An older variable's or flag's whole milliseconds."""
    return whole(0)(raw)


def old_seconds(raw: str) -> int:
    """An older variable's or flag's seconds (a number) in milliseconds."""
    return round(number(raw) * 1000)


def old_days(raw: str) -> int:
    """An older variable's whole number of days."""
    return whole(0)(raw)


def old_per_minute(raw: str) -> float:
    """An older variable's or flag's rate per minute, per second."""
    return number(raw) / 60
