"""The OpenAPI document describes the bodies the API really reads (the fuzzer,
``tests/api_fuzz.py``, generates its calls from it)."""

from __future__ import annotations

from cronstream.api.document import JOB_SPEC, SPEC_PROPERTIES
from cronstream.schemas.definition.spec import KNOWN_KEYS


def test_the_documented_job_spec_has_exactly_the_keys_a_spec_may_have() -> None:
    assert set(SPEC_PROPERTIES) == set(KNOWN_KEYS)
    assert JOB_SPEC["additionalProperties"] is False  # an unknown key is refused (422)
