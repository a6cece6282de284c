"""An admission and the HTTP API on threads of an integration test (fixtures:
``conftest.py``)."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn

from cronstream.api.app import build_app
from cronstream.api.backend import Backend
from cronstream.producers.admission.core import Quotas
from cronstream.producers.admission.processor import AdmissionConfig, AdmissionProcessor
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import TokenBook, book_path, token_path
from tests.integration.helpers import free_port


class AdmissionThread:
    """An admission processor on a thread of the test."""

    def __init__(self, settings: Settings, quotas: Quotas, grants: tuple[str, ...] = ()) -> None:
        config = AdmissionConfig(
            group=f"{settings.topic_prefix}.admission",
            name="adm-test",
            quotas=quotas,
            grants=grants,
        )
        self.processor = AdmissionProcessor(settings.as_role("admission"), config)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.processor.run, args=(self.stopping.is_set,))
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


class Api:
    def __init__(self, settings: Settings) -> None:
        self.backend = Backend(settings.as_role("api"), answer_timeout=30)
        self.backend.start()
        port = free_port()
        app = build_app(self.backend, TokenBook(book_path(settings)))
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"

    def client(self, settings: Settings, holder: str) -> httpx.Client:
        token = token_path(settings, holder).read_text().strip()
        return httpx.Client(
            base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        )

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.backend.close()
