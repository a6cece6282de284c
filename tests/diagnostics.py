"""What a failing test adds to its report. When Kafka refused cronstream's user
(``KafkaAuthError``): where the stored password is (its age and a short digest, never
the password), the users and mechanisms the broker holds, and the broker log's SCRAM
lines. CI once saw the broker refuse ``cronstream-app`` after a restart and could not
be reproduced; this is the evidence the next occurrence leaves. When the test ran
cronstream processes (the ``procs`` fixture): the end of each one's log, which CI's
report would otherwise lose with its temporary directory."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cronstream.runtime.settings import Settings

if TYPE_CHECKING:
    from tests.integration.helpers import CronstreamProcess

# How much of each process's log a failing test's report carries.
LOG_TAIL_CHARS = 6000


def caused_by_kafka_auth(exc: BaseException | None) -> bool:
    from cronstream.runtime.errors import KafkaAuthError

    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, KafkaAuthError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def kafka_credentials_report(settings: Settings) -> str:
    from cronstream.infra.services import Kafka
    from cronstream.runtime.kafka.clients import kafka_admin
    from cronstream.runtime.kafka.security import kafka_secret_path

    lines = []
    stored = kafka_secret_path(settings, settings.kafka_user)
    if stored.exists():
        digest = hashlib.sha256(stored.read_bytes().strip()).hexdigest()[:12]
        age = time.time() - stored.stat().st_mtime
        lines.append(f"stored password {stored}: sha256 {digest}..., written {age:.0f} s ago")
    else:
        lines.append(f"stored password {stored}: missing")
    try:
        admin = kafka_admin(settings, superuser=True)  # must outlive its futures
        described = admin.describe_user_scram_credentials()
        for user, info in sorted(described.result(30).items()):  # type: ignore[union-attr]
            mechanisms = [(str(c.mechanism), c.iterations) for c in info.scram_credential_infos]
            lines.append(f"broker holds {user}: {mechanisms}")
    except Exception as exc:  # a report, whatever the broker says
        lines.append(f"describing SCRAM users failed: {exc}")
    log = Kafka(settings).log
    if log.exists():
        scram = [
            ln
            for ln in log.read_text(errors="replace").splitlines()
            if "ScramCredentialRecord" in ln or "starting kafka" in ln
        ]
        lines += ["kafka.log, SCRAM records and starts (last 30):", *scram[-30:]]
    return "\n".join(lines)


def process_log_tails(procs: Sequence[CronstreamProcess]) -> list[tuple[str, str]]:
    """One report section per process: the last LOG_TAIL_CHARS of its log."""
    sections = []
    for proc in procs:
        try:
            text = proc.log_path.read_text(errors="replace")
        except OSError as exc:
            text = f"(log unreadable: {exc})"
        state = proc.proc.poll()
        title = f"log of {proc.name} ({'running' if state is None else f'exited {state}'})"
        sections.append((title, text[-LOG_TAIL_CHARS:]))
    return sections
