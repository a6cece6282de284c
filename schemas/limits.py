"""The documented limits of a job definition and of a run request.

Definitions come from any Kafka client, not only ``jobs put``, so every limit is
checked where a record is used, not only where cronstream writes it:

- ``jobs put``, ``JobClient``, the API and the admission refuse a definition over a
  limit (``schemas.definition.problems``);
- the scheduler refuses one when it loads it (``schemas.definition.loading_problems``:
  its timing fields and the size of the record): dead-lettered with the reason, the
  job not loaded;
- the worker refuses a run request over a limit (``run_problems``): a FAILED outcome
  with the reason, not retried, and a DLQ record.

The numbers are in the README (Limits). They bound what one record can cost: memory
(lengths), time (cron text, catch-up runs per outage), and instants a datetime can
hold (durations).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import fields, is_dataclass
from functools import lru_cache

from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import RetryPolicy, RunOutcome, RunRequest, Target
from cronstream.schemas.output import RunOutput

DAY_MS = 86_400_000
MAX_JOB_ID = 200
MAX_IDEMPOTENCY_KEY = 200  # of a manual run (its run id is JOB@manual:KEY)
MAX_RUN_ID = 512
MAX_ERROR = 16 * 1024  # characters of an outcome's error text
MAX_WORKER = 256  # characters of an outcome's worker name
# The ceiling of a worker's --output-limit (bytes of an attempt's output kept): a record
# well under Kafka's default 1 MB message size and a Cassandra cell that stays cheap.
MAX_OUTPUT_BYTES = 512 * 1024
MAX_TENANT = 64
MAX_CRON = 256  # characters of a cron expression
MAX_DURATION_TEXT = 1024  # characters of a duration's text ("1h30m")
MAX_DEFINITION_BYTES = 256 * 1024  # a whole encoded definition
MAX_PAYLOAD_BYTES = 1024 * 1024  # the ceiling of the max payload setting
MAX_HEADERS = 32
MAX_HEADER_NAME = 128
MAX_HEADER_VALUE = 4096
MAX_URL = 2048
MAX_TOPIC = 249  # Kafka's own limit
MAX_CALLABLE = 256
MAX_COMMAND = 4096
MAX_ATTEMPTS = 100
MAX_BACKOFF_MS = 30 * DAY_MS
MAX_TIMEOUT_MS = 7 * DAY_MS
MAX_DEADLINE_MS = 7 * DAY_MS  # its check waits as a timer: the timers topic keeps 7 days
MAX_JITTER_MS = DAY_MS
MAX_CATCHUP = 1000
MAX_CATCHUP_WINDOW_MS = 30 * DAY_MS
MAX_INTERVAL_MS = 100 * 366 * DAY_MS
# An event trigger: its filter's text and nesting (the parser recurses per
# level: 32 keeps it far from Python's recursion limit), a path's steps, the jobs a
# dependent job comes after, its payload fields, a batch's records.
MAX_FILTER = 2000
MAX_FILTER_DEPTH = 32
MAX_PATH_STEPS = 32
MAX_AFTER = 32
MAX_PAYLOAD_FIELDS = 64
MAX_BATCH = 10_000

# Letters, digits and . _ : / -, starting with a letter or digit; \Z, not $: "$" would
# let a trailing newline through.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*\Z")


def name_problems(what: str, value: str, limit: int) -> list[str]:
    """A job id or tenant: 1-``limit`` characters of ``NAME``."""
    if not value:
        return [f"a {what} is required"]
    if len(value) > limit or not NAME.match(value):
        return [
            f"{what} {value[:80]!r} must be 1-{limit} characters of letters, digits "
            "and . _ : / -, starting with a letter or digit"
        ]
    return []


def cron_problems(cron: str | None) -> list[str]:
    """The limit on a cron expression's text: checked by ``parse_cron`` before it reads
    or remembers one, so every caller has it (a 600 KB expression kept 2.6 MB in the
    parse cache of the API or the admission that refused it, for good)."""
    if cron is not None and len(cron) > MAX_CRON:
        return [f"cron expression of {len(cron)} characters, over {MAX_CRON}"]
    return []


def timing_problems(
    *,
    every_ms: int,
    jitter_ms: int,
    max_catchup: int,
    catchup_window_ms: int,
) -> list[str]:
    """The limits on the timing fields the scheduler reads of a definition (with the
    job id's, ``name_problems``, and the cron text's, ``cron_problems``)."""
    problems = []
    if every_ms > MAX_INTERVAL_MS:
        problems.append(f"interval {every_ms} ms is over 100 years")
    problems += _range("jitter", jitter_ms, 0, MAX_JITTER_MS, "0 to 1 day")
    problems += _range("catchup", max_catchup, 1, MAX_CATCHUP, f"1 to {MAX_CATCHUP}")
    problems += _range(
        "catchup window", catchup_window_ms, 1, MAX_CATCHUP_WINDOW_MS, "positive, at most 30 days"
    )
    return problems


def retry_problems(retry: RetryPolicy, timeout_ms: int) -> list[str]:
    return [
        *_range("max attempts", retry.max_attempts, 1, MAX_ATTEMPTS, f"1 to {MAX_ATTEMPTS}"),
        *_range(
            "backoff minimum",
            retry.initial_backoff_ms,
            1,
            MAX_BACKOFF_MS,
            "positive, at most 30 days",
        ),
        *_range(
            "backoff maximum",
            retry.max_backoff_ms,
            retry.initial_backoff_ms,
            MAX_BACKOFF_MS,
            "at least the minimum, at most 30 days",
        ),
        *_range("timeout", timeout_ms, 1, MAX_TIMEOUT_MS, "positive, at most 7 days"),
    ]


def deadline_problems(deadline_ms: int | None) -> list[str]:
    if deadline_ms is None:
        return []
    return _range("deadline", deadline_ms, 1, MAX_DEADLINE_MS, "positive, at most 7 days")


def target_limit_problems(target: Target) -> list[str]:
    problems = []
    for what, value, limit in (
        ("url", target.url, MAX_URL),
        ("topic", target.topic, MAX_TOPIC),
        ("callable", target.callable, MAX_CALLABLE),
        ("command", target.command, MAX_COMMAND),
    ):
        if value is not None and len(value) > limit:
            problems.append(f"{what} of {len(value)} characters, over {limit}")
    return problems + header_problems(target.headers)


# Headers that frame or route an HTTP/1.1 message: the worker writes them. A job's own
# value would let its body be read as a second request on a kept-alive connection
# (request smuggling) or send it elsewhere (consumers.executors.http_wire).
FRAMING_HEADERS = frozenset(
    [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
    ]
)


def header_problems(headers: Mapping[str, str]) -> list[str]:
    if len(headers) > MAX_HEADERS:
        return [f"{len(headers)} headers, over {MAX_HEADERS}"]
    for name, value in headers.items():
        if not name or len(name) > MAX_HEADER_NAME or any(c in name for c in ":\r\n\0"):
            return [
                f"header name {name[:40]!r} must be 1-{MAX_HEADER_NAME} characters, "
                "without ':' or line breaks"
            ]
        if len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\0"):
            return [
                f"header {name[:40]!r}: the value must be at most {MAX_HEADER_VALUE} "
                "characters, without line breaks"
            ]
        if name.lower() in FRAMING_HEADERS:
            return [
                f"header {name!r} is the worker's to set (it frames or routes the "
                "request), not a job's"
            ]
    return []


def unencodable(value: object, where: str = "") -> list[str]:
    """The fields of ``value`` (an event, a spec: dataclasses, mappings, sequences and
    text) whose text UTF-8 cannot encode, by field name. Only a lone surrogate makes such
    text: JSON's ``"\\udcff"``, YAML's, a command line's undecodable byte. Every string a
    topic holds is UTF-8 (Avro), so such text can be written nowhere: it is refused as
    bad input before anything is encoded, never a crash of the encoder."""
    return [
        f"{path or 'text'} holds a lone surrogate (U+{ord(text[at]):04X} at character "
        f"{at}), which is not Unicode text: refused"
        for path, text, at in _surrogates(value, where)
    ]


def require_encodable(subject: str, value: object) -> None:
    """Raise SpecError (``subject``, one problem per field) when ``value`` holds text no
    topic can carry (``unencodable``): what a sender checks before it writes a command."""
    problems = unencodable(value)
    if problems:
        raise SpecError(subject, problems)


def carried(text: str) -> str:
    """``text`` as an answer can carry it: a lone surrogate written out as ``\\udcff``
    (for answers that quote what a caller sent)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _surrogates(value: object, path: str) -> Iterator[tuple[str, str, int]]:
    if isinstance(value, str):
        if not value.isascii():
            at = next((i for i, c in enumerate(value) if "\ud800" <= c <= "\udfff"), None)
            if at is not None:
                yield path, value, at
    elif is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            yield from _surrogates(getattr(value, field.name), _dotted(path, field.name))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            named = _dotted(path, key if isinstance(key, str) and key.isascii() else repr(key))
            yield from _surrogates(key, f"the name of {named}")
            yield from _surrogates(item, named)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _surrogates(item, f"{path}[{i}]")


def _dotted(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def refusal(problems: list[str]) -> str:
    """The one message for a record over the limits, wherever it is refused."""
    return "over the limits: " + "; ".join(problems)


def run_problems(run: RunRequest) -> list[str]:
    """The limits on a run request (the worker's check): ``head_problems`` for what
    differs per run, ``tail_problems`` for what is the same for every run of one
    definition (checked once per definition on the hot path)."""
    return head_problems(run.run_id, run.job_id, run.tenant, run.attempt) + tail_problems(run)


def head_problems(run_id: str, job_id: str, tenant: str, attempt: int) -> list[str]:
    """What differs per run request: its run id (its job's, then '@', at most
    MAX_RUN_ID printable characters), job id, tenant and attempt."""
    if (
        1 <= attempt <= MAX_ATTEMPTS
        and len(run_id) <= MAX_RUN_ID
        and run_id.startswith(job_id)
        and run_id[len(job_id) : len(job_id) + 1] == "@"
        and run_id.isprintable()
        and len(job_id) <= MAX_JOB_ID
        and len(tenant) <= MAX_TENANT
        and _good_names(job_id, tenant)
    ):
        return []  # the common case, cheaply
    return [
        *run_id_problems(run_id, job_id),
        *name_problems("job id", job_id, MAX_JOB_ID),
        *name_problems("tenant", tenant, MAX_TENANT),
        *_range("attempt", attempt, 1, MAX_ATTEMPTS, f"1 to {MAX_ATTEMPTS}"),
    ]


# A worker sees the same jobs again and again, and two regular expressions per run cost
# more than the rest of the check: remembered per (job id, tenant), only for names within
# their lengths (checked first): at most 100,000 entries of ~530 bytes (a 200-character
# id, a 64-character tenant, the key tuple and the cache's link), ~53 MB at worst.
@lru_cache(maxsize=100_000)
def _good_names(job_id: str, tenant: str) -> bool:
    return bool(NAME.match(job_id) and NAME.match(tenant))


def run_id_problems(run_id: str, job_id: str) -> list[str]:
    if len(run_id) > MAX_RUN_ID or not run_id.isprintable():
        return [f"run id {run_id[:80]!r} must be at most {MAX_RUN_ID} printable characters"]
    if not run_id.startswith(job_id + "@"):
        return [f"run id {run_id[:80]!r} is not its job's id followed by '@'"]
    return []


def outcome_problems(outcome: RunOutcome) -> list[str]:
    """The limits on a run outcome (the history sink's check: a row Cassandra would
    refuse, e.g. a key over 64 KiB, must not stop the sink)."""
    problems = head_problems(outcome.run_id, outcome.job_id, outcome.tenant, outcome.attempt)
    if outcome.error is not None and len(outcome.error) > MAX_ERROR:
        problems.append(f"error text of {len(outcome.error)} characters, over {MAX_ERROR}")
    for what, value in (("worker", outcome.worker), ("target type", outcome.target_type)):
        if value is not None and len(value) > MAX_WORKER:
            problems.append(f"{what} of {len(value)} characters, over {MAX_WORKER}")
    return problems


def output_problems(output: RunOutput) -> list[str]:
    """The limits on a run's output record (the sink's check, as ``outcome_problems``)."""
    problems = head_problems(output.run_id, output.job_id, output.tenant, output.attempt)
    if len(output.output) > MAX_OUTPUT_BYTES:
        problems.append(f"output of {len(output.output)} characters, over {MAX_OUTPUT_BYTES}")
    for what, value in (
        ("worker", output.worker),
        ("target type", output.target_type),
        ("status", output.status),
    ):
        if value is not None and len(value) > MAX_WORKER:
            problems.append(f"{what} of {len(value)} characters, over {MAX_WORKER}")
    return problems


def idempotency_key_problems(key: str) -> list[str]:
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        return [
            f"idempotency key {key[:80]!r} must be 1-{MAX_IDEMPOTENCY_KEY} printable characters"
        ]
    return []


def tail_problems(run: RunRequest) -> list[str]:
    problems = [*retry_problems(run.retry, run.timeout_ms), *target_limit_problems(run.target)]
    if run.payload is not None and len(run.payload) > MAX_PAYLOAD_BYTES // 4:
        size = len(run.payload.encode())
        if size > MAX_PAYLOAD_BYTES:
            problems.append(f"payload of {size} bytes, over {MAX_PAYLOAD_BYTES}")
    return problems


def _range(what: str, value: int, low: int, high: int, rule: str) -> list[str]:
    return [] if low <= value <= high else [f"{what} {value} is out of range ({rule})"]
