"""Where history's cold tier lives: an Apache Iceberg table, its catalog and its files.

The table (``consumers.lakehouse``) is found through a SQL catalog (pyiceberg's
``SqlCatalog``: two tables in a relational database, which any Iceberg engine with a
JDBC catalog reads too) and keeps its data and metadata files under a warehouse URI:

- **the local stack** (the default): the catalog in the stack's PostgreSQL (database
  ``lakehouse``, the ``cronstream`` login), the files in the stack's S3-compatible object
  store (``infra.objects``: bucket ``cronstream-archive``, identity ``archive``);
- **a single machine without object storage**: ``o.ARCHIVE_WAREHOUSE`` ``file:///dir``
  and ``o.ARCHIVE_CATALOG`` ``sqlite:////dir/catalog.db`` (``local_environment``);
- **production**: ``o.ARCHIVE_CATALOG``, the SQLAlchemy URI of a PostgreSQL
  (``postgresql+pg8000://user@host:5432/db``; its password in the file
  ``o.ARCHIVE_CATALOG_PASSWORD_FILE``), and an ``s3://bucket/path`` warehouse with
  ``o.S3_ENDPOINT`` (unset: the local stack's; empty: AWS itself), ``o.S3_ACCESS_KEY``,
  ``o.S3_SECRET_FILE`` and ``o.S3_REGION`` (docs/configuration.md).

Each namespace (topic prefix) has its own Iceberg namespace, so tests and tenants of a
shared stack never see each other's tables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from pyarrow.fs import S3FileSystem

from cronstream.runtime.credentials import credentials_dir
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

BUCKET = "cronstream-archive"  # the local stack's bucket (made by the bootstrap)
S3_IDENTITY = "archive"  # the local stack's object store login
CATALOG_DB = "lakehouse"  # the local stack's PostgreSQL database of the catalog
CATALOG_USER = "cronstream"  # the local stack's PostgreSQL login (infra.connect)
TABLE = "history"


def s3_secret_path(settings: Settings) -> Path:
    """The local stack's secret key of ``S3_IDENTITY`` (made by ``infra.objects``)."""
    return credentials_dir(settings) / f"s3-{S3_IDENTITY}.secret"


def postgres_secret_path(settings: Settings) -> Path:
    """The password of the local stack's PostgreSQL login (made by ``infra.connect``)."""
    return credentials_dir(settings) / f"postgres-{CATALOG_USER}.secret"


def postgres_port(env: Mapping[str, str] | None = None) -> int:
    """The local stack's PostgreSQL port (``o.POSTGRES_PORT``, 5442)."""
    return int(o.POSTGRES_PORT.get(env))


@dataclass(frozen=True, slots=True, kw_only=True)
class S3:
    endpoint: str | None  # None: AWS's own
    access_key: str
    secret_key: str
    region: str

    def pyiceberg(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for this store (path-style: S3Proxy, MinIO)."""
        props = {
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
        }
        if self.endpoint:
            props |= {"s3.endpoint": self.endpoint, "s3.force-virtual-addressing": "false"}
        return props

    def filesystem(self, *, create_buckets: bool = False) -> S3FileSystem:
        """pyarrow's filesystem of this store (``create_buckets``: the bootstrap's, which
        makes the bucket)."""
        return S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint,
            allow_bucket_creation=create_buckets,
            scheme="http" if (self.endpoint or "").startswith("http://") else "https",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Lakehouse:
    catalog_uri: str  # a SQLAlchemy URI
    warehouse: str  # s3://bucket/path or file:///dir
    namespace: str  # the Iceberg namespace of this topic prefix
    s3: S3 | None  # set when the warehouse is s3://

    @property
    def table(self) -> str:
        return f"{self.namespace}.{TABLE}"

    def catalog_properties(self) -> dict[str, str]:
        """What pyiceberg's ``SqlCatalog`` is built with."""
        props = {"uri": self.catalog_uri, "warehouse": self.warehouse}
        return props | (self.s3.pyiceberg() if self.s3 is not None else {})

    @property
    def bucket(self) -> str | None:
        if not self.warehouse.startswith("s3://"):
            return None
        return self.warehouse.removeprefix("s3://").split("/", 1)[0]


def namespace_of(topic_prefix: str) -> str:
    """An Iceberg namespace name for ``topic_prefix`` (letters, digits and ``_``)."""
    return re.sub(r"[^a-z0-9_]", "_", topic_prefix.lower()) or "cronstream"


def lakehouse(settings: Settings, env: Mapping[str, str] | None = None) -> Lakehouse:
    """The archive table's catalog and storage, from the environment (module docstring)."""
    env = os.environ if env is None else env
    warehouse: str = o.ARCHIVE_WAREHOUSE.get(env) or f"s3://{BUCKET}/warehouse"
    catalog: str = o.ARCHIVE_CATALOG.get(env) or _stack_catalog(settings, env)
    password_file: Path | None = o.ARCHIVE_CATALOG_PASSWORD_FILE.get(env)
    if password_file:  # the URI names the login; its password is kept out of the config
        catalog = with_password(catalog, password_file.read_text().strip())
    s3 = _s3(settings, env) if warehouse.startswith("s3://") else None
    return Lakehouse(
        catalog_uri=catalog,
        warehouse=warehouse,
        s3=s3,
        namespace=namespace_of(settings.topic_prefix),
    )


def with_password(uri: str, password: str) -> str:
    """``uri`` (``scheme://user@host/db``) with ``password`` for its user."""
    parts = urlsplit(uri)
    if not parts.username:
        raise SettingsError(
            f"{o.ARCHIVE_CATALOG.env} names no user for the password "
            f"in {o.ARCHIVE_CATALOG_PASSWORD_FILE.env}: {uri}"
        )
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{parts.username}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def _stack_catalog(settings: Settings, env: Mapping[str, str]) -> str:
    port = postgres_port(env)
    password = quote(postgres_secret_path(settings).read_text().strip(), safe="")
    return f"postgresql+pg8000://{CATALOG_USER}:{password}@127.0.0.1:{port}/{CATALOG_DB}"


def _s3(settings: Settings, env: Mapping[str, str]) -> S3:
    endpoint = env.get(o.S3_ENDPOINT.env)  # set empty: AWS's own
    if endpoint is None:  # the local stack's
        endpoint = f"http://127.0.0.1:{o.S3_PORT.get(env)}"
    secret_file: Path = o.S3_SECRET_FILE.get(env) or s3_secret_path(settings)
    return S3(
        endpoint=endpoint or None,
        access_key=o.S3_ACCESS_KEY.get(env, S3_IDENTITY),
        secret_key=secret_file.read_text().strip(),
        region=o.S3_REGION.get(env),
    )


def local_environment(folder: Path) -> dict[str, str]:
    """The variables of a single machine's archive under ``folder`` (no object store,
    no PostgreSQL): its files in ``folder/warehouse``, its catalog in SQLite."""
    folder = folder.resolve()
    return {
        o.ARCHIVE_WAREHOUSE.env: f"file://{folder / 'warehouse'}",
        o.ARCHIVE_CATALOG.env: f"sqlite:///{folder / 'catalog.db'}",
    }
