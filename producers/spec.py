"""Jobs files: a YAML file of job (or flow) specs, read and checked by the definition
rules (``schemas.definition``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import JobDefinition


class _SpecLoader(yaml.SafeLoader):
    """YAML 1.1, PyYAML's, reads a bare ``on`` as true; as a mapping's key it is a
    job's ``on:`` (schemas.definition.triggers), as everywhere else it is written."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        for key, _ in node.value:
            if key.tag == "tag:yaml.org,2002:bool" and key.value in ("on", "On", "ON"):
                key.tag = "tag:yaml.org,2002:str"
        return super().construct_mapping(node, deep)


def yaml_entries(path: Path, kind: str) -> list[dict[str, Any]]:
    """The entries of a YAML file of ``kind`` ("jobs", "flows"): a list, or a mapping
    with a ``kind`` list; SpecError when it cannot be read or is neither."""
    try:
        doc = yaml.load(path.read_text(), Loader=_SpecLoader)  # a SafeLoader
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(str(path), [f"cannot read: {exc}"]) from None
    entries = doc.get(kind) if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SpecError(str(path), [f"expected a list of {kind} (or '{kind}:' with a list)"])
    return entries


def load_jobs_file(path: Path, *, max_payload_bytes: int) -> list[JobDefinition]:
    """Read a jobs YAML file (a list, or a mapping with a 'jobs' list) and validate all."""
    entries = yaml_entries(path, "jobs")
    jobs, problems = [], []
    for index, entry in enumerate(entries):
        try:
            jobs.append(job_from_spec(entry, max_payload_bytes=max_payload_bytes))
        except SpecError as exc:
            problems.append(f"entry {index + 1} ({exc.subject}): {'; '.join(exc.problems)}")
    if problems:
        raise SpecError(str(path), problems)
    return jobs
