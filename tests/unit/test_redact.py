"""Secrets by reference and redaction: what cronstream prints and records holds no
credential and no raw control character (found by review: Authorization headers and URL
credentials were printed by `jobs get`/`tail`, kept in errors, and `history` printed
control characters as they were)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cronstream.cli.history import _cell
from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.secrets import Secrets, env_name, tenant_env_name
from cronstream.schemas.definition import job_from_spec, literal_secrets
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import RunOutcome, RunStatus, utc_now
from cronstream.schemas.redact import (
    MASK,
    escape_controls,
    redact_headers,
    redact_jsonable,
    redact_text,
    redact_url,
    scrub,
    secret_name,
    sensitive,
)
from tests.unit.test_executors import context


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@example.com/hook", "https://***@example.com/hook"),
        ("https://example.com/h?token=abc&x=1", "https://example.com/h?token=***&x=1"),
        (
            "https://example.com/h?X-Amz-Signature=s&api_key=k&key=v&page=2",
            "https://example.com/h?X-Amz-Signature=***&api_key=***&key=***&page=2",
        ),
        ("https://example.com/h?x=1", "https://example.com/h?x=1"),
        ("http://[::1/broken", "http://***"),
    ],
)
def test_urls_lose_their_userinfo_and_sensitive_query_values(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_sensitive_headers_are_masked_but_secret_references_are_shown() -> None:
    headers = {
        "Authorization": "Bearer abc",
        "X-Api-Key": "k",
        "Cookie": "s=1",
        "X-Auth-Token": "t",
        "X-Team": "billing",
        "Proxy-Authorization": "secret:proxy",
        "Idempotency-Key": "run-1",
    }
    assert redact_headers(headers) == {
        "Authorization": MASK,
        "X-Api-Key": MASK,
        "Cookie": MASK,
        "X-Auth-Token": MASK,
        "X-Team": "billing",
        "Proxy-Authorization": "secret:proxy",
        "Idempotency-Key": "run-1",
    }


def test_urls_inside_error_text_are_redacted() -> None:
    error = "ExecutionFailed: POST https://u:hunter2@h.example/x?token=t1 failed: refused"
    assert redact_text(error) == (
        "ExecutionFailed: POST https://***@h.example/x?token=*** failed: refused"
    )


def test_control_and_reordering_characters_are_escaped() -> None:
    assert escape_controls("ok\x1b[31mred\x07\n\u202eevil\x7f") == (
        "ok\\x1b[31mred\\x07\\x0a\\u202eevil\\x7f"
    )
    assert escape_controls("plain text, é ü 日本") == "plain text, é ü 日本"


def test_a_record_as_json_is_redacted_everywhere() -> None:
    record = {
        "target": {"url": "https://a:b@h/x", "headers": {"Authorization": "x"}},
        "error": "GET https://a:b@h/ failed",
        "payload": "{}",
    }
    assert redact_jsonable(record) == {
        "target": {"url": "https://***@h/x", "headers": {"Authorization": MASK}},
        "error": "GET https://***@h/ failed",
        "payload": "{}",
    }


def test_history_cells_show_no_control_characters_or_credentials() -> None:
    row = RunOutcome(
        run_id="j@manual:1",
        job_id="j",
        attempt=1,
        status=RunStatus.FAILED,
        scheduled_at=utc_now(),
        recorded_at=utc_now(),
        error="exit status 1: \x1b]0;pwned\x07 https://u:p@h/",
    )
    assert _cell(row, "error") == "exit status 1: \\x1b]0;pwned\\x07 https://***@h/"


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("secret:db-token", "db-token"),
        ("secret:a.b_c", "a.b_c"),
        ("secret:../x", None),
        ("secret:a/b", None),
        ("Bearer secret:x", None),
        ("secret:", None),
    ],
)
def test_secret_references(value: str, name: str | None) -> None:
    assert secret_name(value) == name


def test_secrets_come_from_the_directory_then_the_environment(tmp_path: Path) -> None:
    (tmp_path / "api-token").write_text("Bearer from-file\n")
    secrets = Secrets(tmp_path, env={env_name("api-token"): "from-env", env_name("other"): "o"})
    assert env_name("api-token") == "CRONSTREAM_SECRET_API_TOKEN"
    ctx = context()
    assert secrets.headers(
        {"Authorization": "secret:api-token", "X": "secret:other", "Y": "plain"}, ctx
    ) == {
        "Authorization": "Bearer from-file",
        "X": "o",
        "Y": "plain",
    }
    with pytest.raises(TargetInvalid, match="'missing' is not configured") as caught:
        secrets.resolve("missing")
    assert "from-file" not in str(caught.value)
    (tmp_path / "two-lines").write_text("a\nb\n")
    with pytest.raises(TargetInvalid, match="line break"):
        secrets.resolve("two-lines")
    assert ctx.revealed.scrub("sent Bearer from-file") == "sent ***"


def test_a_tenant_resolves_secrets_only_in_its_own_namespace(tmp_path: Path) -> None:
    """Found by probing: a tenant's job naming secret:billing-token got the
    operators' secret."""
    (tmp_path / "billing-token").write_text("operators-value\n")
    env = {env_name("billing-token"): "operators-env", env_name("shared"): "operators-shared"}
    secrets = Secrets(tmp_path, env=env)
    for name in ("billing-token", "shared"):
        with pytest.raises(TargetInvalid, match="not configured for tenant 'acme'") as caught:
            secrets.resolve(name, "acme")
        assert "operators" not in str(caught.value)
        # what the tenant reads names no place of the worker's (the operators' log does)
        assert str(tmp_path) not in str(caught.value)
        assert "CRONSTREAM_" not in str(caught.value)
    assert secrets.resolve("billing-token") == "operators-value"  # the operators' own
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "billing-token").write_text("acme-value\n")
    assert secrets.resolve("billing-token", "acme") == "acme-value"
    with pytest.raises(TargetInvalid, match="for tenant 'globex'"):
        secrets.resolve("billing-token", "globex")
    variable = tenant_env_name("globex", "billing-token")
    assert variable == "CRONSTREAM_TENANT_SECRET_GLOBEX__BILLING_TOKEN"
    in_env = Secrets(tmp_path, env={**env, variable: "globex-env"})
    assert in_env.resolve("billing-token", "globex") == "globex-env"
    assert in_env.resolve("billing-token", "acme") == "acme-value"  # a file first
    ctx = context(tenant="acme")
    assert secrets.headers({"Authorization": "secret:billing-token"}, ctx) == {
        "Authorization": "acme-value"
    }
    assert ctx.revealed.scrub("echo: acme-value") == "echo: ***"


@pytest.mark.parametrize(
    ("name", "tenant", "why"),
    [
        ("../billing-token", "default", "not a secret name"),
        ("a/b", "default", "not a secret"),
        ("x", "../etc", "not a tenant name"),
        ("x", "acme/..", "not a tenant name"),
        ("x", "", "not a tenant name"),
        ("x", "ACME", "not a tenant name"),
    ],
)
def test_a_secret_lookup_never_leaves_its_namespace(
    tmp_path: Path, name: str, tenant: str, why: str
) -> None:
    (tmp_path / "x").write_text("operators-x")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "x").write_text("elsewhere")
    with pytest.raises(TargetInvalid, match=why):
        Secrets(tmp_path / "etc", env={}).resolve(name, tenant)


def test_no_two_namespaces_share_a_variable() -> None:
    """A tenant whose name ends or joins the same as another's must not read its
    variables: the operators' names and every tenant's differ, except a tenant named
    with '--', which gets files only."""
    tenants = ["a", "a-b", "ab", "a-b-c", "a-", "b", "acme", "acme-x", "x-acme", "a0", "a--b"]
    names = ["x", "b-x", "b_x", "b__x", "b--x", "x.y", "c", "acme__x", "acme-x", "x-b"]
    owners: dict[str, str] = {}
    for name in names:
        owners.setdefault(env_name(name), "default")
    for tenant in tenants:
        for name in names:
            variable = tenant_env_name(tenant, name)
            if variable is None:
                assert "--" in tenant
                continue
            assert owners.setdefault(variable, tenant) == tenant, variable
    assert tenant_env_name("a--b", "c") is None


@pytest.mark.parametrize(
    ("text", "values", "scrubbed"),
    [
        ("401: you sent Bearer abc.def/ghi", ["Bearer abc.def/ghi"], "401: you sent ***"),
        ("token abc.def/ghi is revoked", ["Bearer abc.def/ghi"], "token *** is revoked"),
        ("GET /?auth=Bearer%20abc.def%2Fghi", ["Bearer abc.def/ghi"], "GET /?auth=***"),
        ("q=Bearer+abc.def%2Fghi", ["Bearer abc.def/ghi"], "q=***"),
        ('{"authorization": "p\\"w\\\\x1"}', ['p"w\\x1'], '{"authorization": "***"}'),
        ("body cut: xx Bearer abc.d", ["Bearer abc.def/ghi"], "body cut: xx ***"),
        ("ends with Bear", ["Bearer abc.def/ghi"], "ends with Bear"),  # under MIN_PART
        ("ab then abc", ["ab", "abc"], "*** then ***"),
        ("nothing here", [], "nothing here"),
        ("keep it", [""], "keep it"),
        ("Bearer x stays", ["Bearer x"], "*** stays"),
    ],
)
def test_scrub_removes_a_value_in_every_form_a_target_may_echo(
    text: str, values: list[str], scrubbed: str
) -> None:
    assert scrub(text, values) == scrubbed


def test_one_list_of_credential_header_names() -> None:
    """Masked when shown, and dropped when a redirect leaves the origin (http.py)."""
    for name in (
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Api-Key",
        "Private-Token",
        "X-Auth-Token",
        "x-api-key",
        "Api_Key",
        "X-Session-Id",
    ):
        assert sensitive(name), name
    for name in ("Idempotency-Key", "X-Team", "Content-Type", "X-Cronstream-Run-Id"):
        assert not sensitive(name), name


def _spec(**target: object) -> dict[str, object]:
    return {"id": "hook", "every": "1m", "target": "http", **target}


def test_put_refuses_credentials_in_the_url_and_names_no_password() -> None:
    with pytest.raises(SpecError) as caught:
        job_from_spec(_spec(url="https://bob:hunter2@example.com/x"), max_payload_bytes=65536)
    assert "secret:NAME" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_put_warns_about_literal_credentials_in_headers() -> None:
    job = job_from_spec(
        _spec(
            url="https://example.com/x",
            headers={"Authorization": "Bearer abc", "X-Token": "secret:t", "X-Team": "b"},
        ),
        max_payload_bytes=65536,
    )
    warnings = literal_secrets(job)
    assert len(warnings) == 1
    assert "Authorization" in warnings[0]
    assert "abc" not in json.dumps(warnings)
