"""Event triggers and dependent jobs where tenants and operators meet them:
through the real API and admission a tenant defines triggers on its own topics only
(another tenant's: 403, nothing written to the jobs topic); the API and the dashboard
show a trigger's lag (the trigger group's committed offsets against the high
watermarks) and last record matched (history), and a dependent job's upstream day."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from cronstream.infra.replication import new_topic, topic_replication
from cronstream.runtime.kafka.clients import kafka_admin, kafka_producer
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import token_path
from cronstream.schemas.catalog import Topics, triggers_group
from cronstream.schemas.events import RunOutcome, RunStatus, Trigger, utc_now
from cronstream.schemas.ids import event_run_id
from cronstream.schemas.tenancy import tenant_user
from tests.integration.helpers import CronstreamProcess, read_topic, signed_in, ui_process
from tests.integration.history_runs import write_history
from tests.integration.tenants import Api
from tests.integration.test_api import eventually

pytestmark = pytest.mark.integration

HOOK = {"target": "http", "url": "https://example.com/hook"}


@pytest.fixture
def orders(ns: Settings, two: tuple[str, str]) -> Iterator[str]:
    """Tenant a's topic ``<a>.orders`` (2 partitions), made by an operator; 10 records on
    partition 0 and 4 on partition 1, written by the tenant."""
    topic = f"{two[0]}.orders"
    admin = kafka_admin(ns, superuser=True)  # must outlive its futures
    brokers = len(admin.list_topics(timeout=30).brokers)
    made = admin.create_topics([new_topic(topic, 2, {}, topic_replication(ns, brokers))])
    made[topic].result(30)
    producer = kafka_producer(ns.acting_as(tenant_user(two[0])))
    for partition, count in ((0, 10), (1, 4)):
        for i in range(count):
            producer.produce(topic, value=b'{"n": %d}' % i, partition=partition)
    assert producer.flush(30) == 0
    yield topic
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)


def test_a_tenant_triggers_from_its_own_topics_only_and_after_its_own_jobs(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, b = two
    with api.client(history_ns, a) as ca:
        foreign = ca.put("/v1/jobs/foreign", json={**HOOK, "on": {"topic": f"{b}.orders"}})
        assert foreign.status_code == 403, foreign.text
        assert foreign.json()["error"] == (
            f"trigger policy: on.topic '{b}.orders' is not one of the tenant's own topics ({a}.*)"
        )
        own = ca.put(
            "/v1/jobs/own", json={**HOOK, "on": {"topic": f"{a}.orders", "filter": "value.n > 1"}}
        )
        assert own.status_code == 200, own.text
        after = ca.put("/v1/jobs/report", json={**HOOK, "after": ["own"]})
        assert after.status_code == 200, after.text
        shown = eventually(lambda: ca.get("/v1/jobs/report"), lambda r: r.status_code == 200)
        assert shown.json()["after"] == ["own"]  # the tenant's own name of a/own
    with api.client(history_ns, b) as cb:
        assert cb.get("/v1/jobs/own/triggers").status_code == 404
    # The refused put came first on a's commands topic: nothing of it on the jobs topic.
    written = {(r.key or b"").decode() for r in read_topic(history_ns, Topics(history_ns).jobs)}
    assert written == {f"{a}/own", f"{a}/report"}
    assert api.backend.view.jobs[f"{a}/report"].after == (f"{a}/own",)


def test_a_triggers_lag_last_match_and_upstream_day_through_the_api_and_the_dashboard(  # long: one story
    history_ns: Settings,
    two: tuple[str, str],
    api: Api,
    orders: str,
    procs: list[CronstreamProcess],
    tmp_path: Path,
) -> None:
    a, _ = two
    group = triggers_group(history_ns.topic_prefix)
    # The trigger processor's commit, made here: partition 0 read to offset 6, 1 not yet.
    admin = kafka_admin(history_ns, superuser=True)
    done = [ConsumerGroupTopicPartitions(group, [TopicPartition(orders, 0, 6)])]
    for future in admin.alter_consumer_group_offsets(done).values():
        future.result(30)
    now = utc_now().replace(microsecond=0)
    job, run_at = f"{a}/orders", now - timedelta(seconds=1)
    matched = event_run_id(job, orders, 1, 3)
    write_history(
        history_ns,
        [
            RunOutcome(
                run_id=event_run_id(job, orders, 0, 2),
                job_id=job,
                tenant=a,
                status=RunStatus.SUCCEEDED,
                trigger=Trigger.EVENT,
                scheduled_at=now - timedelta(minutes=5),
                recorded_at=now,
            ),
            RunOutcome(
                run_id=matched,
                job_id=job,
                tenant=a,
                status=RunStatus.SUCCEEDED,
                trigger=Trigger.EVENT,
                scheduled_at=run_at,
                recorded_at=now,
            ),
        ],
    )
    with api.client(history_ns, a) as ca:
        assert ca.put("/v1/jobs/orders", json={**HOOK, "on": orders}).status_code == 200
        assert ca.put("/v1/jobs/report", json={**HOOK, "after": ["orders"]}).status_code == 200
        answer = eventually(
            lambda: ca.get("/v1/jobs/report/triggers"), lambda r: r.status_code == 200
        ).json()
        on = ca.get("/v1/jobs/orders/triggers").json()["on"]
    assert on["group"] == group
    assert on["lag_error"] is None
    assert on["partitions"] == [
        {"partition": 0, "start": 0, "end": 10, "committed": 6, "lag": 4},
        {"partition": 1, "start": 0, "end": 4, "committed": None, "lag": None},
    ]
    assert on["lag"] == 4
    assert on["last_matched"] == {
        "run_id": f"orders@evt:{orders}:1:3",
        "topic": orders,
        "partition": 1,
        "offset": 3,
        "record_time": run_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "status": "SUCCEEDED",
    }
    assert answer["describe"] == f"after {a}/orders"
    assert answer["after"] == {
        "date": run_at.date().isoformat(),
        "run": None,
        "jobs": [
            {
                "job_id": "orders",
                "known": True,
                "succeeded": True,
                "run_id": f"orders@evt:{orders}:1:3",
            }
        ],
    }
    _dashboard(history_ns, a, procs, tmp_path)


def _dashboard(settings: Settings, tenant: str, procs: list[CronstreamProcess], tmp: Path) -> None:
    """The job pages (the dashboard's own Kafka user, ``ui``, reads the lag too)."""
    url = ui_process(settings, procs, tmp)
    with signed_in(url, token_path(settings, tenant).read_text().strip()) as client:
        page = _page(client, "/ui/jobs/orders", "trigger-partitions")
        assert 'id="last-matched">1@3</span>' in page
        assert 'id="trigger-lag">4</span>' in page
        assert "<td>0</td><td>0</td><td>10</td><td>6</td><td>4</td>" in page
        assert "<td>1</td><td>0</td><td>4</td><td>none yet</td><td>-</td>" in page
        report = _page(client, "/ui/jobs/report", "upstream")
        assert 'href="/ui/jobs/orders">orders</a>' in report
        assert ">yes</a>" in report
        assert 'id="dependency-run">not run yet' in report
        quotas = client.get(f"/ui/tenants/{tenant}").text
        assert 'id="quota-event-jobs">1 / 100</span>' in quotas, quotas


def _page(client: httpx.Client, path: str, wanted: str) -> str:
    """The page once it has ``wanted`` (the dashboard's own view of the jobs topic
    follows it: a job just put appears within a second or two)."""
    deadline = time.monotonic() + 30
    while f'id="{wanted}"' not in (page := client.get(path)).text:
        assert time.monotonic() < deadline, page.text
        time.sleep(0.5)
    return page.text
