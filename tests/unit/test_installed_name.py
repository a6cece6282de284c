"""One installed name (docs/design.md): every folder of the design card is a package of
``cronstream`` through a symlink in ``cronstream/``, and no code imports a folder by its
top-level name (in a checkout that name loads a second copy of the module; installed, it
does not exist), nor names a module so in a string it imports by (``module:attr``
entries, ``monkeypatch`` targets: a string that is a dotted path of a folder)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from tests.layout import FOLDERS

ROOT = Path(__file__).resolve().parents[2]
_NAMES = "|".join(FOLDERS)
# a whole string that is a dotted path under a folder, or a ``module:attr`` inside one
DOTTED = re.compile(rf"({_NAMES})(\.\w+)+(:\w+)?")
ENTRY = re.compile(rf"(?<![\w.])({_NAMES})(\.\w+)+:\w+")


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


def module_strings(source: str) -> list[str]:
    """The strings of ``source`` (not docstrings) that name a module by a folder's
    top-level name."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (DOTTED.fullmatch(node.value) or ENTRY.search(node.value))
    ]


def test_each_folder_is_a_package_of_cronstream_through_a_link() -> None:
    for folder in FOLDERS:
        link = ROOT / "cronstream" / folder
        assert link.is_symlink(), link
        assert link.resolve() == ROOT / folder


def test_no_module_imports_a_folder_by_its_top_level_name() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = {}
    for path in listed:
        if (ROOT / path).is_file() and path != "tests/unit/test_installed_name.py":
            source = (ROOT / path).read_text()
            if names := top_level_imports(source) + module_strings(source):
                offenders[path] = names
    assert offenders == {}


def test_the_check_sees_each_form_of_import() -> None:
    source = "import streams.core\nfrom schemas import ids\nfrom runtime.settings import x\n"
    assert top_level_imports(source) == ["streams.core", "schemas", "runtime.settings"]
    fine = "from cronstream.schemas import ids\nimport cronstream.streams\nfrom . import x\n"
    assert top_level_imports(fine) == []


def test_the_check_sees_a_module_named_in_a_string() -> None:
    source = (
        '"""streams.core in a docstring is prose."""\n'
        'a = "http = schemas.targets.kafka:TARGET"\n'
        'b = "streams.flows.app.WAIT"\n'
        'c = "cronstream.streams.flows.app.WAIT"\n'
        'd = "the API (tokens: runtime.tokens)"\n'
    )
    assert module_strings(source) == [
        "http = schemas.targets.kafka:TARGET",
        "streams.flows.app.WAIT",
    ]
