"""docs/configuration.md, written from the declarations (``make docs``; a unit test
says when the file is not what this writes)."""

from __future__ import annotations

from pathlib import Path

from cronstream.runtime.options import declared_in, roles, services
from cronstream.runtime.options.option import Family

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SECTIONS = (
    ("Services, names and the local stack", services),
    ("Roles, commands and `make run`", roles),
)
HEAD = """# Configuration

Every setting of cronstream is an environment variable, declared once in
`runtime/options/` with its type, default, help and the roles that read it. This page,
the commands' flags and `--help`, and `Settings.from_env` are made from those
declarations: **this file is generated** (`make docs`; `tests/unit/test_options.py`
fails when it is not current). A flag, where a setting has one, wins over its variable.

- **Durations** have one syntax everywhere, variables and flags alike: `500ms`, `30s`,
  `5m`, `1h30m`, `2d` (a bare number is seconds). **Rates** are per second.
- **Older spellings** (a variable or flag with its unit in its name, `_MS`, `_S`,
  `_DAYS`, `PER_MINUTE`, and `--checkpoint-ms`, `--commit-ms`, ...) are still read, in
  their old unit, with a warning, for one release: the "Was" column names them.
- A password variable `X_PASSWORD` has a `X_PASSWORD_FILE` beside it: a file holding it
  (better: it is not in the process's environment).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [HEAD]
    for title, module in SECTIONS:
        lines += [f"## {title}", "", "| Variable | Default | Read by | Flag | What it is | Was |"]
        lines.append("|---|---|---|---|---|---|")
        for item in declared_in(module):
            if isinstance(item, Family):
                row = (f"`{item.pattern}`", "none", item.who, "", item.help, "")
            else:
                olds = (*(old.env for old in item.old), *item.old_flags)
                was = ", ".join(f"`{old}`" for old in olds)
                flag = f"`{item.flag}`" if item.flag else ""
                row = (f"`{item.env}`", item.default_text, item.who, flag, item.help, was)
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    DOC.write_text(render())
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
