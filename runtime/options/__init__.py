"""Every setting of cronstream, declared once: ``services`` (where the services are and
how cronstream names and sizes its things) and ``roles`` (the roles', the commands' and
``make run``'s). ``option`` says what a setting is; ``doc`` writes docs/configuration.md
from the declarations."""

from __future__ import annotations

from typing import Any

from cronstream.runtime.options.option import Family, Option


def declared() -> list[Option[Any]]:
    """Every setting, by variable name (both declaring modules imported)."""
    from cronstream.runtime.options import option, roles, services  # noqa: F401  (they declare)

    return sorted(option._DECLARED.values(), key=lambda each: each.env)


def families() -> list[Family]:
    """Every family of variables named by a prefix and a part the user chooses."""
    from cronstream.runtime.options import option

    declared()
    return sorted(option._FAMILIES.values(), key=lambda family: family.prefix)
