"""An admission on a thread of an integration test (fixtures: ``conftest.py``)."""

from __future__ import annotations

import threading

from producers.admission.core import Quotas
from producers.admission.processor import AdmissionConfig, AdmissionProcessor
from runtime.settings import Settings


class AdmissionThread:
    """An admission processor on a thread of the test."""

    def __init__(self, settings: Settings, quotas: Quotas) -> None:
        config = AdmissionConfig(group=f"{settings.topic_prefix}.admission", name="adm-test",
                                 quotas=quotas)  # fmt: skip
        self.processor = AdmissionProcessor(settings.as_role("admission"), config)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.processor.run, args=(self.stopping.is_set,))
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)
