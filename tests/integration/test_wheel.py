"""What pip installs: the wheel built from this tree claims one top-level name,
``cronstream`` (its folders installed as ``cronstream.schemas``, ``cronstream.streams``,
...), and once installed into a clean virtualenv, away from the checkout, its CLI answers
``--help`` and puts and lists a job on the real stack, and its public API imports.

The virtualenv installs the wheel with its dependencies as a user's would (from pip's
cache or the package index): a dependency the wheel forgets to declare fails here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cronstream.runtime.settings import Settings
from tests.conftest import cli_env
from tests.layout import FOLDERS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _tree(into: Path) -> Path:
    """The checkout's files as git knows them (tracked and new, not ignored), symlinks
    kept: what a clone holds, with no build output or virtualenv of this one."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (raw.decode() for raw in listed)):
        source, target = ROOT / name, into / name
        if not os.path.lexists(source):
            continue  # deleted in the working tree, not yet in git
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return into


def _run(*command: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )


def _data_files() -> list[str]:
    """The files beside the modules (not Python) as the wheel must hold them: .avsc,
    .cql, templates, static files, the services' configs and Maven files. Not the
    deployment files (infra/deploy/: read by whoever deploys, from the repository)."""
    listed = subprocess.run(
        ["git", "ls-files", "cronstream", *FOLDERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        path if path.startswith("cronstream/") else f"cronstream/{path}"
        for path in listed
        if not path.endswith(".py")
        and not path.startswith("infra/deploy/")
        and not (ROOT / path).is_symlink()
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _tree(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, source)
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("cronstream-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed: its bin directory."""
    home = tmp_path_factory.mktemp("venv")
    made = _run(sys.executable, "-m", "venv", home)
    assert made.returncode == 0, made.stderr
    installed = _run(home / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return home / "bin"


def test_the_wheel_claims_only_the_cronstream_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {
        "cronstream",
        wheel.name.split("-py3")[0] + ".dist-info",
    }
    for folder in FOLDERS:  # each folder installed, as a package of cronstream's
        assert f"cronstream/{folder}/__init__.py" in names
    assert set(_data_files()) - set(names) == set()  # what the processes read beside them
    assert not any(name.startswith(("examples/", "tests/")) for name in names)


def test_installed_away_from_the_checkout_only_cronstream_imports(
    venv: Path, tmp_path: Path
) -> None:
    probe = (
        "import importlib.util, json, cronstream\n"
        "from cronstream import Client, Job, Flow, Settings\n"
        f"print(json.dumps([n for n in {FOLDERS!r} if importlib.util.find_spec(n)]))\n"
        "print(cronstream.__file__)"
    )
    out = _run(venv / "python", "-c", probe, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found, where = out.stdout.splitlines()
    assert json.loads(found) == []  # no top-level schemas, streams, ...
    assert str(venv.parent) in where  # the installed package, not the checkout's


def test_the_installed_cli_puts_and_lists_a_job_on_the_stack(
    venv: Path, ns: Settings, tmp_path: Path
) -> None:
    env = {**cli_env(ns), "CRONSTREAM_HOME": str(ns.home)}
    helped = _run(venv / "cronstream", "--help", cwd=tmp_path, env=env)
    assert helped.returncode == 0, helped.stderr
    assert "usage: cronstream" in helped.stdout
    url = "https://example.com/hook"
    args = ("jobs", "put", "from-wheel", "--every", "1h", "--target", "http", "--url", url)
    put = _run(venv / "cronstream", *args, cwd=tmp_path, env=env)
    assert put.returncode == 0, put.stderr
    listed = _run(venv / "cronstream", "jobs", "list", "--json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "from-wheel" in {json.loads(line)["job_id"] for line in listed.stdout.splitlines()}
