"""The exceptions of ``infra``: the local stack (services, bootstrap, Cassandra access,
tenants)."""

from __future__ import annotations


class StackError(RuntimeError):
    """A service could not be fetched, started or stopped; the message says what to do."""


class BootstrapError(RuntimeError):
    """The cluster disagrees with the catalog, or a service refused a bootstrap step."""


class CassandraAccessError(RuntimeError):
    """Cassandra refuses both cronstream_admin and the default role."""


class TenantError(ValueError):
    """A tenant name that cannot be, or a stack without authentication."""
