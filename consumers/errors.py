"""The exceptions of ``consumers``: the executors' contract (``ExecutionFailed`` and its
kinds: what an attempt raises, and so the status and retry its outcome says; a target
plugin raises these), and the history store's files (statements, migrations)."""

from __future__ import annotations

from cronstream.consumers.core.output import Result


# -- the executors' contract (``consumers.executors.base``) -------------------------
class ExecutionFailed(Exception):
    """An attempt did not succeed. ``retriable``: another attempt might. ``output``: what
    it printed or returned before it failed (a failing script's stderr, an error page's
    body), kept as a successful attempt's is (``consumers.core.output``)."""

    retriable = True
    status = "FAILED"
    output: Result = None  # also for a subclass whose __init__ does not pass it on

    def __init__(self, *args: object, output: Result = None) -> None:
        super().__init__(*args)
        self.output = output


class TargetInvalid(ExecutionFailed):
    """The target cannot be built or is not allowed here: retrying cannot help."""

    retriable = False


class PermanentFailure(ExecutionFailed):
    """The target answered that this request will never succeed (e.g. HTTP 404)."""

    retriable = False


class InternalError(ExecutionFailed):
    """Handling this run failed inside the worker (a bug of ours, or a job that broke
    its thread): the run's outcome, never the worker's end. Not retried."""

    retriable = False


class TimedOut(ExecutionFailed):
    status = "TIMED_OUT"


class Cancelled(ExecutionFailed):
    retriable = False
    status = "CANCELED"


# -- the history store -------------------------------------------------------------
class StatementsError(ValueError):
    """The named-statements file is malformed."""


class MigrationError(RuntimeError):
    """A migration file is malformed or a statement failed."""


class ArchiveUnavailable(RuntimeError):
    """A history query needed the archive table (days Cassandra no longer holds) and its
    catalog or object store did not answer: the query fails, it never answers with
    Cassandra's part alone."""
