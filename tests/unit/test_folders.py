"""docs/design.md's Folders table against the tree: every module of the code packages is
named in the row of its folder (or of the nearest folder above it that has a row, as
``sub/module.py`` or ``sub/``), and every ``module.py`` a row names exists in its folder
(or a folder inside it the row names). Each
package's ``errors.py`` and ``__init__.py`` are covered by the table's own sentence."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.layout import CODE

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `([^`]+/)` \| (.*) \|$")
NAMED = re.compile(r"`([\w/]+\.py)`")


def rows(design: str) -> dict[str, str]:
    """The Folders table: folder -> what its row says."""
    section = design[design.index("## Folders") :]
    section = section[: section.index("\n## ", 5)]
    return {m[1]: m[2] for line in section.splitlines() if (m := ROW.match(line))}


def modules(root: Path = ROOT) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        path
        for path in listed
        if path.split("/")[0] in CODE and Path(path).name not in ("__init__.py", "errors.py")
    ]


def unnamed(table: dict[str, str], paths: list[str]) -> list[str]:
    """The modules no row names."""
    missing = []
    for path in paths:
        folder = path.rsplit("/", 1)[0] + "/"
        owners = [row for row in table if folder.startswith(row)]
        if not owners:
            missing.append(path)
            continue
        row = max(owners, key=len)
        inner = path[len(row) :]
        names = {f"`{inner}`", f"`{inner.split('/')[0]}/`"} if "/" in inner else {f"`{inner}`"}
        if not any(name in table[row] for name in names):
            missing.append(path)
    return missing


def test_every_module_is_in_the_folders_table() -> None:
    table = rows((ROOT / "docs" / "design.md").read_text())
    assert len(table) > 10
    assert unnamed(table, modules()) == []


def test_every_module_the_table_names_exists() -> None:
    table = rows((ROOT / "docs" / "design.md").read_text())
    gone = [
        f"{folder}{name}"
        for folder, text in table.items()
        for name in NAMED.findall(text)
        if not any((ROOT / folder).rglob(name)) and not (ROOT / name).exists()
    ]
    assert gone == []


def test_the_check_sees_a_missing_module() -> None:
    table = {"pkg/": "`a.py` (one), `sub/` (a folder)", "pkg/deep/": "`b.py`"}
    paths = ["pkg/a.py", "pkg/sub/x.py", "pkg/deep/b.py", "pkg/deep/c.py", "other/d.py"]
    assert unnamed(table, paths) == ["pkg/deep/c.py", "other/d.py"]
