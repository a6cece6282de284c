"""Job definitions, the domain: what a definition may say and how its text is read.

One home for every rule a definition keeps, in the lowest layer so that every user
imports it (the CLI and ``JobClient``, the API, the admission, the flows and the
scheduler):

- ``spec``: a spec (CLI flags, a jobs.yaml entry, the API's JSON) to a checked
  ``JobDefinition`` (``job_from_spec``), every problem at once in one ``SpecError``;
- ``rules``: ``problems(definition)``, the one check, however the definition was built;
  ``loading_problems``, its part the scheduler checks on a stored record;
- ``values``: durations, instants and backoff ranges from their text;
- ``triggers``: what makes a job run besides its schedule (``on:`` a topic's records,
  ``after:`` other jobs), read from a spec and checked, and the tenants' rule on them;
  ``filters``: their filter language, read and printed; ``matching``: what an
  expression says of one record (total: never raises);
- ``cron``: the cron dialect and its fire instants; ``zones``: the pinned zone database
  and the one wall-time rule (the scheduling core, ``streams.core``, computes slots
  with them); ``memo``: their bounded caches.

The numbers (lengths, ranges) are ``schemas.limits``; a target type's own rules are its
declaration's (``schemas.targets``). Pure: no client, no I/O (import-linter
``pure-target-declarations``).
"""

from __future__ import annotations

from cronstream.schemas.definition.rules import literal_secrets, loading_problems, problems
from cronstream.schemas.definition.spec import job_from_spec
from cronstream.schemas.definition.values import parse_backoff, parse_duration, parse_instant
from cronstream.schemas.errors import SpecError

__all__ = [
    "SpecError",
    "job_from_spec",
    "literal_secrets",
    "loading_problems",
    "parse_backoff",
    "parse_duration",
    "parse_instant",
    "problems",
]
