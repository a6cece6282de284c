"""The local stack's S3-compatible object store: S3Proxy with its filesystem backend.

History's cold tier is an Iceberg table whose data and metadata files live in a bucket
(``consumers.lakehouse``); in production that is S3 or any S3-compatible store, here it
is S3Proxy (Apache-2.0, one Java process: ``org.gaul:s3proxy``'s jar with its
dependencies from Maven Central, the stack's JDK 17), storing objects as files under the
stack's data folder. Why S3Proxy rather than SeaweedFS: it comes from Maven Central like
the stack's other JVM services (one download, no Go toolchain or half-hour build in CI),
speaks S3's signature v4 with path-style addressing (what pyarrow's S3 filesystem and
pyiceberg send), and is one process with no master/volume/filer roles to start.

One identity (``archive``), its secret made at first use in the stack's credentials
(``s3-archive.secret``); the bucket is made by the bootstrap (``ensure_bucket``).
Configuration (environment): ``o.S3_PORT`` (9311), ``o.S3_HEAP_MB`` (256);
docs/configuration.md.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from pyarrow.fs import FileType

from cronstream.infra.connect import ensure_database
from cronstream.infra.security import ensure_secret_file, write_private
from cronstream.infra.service import INFRA_DIR, JVM_COMMON, Service
from cronstream.runtime.lakehouse import CATALOG_DB, S3_IDENTITY, lakehouse, s3_secret_path
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

ARTIFACT = INFRA_DIR / "s3proxy" / "artifact"  # one coordinate: the jar with dependencies


def s3_port() -> int:
    return int(o.S3_PORT.get())


class ObjectStore(Service):
    name = "s3proxy"
    start_timeout = 60.0

    @property
    def port(self) -> int:
        return s3_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fetch(self) -> None:
        self._resolve(ARTIFACT, self.lib)

    @property
    def properties(self) -> Path:
        return self.conf / "s3proxy.properties"

    def prepare(self) -> None:
        secret = ensure_secret_file(self.settings, s3_secret_path(self.settings))
        objects = self.data / "objects"
        objects.mkdir(parents=True, exist_ok=True)
        lines = [
            f"s3proxy.endpoint={self.endpoint}",
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={S3_IDENTITY}",
            f"s3proxy.credential={secret}",
            "jclouds.provider=filesystem",
            f"jclouds.filesystem.basedir={objects}",
        ]
        write_private(self.properties, ("\n".join(lines) + "\n").encode())

    def command(self) -> list[str]:
        heap = o.S3_HEAP_MB.get()
        return [
            "java",
            self.marker,
            f"-Xms{heap}m",
            f"-Xmx{heap}m",
            *JVM_COMMON,
            "-cp",
            f"{self.lib}/*",
            "org.gaul.s3proxy.Main",
            "--properties",
            str(self.properties),
        ]

    def ready(self) -> bool:
        """S3Proxy answers an anonymous request with 403 (every call is signed)."""
        try:
            return httpx.get(self.endpoint, timeout=2.0).status_code in (200, 403)
        except httpx.HTTPError:
            return False


def object_services(settings: Settings) -> list[Service]:
    return [ObjectStore(settings)]


def ensure_lakehouse(settings: Settings) -> None:
    """The archive's bucket in the object store and its catalog's database in the
    stack's PostgreSQL (``runtime.lakehouse``): what the archive table needs."""
    where = lakehouse(settings)
    if where.bucket is not None and where.s3 is not None:
        fs = where.s3.filesystem(create_buckets=True)
        if fs.get_file_info(where.bucket).type == FileType.NotFound:
            fs.create_dir(where.bucket)
    if where.catalog_uri.startswith("postgresql+pg8000://") and where.catalog_uri.endswith(
        f"/{CATALOG_DB}"
    ):  # the stack's own PostgreSQL
        ensure_database(settings, CATALOG_DB)
