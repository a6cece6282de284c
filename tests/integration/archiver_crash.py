"""An archiver killed with SIGKILL at its first snapshot commit: after its data files and
manifests are in the bucket, before the catalog points at them (the moment at which a
crash must still leave each outcome archived once). ``tests/integration/test_archive.py``
runs it as a process of its own, in the test's namespace (``cli_env``):
``python -m tests.integration.archiver_crash``."""

from __future__ import annotations

import os
import signal
from typing import Any

from pyiceberg.table import Transaction
from pyiceberg.table.update import AddSnapshotUpdate

from cronstream.consumers.archiver import Archiver, ArchiverConfig
from cronstream.runtime.settings import Settings

_commit = Transaction.commit_transaction


def _killed(self: Any) -> Any:
    """The first commit of a snapshot (data files) never reaches the catalog; others
    (the table's partition specs, made on first use) do."""
    if not any(isinstance(u, AddSnapshotUpdate) for u in self._updates):
        return _commit(self)
    print("archiver_crash: data files written, killed before the commit", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return None


def main() -> None:
    settings = Settings.from_env().as_role("archiver")
    Transaction.commit_transaction = _killed  # type: ignore[method-assign]
    config = ArchiverConfig(
        group=f"{settings.topic_prefix}.archiver",
        flush_rows=10**6,
        flush_s=2.0,
        compact_every_s=1e12,
    )
    Archiver(settings, config).run(lambda: False)


if __name__ == "__main__":
    main()
