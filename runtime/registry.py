"""How cronstream's processes log in to the schema registry.

Reading (looking up and fetching schemas) is what every process does; in the local
stack anyone on the loopback may read, since the schemas are the published contract
tenants encode against (``infra.services.Registry``). A deployment whose registry wants
a login for reads too sets ``o.REGISTRY_USER`` and its password (``o.REGISTRY_PASSWORD``
or ``o.REGISTRY_PASSWORD_FILE``). Registering schemas and changing compatibility is the
bootstrap's alone: ``settings.registry_writer`` with the password the stack keeps for it
(``credentials/registry-<user>.secret``) or ``o.REGISTRY_WRITER_PASSWORD`` (or
``o.REGISTRY_WRITER_PASSWORD_FILE``).
"""

from __future__ import annotations

import os
from pathlib import Path

from cronstream.runtime.credentials import credentials_dir, read_password
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings
from cronstream.schemas.registry import RegistryClient


def registry_secret_path(settings: Settings, user: str) -> Path:
    return credentials_dir(settings) / f"registry-{user}.secret"


def registry_login(settings: Settings, *, writer: bool = False) -> tuple[str, str] | None:
    """(user, password) for reading, or for registering with ``writer``; None: anonymous."""
    user = settings.registry_writer if writer else settings.registry_user
    if user is None:
        return None
    password, password_file = (
        (o.REGISTRY_WRITER_PASSWORD, o.REGISTRY_WRITER_PASSWORD_FILE)
        if writer
        else (o.REGISTRY_PASSWORD, o.REGISTRY_PASSWORD_FILE)
    )
    stored = registry_secret_path(settings, user)
    return user, read_password("schema registry", user, stored, os.environ, password, password_file)


def registry_client(settings: Settings, *, writer: bool = False) -> RegistryClient:
    """A client of ``settings``' registry: reading, or registering with ``writer``."""
    # A plain http registry (the local stack's) has no certificate to check, and loading
    # the CA bundle for it anyway was 40-60 ms of every CLI command's start.
    plain = settings.registry_url.startswith("http://")
    verify: str | bool = str(settings.registry_ca) if settings.registry_ca else not plain
    return RegistryClient(
        settings.registry_url, auth=registry_login(settings, writer=writer), verify=verify
    )
