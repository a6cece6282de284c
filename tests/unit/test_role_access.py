"""The ACLs the bootstrap gives each of cronstream's roles (schemas.catalog.ROLES)."""

from __future__ import annotations

from enum import Enum

from cronstream.infra.kafka_access import _role_access
from cronstream.schemas.catalog import ROLES, Topics


class Namespace:
    topic_prefix = "acme"
    partitions = 3


def _name(value: Enum | str | int) -> str:
    """The name of an ACL binding's enum field (typed as also a str or int)."""
    assert isinstance(value, Enum)
    return value.name


def _grants(role: str) -> set[tuple[str, str, str, str]]:
    bindings = _role_access(Topics(Namespace()), ROLES[role], f"User:cronstream-{role}")
    assert {b.principal for b in bindings} == {f"User:cronstream-{role}"}
    return {
        (_name(b.restype), b.name, _name(b.resource_pattern_type), _name(b.operation))
        for b in bindings
    }


def test_the_sink_reads_history_and_run_output_writes_dead_letters_and_sets_its_group() -> None:
    assert _grants("sink") == {
        ("TOPIC", "acme.history", "LITERAL", "READ"),
        ("TOPIC", "acme.history", "LITERAL", "DESCRIBE"),
        ("TOPIC", "acme.run-output", "LITERAL", "READ"),
        ("TOPIC", "acme.run-output", "LITERAL", "DESCRIBE"),
        ("TOPIC", "acme.dlq", "LITERAL", "WRITE"),
        ("TOPIC", "acme.dlq", "LITERAL", "DESCRIBE"),
        ("GROUP", "acme.", "PREFIXED", "READ"),
        ("GROUP", "acme.", "PREFIXED", "DESCRIBE"),
        # its group's session timeout: a KIP-848 group keeps it on the broker
        ("GROUP", "acme.", "PREFIXED", "DESCRIBE_CONFIGS"),
        ("GROUP", "acme.", "PREFIXED", "ALTER_CONFIGS"),
    }


def test_only_the_admission_and_the_dashboard_write_jobs_and_reach_tenants() -> None:
    """The dashboard (`cronstream ui`) writes jobs for the admin's acts on operators'
    jobs (audited); a tenant's job it changes through the admission, like the API."""
    writes_jobs = {r for r in ROLES if ("TOPIC", "acme.jobs", "LITERAL", "WRITE") in _grants(r)}
    assert writes_jobs == {"admission", "ui"}
    tenant_writes = {r for r in ROLES if ("TOPIC", "acme.t.", "PREFIXED", "WRITE") in _grants(r)}
    assert tenant_writes == {"admission", "api", "ui"}
    own = {
        "flows-coordinator": "acme.flows-coordinator-",
        "connect": "acme.connect-",
        "triggers": "acme.triggers-",
    }
    for role in ROLES:  # literal names, the tenant prefix or a framework's own topics:
        for kind, name, pattern, _op in _grants(role):  # never the whole namespace
            if kind == "TOPIC" and pattern == "PREFIXED":
                assert name == own.get(role, "acme.t.")


def test_kafka_connect_reads_history_and_uses_its_own_topics_only() -> None:
    grants = _grants("connect")
    assert {(g[1], g[3]) for g in grants if g[0] == "TOPIC" and g[2] == "LITERAL"} == {
        ("acme.history", "READ"),
        ("acme.history", "DESCRIBE"),
    }
    assert {g[3] for g in grants if g[1] == "acme.connect-"} == {
        "READ",
        "WRITE",
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
    }


def test_the_flows_coordinator_reaches_its_own_topics_and_writes_no_definition() -> None:
    grants = _grants("flows-coordinator")
    assert ("TOPIC", "acme.flows-coordinator-", "PREFIXED", "WRITE") in grants
    assert ("TOPIC", "acme.flows.events", "LITERAL", "READ") in grants
    assert ("TOPIC", "acme.runs.low", "LITERAL", "WRITE") in grants
    assert not {g for g in grants if g[1] in ("acme.flows", "acme.jobs") and g[3] == "WRITE"}
    # the worker starts flow runs and reports node outcomes; it reads no flow event
    assert ("TOPIC", "acme.flows.events", "LITERAL", "WRITE") in _grants("worker")
    assert ("TOPIC", "acme.flows.events", "LITERAL", "READ") not in _grants("worker")


def test_only_the_kip848_groups_alter_their_configs() -> None:
    """A KIP-848 group keeps its session timeout on the broker (runtime.kafka.groups):
    the worker and the sink (each member its share of each topic) set their group's at
    start; no other role may."""
    alters = {r for r in ROLES if ("GROUP", "acme.", "PREFIXED", "ALTER_CONFIGS") in _grants(r)}
    assert alters == {"worker", "sink"}


def test_only_the_worker_writes_run_output_and_only_the_sink_reads_it() -> None:
    """What runs printed is read back through Cassandra (docs/run-output.md): no role but
    the sink reads the topic, and no tenant has an ACL on it (``infra.tenants``)."""
    topic = "acme.run-output"
    writers = {r for r in ROLES if ("TOPIC", topic, "LITERAL", "WRITE") in _grants(r)}
    readers = {r for r in ROLES if ("TOPIC", topic, "LITERAL", "READ") in _grants(r)}
    assert (writers, readers) == ({"worker"}, {"sink"})


def test_the_trigger_processor_reads_jobs_writes_runs_and_reads_only_granted_sources() -> None:
    """The trigger processor's source topics are granted apart (a tenant's ``<tenant>.``
    when it is added, an operator's by name): never cronstream's own, nor the whole
    namespace."""
    from cronstream.infra.tenants import trigger_source_acls

    grants = _grants("triggers")
    literal = {(g[1], g[3]) for g in grants if g[0] == "TOPIC" and g[2] == "LITERAL"}
    assert ("acme.jobs", "READ") in literal
    assert ("acme.jobs", "WRITE") not in literal
    assert {t for t, op in literal if op == "WRITE"} == {
        "acme.runs.high",
        "acme.runs.normal",
        "acme.runs.low",
        "acme.dlq",
    }
    assert {g[3] for g in grants if g[1] == "acme.triggers-"} == {
        "READ",
        "WRITE",
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
    }
    sources = {
        (b.principal, b.name, _name(b.resource_pattern_type), _name(b.operation))
        for b in trigger_source_acls("beta.")
    }
    assert sources == {
        ("User:cronstream-triggers", "beta.", "PREFIXED", "READ"),
        ("User:cronstream-triggers", "beta.", "PREFIXED", "DESCRIBE"),
    }
