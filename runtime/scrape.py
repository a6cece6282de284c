"""Where Prometheus finds cronstream's processes: file-based service discovery.

Whoever starts processes with a ``--metrics-port`` (``make run``, a test) writes one
JSON file of targets into ``targets_dir``; the stack's Prometheus (``infra.ops``) reads
every ``*.json`` there and notices changes within seconds. Each target carries the
labels ``role`` (scheduler, worker, sink, admission, api, flows-coordinator, ...) and
``process``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from cronstream.runtime.settings import Settings


def targets_dir(settings: Settings) -> Path:
    return settings.home / "run" / "prometheus-targets"


def write_targets(
    directory: Path, name: str, processes: Mapping[str, tuple[str, int]], **labels: str
) -> Path:
    """Write ``<directory>/<name>.json``: ``processes`` maps a process name to its role
    and metrics port on 127.0.0.1. Replaced atomically (Prometheus may read it any
    time)."""
    directory.mkdir(parents=True, exist_ok=True)
    groups = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"role": role, "process": process, **labels}}
        for process, (role, port) in sorted(processes.items())
    ]
    path = directory / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=2) + "\n")
    os.replace(tmp, path)
    return path
