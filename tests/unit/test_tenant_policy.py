"""The tenants' target policy (schemas.policy): what a tenant may call by default, what
only a grant allows, and how the admission applies it."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronstream.producers.admission.core import Admission, Quotas
from cronstream.runtime.grants import PolicyBook, read_grants
from cronstream.schemas.errors import GrantError
from cronstream.schemas.events import IntervalSchedule, JobDefinition, Target
from cronstream.schemas.policy import TenantPolicy, parse_grant
from cronstream.schemas.targets.http import connect_allowed
from cronstream.schemas.targets.shell import argv_matches
from cronstream.schemas.tenancy import RefusalCode, TenantAction, TenantCommand

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def http(url: str) -> Target:
    return Target(type="http", url=url)


@pytest.mark.parametrize(
    ("target", "refused"),
    [
        (http("https://hooks.example.com/x"), False),
        (http("http://93.184.216.34/x"), False),
        (http("http://127.0.0.1:9190/-/quit"), True),
        (http("http://10.1.2.3/"), True),
        (http("http://[::1]:8080/"), True),
        (http("http://[::ffff:127.0.0.1]/"), True),
        (http("http://169.254.169.254/latest/meta-data"), True),
        (http("http://localhost:8083/connectors"), True),
        (http("http://prometheus:9090/"), True),
        (http("http://db.internal/"), True),
        (http("http://[zz]/"), True),
        (http("http://127.1:8181/"), True),  # found by the tenant-flood chaos scenario
        (http("http://0x7f.0.0.1:8181/"), True),
        (http("http://2130706433/"), True),
        (http("http://[64:ff9b::7f00:1]/"), True),  # NAT64 to 127.0.0.1
        (http("http://[2002:7f00:1::]/"), True),  # 6to4 of 127.0.0.1
        (Target(type="kafka", topic="acme.events"), False),
        (Target(type="kafka", topic="cronstream.runs.high"), True),
        (Target(type="kafka", topic="beta.events"), True),
        (Target(type="kafka", topic="acmex.events"), True),
        (Target(type="python", callable="os:system"), True),
        (Target(type="python", callable="examples.jobs:ping"), True),
        (Target(type="shell", command="sh -c 'id'"), True),
        (Target(type="flow"), True),
        (Target(type="carrier-pigeon"), True),
    ],
)
def test_a_tenant_without_grants_may_use_public_http_and_its_own_topics_only(
    target: Target, refused: bool
) -> None:
    problems = TenantPolicy().problems("acme", "acme/j", target)
    assert bool(problems) is refused, problems
    if refused:
        assert problems[0].startswith("target policy: ")


def test_operators_jobs_are_not_bounded_by_the_tenant_policy() -> None:
    policy = TenantPolicy()
    assert policy.problems("default", "j", Target(type="python", callable="os:system")) == []
    assert policy.problems("default", "j", http("http://127.0.0.1:9190/")) == []


def test_an_http_grant_names_exactly_a_host_and_port() -> None:
    policy = TenantPolicy(["demo:http=127.0.0.1:8787"])
    assert policy.problems("demo", "demo/j", http("http://127.0.0.1:8787/hooks/demo")) == []
    assert policy.problems("demo", "demo/j", http("http://127.0.0.1:9190/-/quit"))
    assert policy.problems("demo", "demo/j", http("http://127.0.0.2:8787/"))
    assert policy.problems("other", "other/j", http("http://127.0.0.1:8787/"))  # not its grant


def test_network_and_name_grants() -> None:
    policy = TenantPolicy(
        ["acme:http=10.0.0.0/8", "acme:http=billing.internal:8443", "acme:http=[fd00::/8]:443"]
    )
    assert policy.problems("acme", "acme/j", http("http://10.9.8.7:1234/")) == []
    assert policy.problems("acme", "acme/j", http("https://billing.internal:8443/")) == []
    assert policy.problems("acme", "acme/j", http("https://billing.internal/"))  # port 443
    assert policy.problems("acme", "acme/j", http("https://[fd00::1]/")) == []
    acme, beta = policy.of("acme").granted("http"), policy.of("beta").granted("http")
    ip = ipaddress.ip_address("10.1.1.1")
    assert connect_allowed(acme, "anything.example.com", ip, 80)
    assert not connect_allowed(beta, "anything.example.com", ip, 80)
    internal = ipaddress.ip_address("192.168.1.5")
    assert connect_allowed(acme, "billing.internal", internal, 8443)
    assert not connect_allowed(acme, "billing.internal", internal, 8444)
    assert connect_allowed(beta, "example.com", ipaddress.ip_address("93.184.216.34"), 80)


def test_python_shell_kafka_and_flow_grants() -> None:
    policy = TenantPolicy(
        [
            "acme:python=examples.jobs",
            "acme:shell=/opt/jobs/report.sh *",
            "acme:kafka=shared.*",
            "acme:flow=etl-*",
        ]
    )
    ok = [
        Target(type="python", callable="examples.jobs:ping"),
        Target(type="python", callable="examples.jobs.sub:f"),
        Target(type="shell", command="/opt/jobs/report.sh daily"),
        Target(type="kafka", topic="shared.events"),
        Target(type="flow"),
    ]
    for target in ok:
        assert policy.problems("acme", "acme/etl-nightly", target) == [], target
    refused = [
        Target(type="python", callable="examples.jobsx:ping"),
        Target(type="python", callable="os:system"),
        Target(type="shell", command="/opt/jobs/report.sh --file=/etc/shadow"),
        Target(type="shell", command="/opt/jobs/../../bin/evil.sh x"),
        Target(type="shell", command="/opt/jobs/report.sh a b"),
        Target(type="kafka", topic="cronstream.jobs"),
    ]
    for target in refused:
        assert policy.problems("acme", "acme/etl-nightly", target), target
    assert policy.problems("acme", "acme/other", Target(type="flow"))


@pytest.mark.parametrize(
    ("pattern", "argv", "matches"),
    [
        (("date", "*"), ["date", "+%s"], True),
        (("date", "*"), ["date", "--file=SECRET"], False),
        (("date", "--utc"), ["date", "--utc"], True),
        (("/opt/jobs/*.sh",), ["/opt/jobs/../../evil.sh"], False),
        (("/opt/jobs/*.sh",), ["/opt/jobs/a.sh"], True),
        (("sleep", "**"), ["sleep", "1", "2"], True),
        (("sleep", "**"), ["sleep", "1", "-x"], False),
        (("sleep", "*"), ["sleep", "1", "2"], False),
    ],
)
def test_argv_patterns_spell_out_options_and_never_climb(
    pattern: tuple[str, ...], argv: list[str], matches: bool
) -> None:
    assert argv_matches(pattern, argv) is matches


@pytest.mark.parametrize(
    "text",
    [
        "demo",
        "demo:http",
        "demo:http=",
        ":http=1.2.3.4",
        "demo:ftp=x",
        "demo:http=1.2.3.4:0",
        "demo:http=1.2.3.4:99999",
        "demo:http=bad host",
        "demo:shell=",
        "demo:shell='unclosed",
    ],
)
def test_a_grant_that_cannot_be_read_is_refused_naming_it(text: str) -> None:
    with pytest.raises(GrantError):
        TenantPolicy([text])


def test_parse_grant() -> None:
    assert parse_grant(" demo:http=127.0.0.1:8787 ") == ("demo", "http", "127.0.0.1:8787")


def test_the_policy_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "grants"
    book = PolicyBook(["acme:kafka=a.*"], path)
    assert book.current().problems("beta", "beta/j", http("http://10.0.0.1/"))
    path.write_text("# operators' grants\nbeta:http=10.0.0.0/8  # the billing net\n")
    book._checked = 0.0  # the next look is due
    assert book.current().problems("beta", "beta/j", http("http://10.0.0.1/")) == []
    assert book.current().problems("acme", "acme/j", Target(type="kafka", topic="a.b")) == []
    path.write_text("beta:nonsense=1\n")  # a bad file keeps the grants before
    book._checked = 0.0
    assert book.current().problems("beta", "beta/j", http("http://10.0.0.1/")) == []
    with pytest.raises(GrantError, match="grants"):
        read_grants(path)


def _put(target: Target) -> TenantCommand:
    job = JobDefinition(
        job_id="j",
        tenant="x",
        schedule=IntervalSchedule(every_ms=60_000, anchor=NOW),
        target=target,
        updated_at=NOW,
    )
    return TenantCommand(
        command_id="c1", action=TenantAction.PUT, job_id="j", issued_at=NOW, job=job
    )


def test_the_admission_refuses_a_target_the_tenant_is_not_granted() -> None:
    admission = Admission(Quotas(), max_payload_bytes=10_000)
    decision = admission.decide(
        "acme", _put(http("http://127.0.0.1:9190/-/quit")), offset=0, now=NOW
    )
    assert not decision.result.accepted
    assert decision.job is None
    assert "127.0.0.1 port 9190 is not a public address" in (decision.result.reason or "")
    assert decision.result.code is RefusalCode.POLICY  # the API's 403
    admission.policy = TenantPolicy(["acme:http=127.0.0.1:9190"])
    decision = admission.decide(
        "acme", _put(http("http://127.0.0.1:9190/-/quit")), offset=1, now=NOW
    )
    assert decision.result.accepted
    assert decision.job is not None
    assert decision.job[1] is not None
    assert decision.job[1].tenant == "acme"


def test_the_admission_refuses_a_url_urlparse_cannot_read() -> None:
    admission = Admission(Quotas(), max_payload_bytes=10_000)
    bad = _put(http("http://[zz]/"))
    decision = admission.decide("acme", bad, offset=0, now=NOW)
    assert not decision.result.accepted
    assert "not a usable URL" in (decision.result.reason or "")
    assert decision.result.code is RefusalCode.INVALID  # the definition's rules, before policy


def test_an_answer_never_echoes_an_oversized_id_in_full() -> None:
    """Found by the tenant-flood chaos scenario: a 400 KB job id echoed as the answer's
    key, header and value made a 1.2 MB record the broker refused, and the admission
    stopped on it at every restart."""
    admission = Admission(Quotas(), max_payload_bytes=10_000)
    huge = TenantCommand(
        command_id="c" * 300_000, action=TenantAction.DELETE, job_id="j" * 400_000, issued_at=NOW
    )
    result = admission.decide("acme", huge, offset=7, now=NOW).result
    assert not result.accepted
    assert len(result.job_id) <= 200
    assert result.command_id == ""  # answered by its offset
    assert result.source_offset == 7
    assert len(result.reason or "") <= 2000
