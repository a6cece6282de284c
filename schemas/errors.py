"""The exceptions of ``schemas``, the wire contract: bad bytes, the schema files and the
registry, target types, and the rules a definition must keep (cron, zones, timing,
limits, grants). Each ``ValueError`` here is bad input (refused, or dead-lettered with
its message); each ``RuntimeError`` an outage or a bug of ours."""

from __future__ import annotations


# -- records and schemas ----------------------------------------------------------
class DecodeError(ValueError):
    """A record's bytes are not a value this consumer can read (bad input, not a bug)."""


class SchemaFileError(RuntimeError):
    """An .avsc file is missing or broken: a bug in this repository, not bad input."""


class TargetTypeError(RuntimeError):
    """A target type that cannot be registered (the message says which and why)."""


class RegistryUnavailable(RuntimeError):
    """The schema registry could not be reached or answered with a server error."""


class RegistryError(RuntimeError):
    """The registry refused a request (unknown subject or id, incompatible schema...)."""

    def __init__(self, message: str, *, status: int, code: int | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


# -- definitions: what a job or a tenant may say ---------------------------------
class GrantError(ValueError):
    """A grant that cannot be read."""


class HeadError(ValueError):
    """The bytes are not a record head in our schema's layout."""


class InvalidTiming(ValueError):
    """A definition that decodes but cannot be scheduled (an interval not positive)."""


class LimitError(ValueError):
    """A record over the limits (the message lists each one: ``refusal``)."""


class CronError(ValueError):
    """An expression that cron cannot read; the message says which part and why."""


class ZoneError(ValueError):
    """Not an IANA time zone name (of the pinned tzdata)."""


class SpecError(ValueError):
    """A job spec breaks one or more rules; ``problems`` lists each one."""

    def __init__(self, subject: str, problems: list[str]) -> None:
        self.subject = subject
        self.problems = problems
        super().__init__(f"{subject}: " + "; ".join(problems))


class FilterError(ValueError):
    """A trigger's filter (or path) that does not parse: the message names the column
    (1-based) where reading stopped, and ``column`` holds it."""

    def __init__(self, message: str, column: int) -> None:
        self.column = column
        super().__init__(f"{message} at column {column}")
