"""One installed name (docs/design.md): every folder of the design card is a package of
``cronstream`` through a symlink in ``cronstream/``, and no code imports a folder by its
top-level name (in a checkout that name loads a second copy of the module; installed, it
does not exist)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("schemas", "runtime", "streams", "consumers", "producers", "infra")


def top_level_imports(source: str) -> list[str]:
    """The modules ``source`` imports under a folder's top-level name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in FOLDERS]
    return found


def test_each_folder_is_a_package_of_cronstream_through_a_link() -> None:
    for folder in FOLDERS:
        link = ROOT / "cronstream" / folder
        assert link.is_symlink(), link
        assert link.resolve() == ROOT / folder


def test_no_module_imports_a_folder_by_its_top_level_name() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = {
        path: names
        for path in listed
        if (ROOT / path).is_file() and (names := top_level_imports((ROOT / path).read_text()))
    }
    assert offenders == {}


def test_the_check_sees_each_form_of_import() -> None:
    source = "import streams.core\nfrom schemas import ids\nfrom runtime.settings import x\n"
    assert top_level_imports(source) == ["streams.core", "schemas", "runtime.settings"]
    fine = "from cronstream.schemas import ids\nimport cronstream.streams\nfrom . import x\n"
    assert top_level_imports(fine) == []
