"""A small client for the Confluent-compatible schema registry REST API.

Apicurio Registry serves it at ``/apis/ccompat/v7``; Confluent Schema Registry and other
compatible registries serve it at their root. Only what cronstream needs: register,
look up, fetch by id, list subjects, and per-subject compatibility. Transport failures
become RegistryUnavailable; answers the registry gives (401, 403, 404, 409, 422) become
RegistryError carrying the HTTP status and the registry's error code.

With ``auth`` (user, password) every request carries HTTP basic credentials; the
password is never part of an error's text. ``verify`` is the CA file to trust for an
https URL (True: the system's).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from cronstream.schemas.errors import RegistryError, RegistryUnavailable

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        auth: tuple[str, str] | None = None,
        verify: str | bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.user = auth[0] if auth else None
        self._http = httpx.Client(
            timeout=timeout,
            headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
            auth=httpx.BasicAuth(*auth) if auth else None,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            resp = self._http.request(method, self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise RegistryUnavailable(f"schema registry at {self.url} unreachable: {exc}") from exc
        if resp.status_code >= 500:
            raise RegistryUnavailable(
                f"schema registry {method} {path} failed: {resp.status_code} {resp.text[:300]}"
            )
        if resp.status_code in (401, 403):
            who = f"user {self.user!r}" if self.user else "an anonymous client"
            why = (
                "did not accept the credentials of"
                if resp.status_code == 401
                else "does not allow this to"
            )
            raise RegistryError(
                f"schema registry {method} {path}: {resp.status_code}: the registry {why} {who}",
                status=resp.status_code,
                code=None,
            )
        if resp.status_code >= 400:
            try:
                err = resp.json()
                code, message = err.get("error_code"), err.get("message", resp.text)
            except ValueError:
                code, message = None, resp.text
            raise RegistryError(
                f"schema registry {method} {path}: {resp.status_code} {message}",
                status=resp.status_code,
                code=code,
            )
        return resp.json()

    @staticmethod
    def _subject(subject: str) -> str:
        return quote(subject, safe="")

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` (Avro JSON) under ``subject``; the same schema keeps its id."""
        body = {"schema": schema, "schemaType": "AVRO"}
        return int(self._call("POST", f"/subjects/{self._subject(subject)}/versions", body)["id"])

    def lookup(self, subject: str, schema: str) -> int | None:
        """The id of ``schema`` under ``subject``, or None when it is not registered there."""
        body = {"schema": schema, "schemaType": "AVRO"}
        try:
            return int(self._call("POST", f"/subjects/{self._subject(subject)}", body)["id"])
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise

    def schema_by_id(self, schema_id: int) -> tuple[str, str]:
        """(schema JSON, schema type) of a registered id; RegistryError(404) if unknown."""
        data = self._call("GET", f"/schemas/ids/{schema_id}")
        return data["schema"], data.get("schemaType") or "AVRO"

    def subjects(self) -> list[str]:
        return list(self._call("GET", "/subjects"))

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call("PUT", f"/config/{self._subject(subject)}", {"compatibility": level})

    def compatible(self, subject: str, schema: str) -> bool:
        """Whether ``schema`` could be registered as the subject's next version."""
        body = {"schema": schema, "schemaType": "AVRO"}
        path = f"/compatibility/subjects/{self._subject(subject)}/versions/latest"
        try:
            return bool(self._call("POST", path, body)["is_compatible"])
        except RegistryError as exc:
            if exc.status == 404:
                return True
            raise
