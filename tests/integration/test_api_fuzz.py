"""The HTTP API fuzzed from its OpenAPI document against the real stack (``tests.api_fuzz``):
every operation, with a tenant's token, the admin's and the admin's acting for the
tenant, examples that fit the document and examples that do not: no server error, and
every response as the document describes it."""

from __future__ import annotations

import pytest

from cronstream.runtime.settings import Settings
from tests.api_fuzz import callers, fuzz_apart
from tests.integration.tenants import Api

pytestmark = pytest.mark.integration

# Examples per operation, caller and mode: 15 x 3 callers x 2 modes over the document's
# operations is about 1,200 requests, ~2 minutes on the 2-core test box.
EXAMPLES = 15


@pytest.mark.timeout(900)
def test_no_server_error_over_every_operation(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    report = fuzz_apart(api.url, callers(history_ns, two[0]), max_examples=EXAMPLES)
    print(report.summary())
    assert report.operations >= 14
    assert report.examples >= report.operations * 3 * 2 * 3  # every caller reached each one
    assert report.server_errors == [], "\n".join(report.server_errors[:20])
    assert report.nonconforming == [], "\n".join(report.nonconforming[:20])
