"""One record cannot stop a processor, on the real stack: a record that makes
the admission or the worker raise is refused or dead-lettered with the error, its offset
committed, and the next record is handled within seconds. The faults are injected into
a processor running on a thread of the test (``Admission.decide``, the worker's
``RunContext`` patched to raise for one record); ``http://[zz]/`` is also put as a tenant would."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from cronstream.consumers.worker import Worker, WorkerConfig
from cronstream.consumers.worker import attempts as attempts_module
from cronstream.producers.admission.core import Admission, Quotas
from cronstream.producers.tenant import TenantClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import CronSchedule, DeadLetter, JobDefinition, Priority, RunStatus
from cronstream.schemas.events import Target as JobTarget
from cronstream.schemas.tenancy import TenantCommand, TenantResult
from tests.integration.helpers import Target, decoded, read_topic
from tests.integration.tenants import AdmissionThread
from tests.integration.test_worker import put, settled, trigger, wait_for

pytestmark = pytest.mark.integration
T0 = datetime(2026, 11, 27, tzinfo=UTC)


def _job(job_id: str, url: str = "https://example.com/hook") -> JobDefinition:
    return JobDefinition(
        job_id=job_id,
        updated_at=T0,
        schedule=CronSchedule(expression="0 2 * * *"),
        target=JobTarget(type="http", url=url),
    )


def test_a_command_the_admission_raises_on_is_refused_and_the_next_is_accepted(
    ns: Settings,
    two: tuple[str, str],
    admission: AdmissionThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decide = Admission.decide

    def poisoned(self: Admission, tenant: str, command: TenantCommand, **kw: Any) -> Any:
        if command.job_id == "poison":
            raise ValueError("a bug this command reaches")
        return decide(self, tenant, command, **kw)

    monkeypatch.setattr(Admission, "decide", poisoned)
    a, _ = two
    with TenantClient(ns, a) as client:
        refused = client.put(_job("poison"))
        assert not refused.accepted
        assert (
            refused.reason
            == "internal error on this record: ValueError: a bug this command reaches"
        )
        began = time.monotonic()
        accepted = client.put(_job("good"))
        assert accepted.accepted, accepted.reason
        assert time.monotonic() - began < 10
        # The tenant's own http://[zz]/: refused with its reason (a fault today, a
        # validation problem once the spec check knows it), the next put accepted.
        bracket = client.put(_job("bracket", url="http://[zz]/"))
        assert not bracket.accepted
        assert bracket.reason
        assert client.put(_job("after")).accepted
    # The offsets were committed: a new admission of the group answers none of them again.
    admission.stop()
    again = AdmissionThread(ns, Quotas(max_jobs=10))
    try:
        with TenantClient(ns, a) as client:
            assert client.put(_job("later")).accepted
    finally:
        again.stop()
    answers = [r.value for r in read_topic(ns, Topics(ns).tenant_results(a))]
    assert len(answers) == 5, "a command was answered twice"
    results = decoded(ns, Topics(ns).tenant_results(a), TenantResult)
    assert [r.job_id for r in results] == ["poison", "good", "bracket", "after", "later"]


def test_a_run_the_worker_raises_on_is_dead_lettered_and_the_others_run(
    ns: Settings, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = attempts_module.RunContext

    def poisoned(**fields: Any) -> Any:
        if fields["run_id"].endswith("poison"):
            raise RuntimeError("a bug this run reaches")
        return context(**fields)

    monkeypatch.setattr(attempts_module, "RunContext", poisoned)
    put(ns, id="hook", target="http", url=f"{target.url}/hook")
    config = WorkerConfig(
        group=f"{ns.topic_prefix}.workers",
        name="w-faults",
        http_allow=("127.0.0.0/8",),
        concurrency=4,
    )
    worker = Worker(ns.as_role("worker"), config)
    stopping = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stopping.is_set,))
    thread.start()
    try:
        poison, *good = trigger(ns, "hook", ["poison", "k1", "k2"])
        seen = wait_for(ns, settled(good), timeout=90)
        seen = wait_for(ns, settled([poison], status="DEAD_LETTERED"), timeout=30)
    finally:
        stopping.set()
        thread.join(60)
    assert not thread.is_alive()
    finals = {o.run_id: o for o in seen if o.status is not RunStatus.STARTED}
    assert (
        finals[poison].error
        == "internal error on this record: RuntimeError: a bug this run reaches"
    )
    assert all(finals[r].status is RunStatus.SUCCEEDED for r in good)
    (letter,) = decoded(ns, Topics(ns).dlq, DeadLetter)
    assert (letter.stage, letter.run_id) == ("worker", poison)
    assert letter.source_topic == Topics(ns).runs(Priority.NORMAL)
    assert poison not in target.keys("/hook")  # it never reached its executor
    assert set(good) <= set(target.keys("/hook"))
