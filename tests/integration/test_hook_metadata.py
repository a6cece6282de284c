"""A role's partition hook runs inside its consumer's poll; confluent-kafka aborts the
process when that consumer's ``list_topics`` is called there and another callback
follows in the same poll. Found by the chaos suite: both workers died so (C assertion
``cs != NULL`` in ``CallState_get``) with a broker lost under load, their watermarks
query refused in the assignment hook and the topic's metadata asked again."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from tests.conftest import cli_env

pytestmark = pytest.mark.integration


def _member(ns: Settings, how: str) -> subprocess.CompletedProcess[str]:
    topic = Topics(ns).jobs
    return subprocess.run(
        [sys.executable, "-m", "tests.integration.hook_metadata", how, topic, f"{topic}.{how}"],
        env=cli_env(ns),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(300)
def test_a_hook_asking_its_consumer_for_metadata_does_not_abort_the_process(ns: Settings) -> None:
    """``refresh_metadata`` (what ``watermarks`` calls after a refusal) in a hook: the
    member goes on serving callbacks. The consumer's own ``list_topics`` there, the
    call it replaced, aborts the process: the hazard this guards against, shown on the
    installed client (if a later confluent-kafka stops aborting, this says so)."""
    guarded = _member(ns, "refresh_metadata")
    assert (guarded.returncode, guarded.stdout.split()) == (0, ["assigned", "served"]), (
        guarded.stderr[-2000:]
    )
    direct = _member(ns, "list_topics")
    assert direct.returncode == -signal.SIGABRT, (direct.returncode, direct.stderr[-2000:])
    assert direct.stdout.split() == ["assigned"]
    assert "CallState_get: Assertion `cs != NULL' failed" in direct.stderr
