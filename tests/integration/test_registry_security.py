"""The schema registry's doors: anyone on the loopback may read and look up
schemas; registering and changing compatibility take the bootstrap's login, and a
refusal is a clear error that names the user, never the password, with nothing
written."""

from __future__ import annotations

import json
import stat
import uuid
from dataclasses import replace

import httpx
import pytest

from cronstream.infra.services import Registry
from cronstream.runtime.registry import registry_client, registry_secret_path
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import RegistryError
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.registry import RegistryClient
from cronstream.schemas.serde import schema_json

pytestmark = pytest.mark.integration

SCHEMA = json.dumps({"type": "record", "name": "Probe", "fields": [{"name": "a", "type": "int"}]})


def _subject() -> str:
    return f"cstest.registry.{uuid.uuid4().hex[:10]}-value"


def test_an_anonymous_client_reads_but_cannot_register(ns: Settings) -> None:
    subject = f"{Topics(ns).jobs}-value"
    with registry_client(ns) as reader:  # the processes' client: anonymous here
        assert reader.user is None
        schema_id = reader.lookup(subject, schema_json(JobDefinition.AVRO_NAME))
        assert schema_id is not None
        assert reader.schema_by_id(schema_id)
        fresh = _subject()
        with pytest.raises(RegistryError) as caught:
            reader.register(fresh, SCHEMA)
        assert caught.value.status == 401
        assert "anonymous client" in str(caught.value)
        with pytest.raises(RegistryError) as refused:
            reader.set_compatibility(subject, "NONE")
        assert refused.value.status == 401
        assert fresh not in reader.subjects()
        # Deleting a subject, and Apicurio's own admin API (where a dynamic setting such
        # as anonymous reads could be switched), are writes too.
        with pytest.raises(RegistryError) as deleting:
            reader._call("DELETE", f"/subjects/{subject}")
        assert deleting.value.status == 401
    root = ns.registry_url.removesuffix("/apis/ccompat/v7")
    door = f"{root}/apis/registry/v3/admin/config/properties/apicurio.storage.read-only.enabled"
    flipped = httpx.put(door, json={"name": "apicurio.storage.read-only.enabled", "value": "true"})
    assert flipped.status_code == 401
    with registry_client(ns) as reader:
        assert subject in reader.subjects()


def test_a_wrong_password_is_refused_by_name_without_the_password(ns: Settings) -> None:
    secret = "not-the-password-" + uuid.uuid4().hex
    fresh = _subject()
    wrong = RegistryClient(ns.registry_url, auth=(ns.registry_writer, secret))
    with wrong, pytest.raises(RegistryError) as caught:
        wrong.register(fresh, SCHEMA)
    text = str(caught.value)
    assert caught.value.status == 401
    assert f"user {ns.registry_writer!r}" in text
    assert secret not in text
    with registry_client(ns, writer=True) as writer:
        assert fresh not in writer.subjects()


def test_only_the_writer_registers(ns: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _subject()
    with registry_client(ns, writer=True) as writer:
        schema_id = writer.register(fresh, SCHEMA)
        assert writer.lookup(fresh, SCHEMA) == schema_id
    # A reader login that the registry does not know is refused too: nobody but the
    # writer holds a login, and a login is checked even where reading needs none.
    monkeypatch.setenv("CRONSTREAM_REGISTRY_PASSWORD", "x")
    other = replace(ns, registry_user="someone")
    with registry_client(other) as stranger, pytest.raises(RegistryError) as caught:
        stranger.lookup(fresh, SCHEMA)
    assert caught.value.status == 401


def test_the_writers_password_is_a_private_file_and_never_in_argv(stack: Settings) -> None:
    secret_file = registry_secret_path(stack, stack.registry_writer)
    secret = secret_file.read_text().strip()
    registry = Registry(stack)
    config = registry.data / "config" / "application.properties"
    for path in (secret_file, config):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    pid = registry.pid()
    assert pid is not None
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        assert secret.encode() not in cmdline.read()
    assert secret not in registry.log.read_text(errors="replace")
