"""docs/configuration.md, written from the declarations (``make docs``; a unit test
says when the file is not what this writes)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from cronstream.runtime.options import roles, services
from cronstream.runtime.options.option import Family, Option

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SECTIONS = (
    ("Services, names and the local stack", services),
    ("Roles, commands and `make run`", roles),
)
HEAD = """# Configuration

Every setting of cronstream is an environment variable, declared once in
`runtime/options/` with its type, default, help and the roles that read it. This page,
the commands' flags and `--help`, and `Settings.from_env` are made from those
declarations: **this file is generated** (`make docs`; `tests/unit/test_options_doc.py`
fails when it is not current). A flag, where a setting has one, wins over its variable.

- **Durations** have one syntax everywhere, variables and flags alike: `500ms`, `30s`,
  `5m`, `1h30m`, `2d` (a bare number is seconds). **Rates** are per second.
- **Older spellings** (a variable or flag with its unit in its name, `_MS`, `_S`,
  `_DAYS`, `PER_MINUTE`, and `--checkpoint-ms`, `--commit-ms`, ...) are still read, in
  their old unit, with a warning, for one release: the "Was" column names them.
- A password variable `X_PASSWORD` has a `X_PASSWORD_FILE` beside it: a file holding it
  (better: it is not in the process's environment).
"""


def _declared_in(module: ModuleType) -> Iterator[Option[Any] | Family]:
    for value in vars(module).values():
        if isinstance(value, Option | Family):
            yield value
        elif hasattr(value, "values") and not isinstance(value, type):
            yield from (v for v in value.values() if isinstance(v, Option))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [HEAD]
    for title, module in SECTIONS:
        lines += [f"## {title}", "", "| Variable | Default | Read by | Flag | What it is | Was |"]
        lines.append("|---|---|---|---|---|---|")
        for item in _declared_in(module):
            if isinstance(item, Family):
                row = (f"`{item.pattern}`", "none", item.who, "", item.help, "")
            else:
                was = ", ".join(f"`{old.env}`" for old in item.old)
                flag = f"`{item.flag}`" if item.flag else ""
                row = (f"`{item.env}`", item.default_text, item.who, flag, item.help, was)
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``--check``: exit 1 when docs/configuration.md is not what ``render`` writes."""
    text = render()
    if "--check" in argv:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is not current: run `make docs`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
