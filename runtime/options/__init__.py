"""Every setting of cronstream, declared once: ``services`` (where the services are and
how cronstream names and sizes its things) and ``roles`` (the roles', the commands' and
``make run``'s). ``option`` says what a setting is; ``doc`` writes docs/configuration.md
from the declarations, in the order they are declared (``declared_in``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

from cronstream.runtime.options.option import Family, Option


def declared_in(module: ModuleType) -> Iterator[Option[Any] | Family]:
    """The settings and families a declaring module holds, in its order (the values of
    a mapping of settings too: ``roles.METRICS_PORTS``)."""
    for value in vars(module).values():
        if isinstance(value, Option | Family):
            yield value
        elif isinstance(value, Mapping):
            yield from (v for v in value.values() if isinstance(v, Option))


def _everything() -> list[Option[Any] | Family]:
    from cronstream.runtime.options import roles, services

    return [*declared_in(services), *declared_in(roles)]


def declared() -> list[Option[Any]]:
    """Every setting, by variable name."""
    found = [each for each in _everything() if isinstance(each, Option)]
    return sorted(found, key=lambda each: each.env)


def families() -> list[Family]:
    """Every family of variables named by a prefix and a part the user chooses."""
    found = [each for each in _everything() if isinstance(each, Family)]
    return sorted(found, key=lambda family: family.prefix)
