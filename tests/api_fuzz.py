"""The HTTP API fuzzed from its own OpenAPI document (schemathesis over hypothesis).

Every operation the document lists is called by each caller (a tenant's token, the
admin's, the admin's acting for a tenant) with examples that fit the document and
examples that do not (wrong types, missing fields, values out of their formats). What
is counted:

- server errors: any response >= 500 (the API promises none: bad input is a 4xx, an
  admission that does not answer a 503 the fuzzer never meets on a running stack);
- nonconforming: a response the document does not describe (its status code, its
  content type, its body's schema: the error bodies are documented too).

The examples are derandomized (the same ones at every run: a run cannot flake) and
never shrunk (a failure is recorded as found, not retried into a smaller one).

``fuzz`` runs against an API already serving; ``fuzz_stack`` starts two tenants, an
admission and the API (behind its front door) on threads of this process first, for
the benchmark: ``python -c 'from tests.api_fuzz import fuzz_stack; ...'``.
``fuzz_apart`` runs ``fuzz`` in a process of its own (``python -m tests.api_fuzz``):
hypothesis takes any change of the global ``random`` while it generates an example for
a strategy using it, and an API serving on threads of the same process changes it
(cassandra-driver's control connection draws a delay from it at each schema or topology
event, and the tests running beside it create and drop keyspaces): the test failed so,
now and then, with "Do not use the random module inside strategies" (a warning pytest
makes an error)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import ADMIN, token_path

# Which responses must be as the document says (besides not_a_server_error, counted
# apart): the status codes, the content types and the bodies it describes.
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: a name for the report, a bearer token, query parameters added to
    every call (``{"tenant": T}``: an admin acting for T)."""

    name: str
    token: str
    params: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class FuzzReport:
    operations: int = 0
    examples: int = 0
    server_errors: list[str] = field(default_factory=list)
    nonconforming: list[str] = field(default_factory=list)
    unsent: int = 0  # examples the HTTP client could not send (not the API's doing)

    def summary(self) -> str:
        kinds = Counter(line.rpartition(": ")[2] for line in self.nonconforming)
        return (
            f"{self.operations} operations, {self.examples} examples, "
            f"{len(self.server_errors)} server errors, "
            f"{len(self.nonconforming)} nonconforming, {self.unsent} unsendable; "
            f"{', '.join(f'{n} x {kind}' for kind, n in kinds.most_common(8))}"
        )


def fuzz(url: str, callers: Sequence[Caller], *, max_examples: int = 15) -> FuzzReport:
    """Fuzz the API at ``url`` with each of ``callers``: up to ``max_examples`` examples
    per operation, caller and mode (fitting the document, not fitting it)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=60)
    report = FuzzReport()
    session = requests.Session()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # a document schemathesis cannot read
        operation = result.ok()
        report.operations += 1
        for caller in callers:
            for mode in MODES:
                _run(operation, caller, mode, url, session, report, max_examples)
    return report


def fuzz_apart(url: str, callers: Sequence[Caller], *, max_examples: int = 15) -> FuzzReport:
    """``fuzz`` in a process of its own, whose global ``random`` no server thread
    changes (the module's docstring says why)."""
    asked = {"url": url, "max_examples": max_examples, "callers": [asdict(c) for c in callers]}
    done = subprocess.run(
        [sys.executable, "-m", "tests.api_fuzz"],
        input=json.dumps(asked),
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the fuzzer exited with {done.returncode}: {done.stderr[-3000:]}")
    return FuzzReport(**json.loads(done.stdout.splitlines()[-1]))


def _run(
    operation: Any,
    caller: Caller,
    mode: GenerationMode,
    url: str,
    session: requests.Session,
    report: FuzzReport,
    max_examples: int,
) -> None:
    auth = {"Authorization": f"Bearer {caller.token}"}

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(operation.as_strategy(generation_mode=mode))
    def one(case: Any) -> None:
        try:
            response = case.call(
                base_url=url, session=session, headers=auth, params=dict(caller.params), timeout=90
            )
        except (requests.exceptions.InvalidHeader, UnicodeError, ValueError):
            report.unsent += 1
            return
        report.examples += 1
        what = f"{caller.name} {mode.value} {case.method} {response.request.path_url}"
        if response.status_code >= 500:
            report.server_errors.append(f"{what}: {response.status_code} {response.text[:300]}")
            return
        try:
            case.validate_response(response, checks=CONFORMANCE, headers=auth)
        except FailureGroup as group:  # what did not conform, one line per check
            for failure in group.exceptions:
                report.nonconforming.append(f"{what}: {response.status_code} {failure.title}")

    with suppress(Unsatisfiable):  # nothing to make wrong (no parameters, no body)
        one()


@contextmanager
def fuzz_stack(settings: Settings) -> Iterator[tuple[str, list[Caller]]]:
    """Two fresh tenants of ``settings`` (its topic prefix: a namespace of its own), an
    admission and the API behind its front door on threads of this process: the API's
    URL and its callers (tenant a, the admin, the admin acting for a). Everything is
    stopped and the tenants removed afterwards."""
    from cronstream.infra.tenants import add_tenant, remove_tenant
    from cronstream.producers.admission.core import Quotas
    from tests.integration.tenants import AdmissionThread, Api

    names = (f"fa{uuid.uuid4().hex[:8]}", f"fb{uuid.uuid4().hex[:8]}")
    for name in names:
        add_tenant(settings, name)
    admission = AdmissionThread(settings, Quotas(max_jobs=3, triggers_per_minute=2))
    api = Api(settings)
    try:
        yield api.url, callers(settings, names[0])
    finally:
        api.stop()
        admission.stop()
        for name in names:
            remove_tenant(settings, name)


def callers(settings: Settings, tenant: str) -> list[Caller]:
    def token(holder: str) -> str:
        return token_path(settings, holder).read_text().strip()

    return [
        Caller(tenant, token(tenant)),
        Caller(ADMIN, token(ADMIN)),
        Caller(f"{ADMIN} for {tenant}", token(ADMIN), (("tenant", tenant),)),
    ]


if __name__ == "__main__":  # ``fuzz_apart``'s process: what to fuzz on stdin, a report out
    _asked = json.loads(sys.stdin.read())
    _callers = [
        Caller(c["name"], c["token"], tuple((k, v) for k, v in c["params"]))
        for c in _asked["callers"]
    ]
    _report = fuzz(_asked["url"], _callers, max_examples=_asked["max_examples"])
    print(json.dumps(asdict(_report)))
