"""The size budget ruff cannot check: no source file over 500 lines, and no function over
60 lines unless its ``def`` line says why (``# long: <reason>``). Run by `make lint` too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.layout import CODE

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (*CODE, "tests")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            signature = "\n".join(lines[node.lineno - 1 : node.body[0].lineno - 1])
            if length > MAX_FUNCTION_LINES and "# long: " not in signature:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_the_tree_is_read() -> None:
    assert len(sources()) > 50


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_file_over_500_lines(path: Path) -> None:
    lines = path.read_text().count("\n")
    assert lines <= MAX_FILE_LINES, f"{lines} lines"


def test_no_function_over_60_lines_without_a_reason() -> None:
    found = [entry for path in sources() for entry in long_functions(path)]
    assert found == [], "split these, or give a `# long: reason` on the def line"


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(70))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\ndef g():  # long: a table\n{body}\n")
    assert long_functions(tmp_path / "m.py", tmp_path) == ["m.py:1 f (71 lines)"]
