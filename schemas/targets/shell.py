"""The ``shell`` target type: ``command`` split like a shell would and run without one,
when the worker's ``--shell-allow`` patterns allow its argv (the executor:
``consumers.executors.shell``).

The pattern language (``argv_matches``) is shared by the workers' allowlist and the
tenants' grants. Its tenants' rule: none by default; an operator's grant
``shell=PATTERN`` lets a tenant run the commands the pattern matches
(``/opt/jobs/report.sh *``). A grant never widens the worker's own ``--shell-allow``: a
run needs both.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from fnmatch import fnmatchcase

from cronstream.schemas.events import Target
from cronstream.schemas.targets import TargetType

DOTDOT = re.compile(r"(?:^|[/=])\.\.(?:/|\Z)")  # a '..' path segment, also after --opt=


def problems(target: Target) -> list[str]:
    return [] if (target.command or "").strip() else ["target shell needs a command"]


def shell_words(pattern: str, what: str = "shell grant") -> tuple[str, ...]:
    """An argv pattern (a tenant's grant, or ``what`` else: a worker's allowlist entry)
    split into words; ValueError naming ``what`` when it cannot be one."""
    try:
        words = tuple(shlex.split(pattern))
    except ValueError as exc:
        raise ValueError(f"{what} {pattern!r}: {exc}") from None
    if not words or "**" in words[:-1]:
        raise ValueError(f"{what} {pattern!r}: empty, or '**' not last")
    return words


def argv_matches(
    words: tuple[str, ...], argv: list[str], word_matches: Callable[[str, str], bool] | None = None
) -> bool:
    """Whether ``argv`` matches the pattern ``words``: each word matches one argument
    (``word_matches``, by default ``option_glob``), a last word ``**`` any number of
    further arguments that are not options; no argument may hold a ``..`` path segment.
    The workers' shell allowlist uses it with a matcher of real paths."""
    if any(DOTDOT.search(arg) for arg in argv):
        return False
    if words[-1] == "**":
        words = words[:-1]
        if len(argv) < len(words) or any(arg.startswith("-") for arg in argv[len(words) :]):
            return False
        argv = argv[: len(words)]
    return len(words) == len(argv) and all(map(word_matches or option_glob, words, argv))


def option_glob(word: str, arg: str) -> bool:
    """A glob that never lets ``*`` or ``?`` stand for an option: an argument starting
    with ``-`` matches only a word that spells one out."""
    if arg.startswith("-") and not word.startswith("-"):
        return False
    return fnmatchcase(arg, word)


def why_not(
    _tenant: str, _job_id: str, target: Target, grants: tuple[tuple[str, ...], ...]
) -> str | None:
    try:
        argv = shlex.split(target.command or "")
    except ValueError:
        argv = []
    if argv and any(argv_matches(words, argv) for words in grants):
        return None
    return f"shell command {(target.command or '')[:200]!r} is not granted to the tenant"


TARGET = TargetType(
    name="shell",
    problems=problems,
    policy=why_not,
    grant=shell_words,
    executor="cronstream.consumers.executors.shell:executor",
)
