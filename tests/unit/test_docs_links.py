"""Every relative link of the README and docs/*.md resolves: the file exists, and an
anchor names a heading of the Markdown file it points into (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
# [text](target) or [text](target "title"), images too; and [label]: target definitions.
INLINE = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # http:, https:, mailto:, ...
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as rendered (code spans, links and
    emphasis reduced to their text), lower case, every character but letters, digits,
    '_', '-' and spaces dropped, spaces turned into '-'."""
    text = re.sub(r"`+([^`]*)`+", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a file's headings; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for match in HEADING.finditer(FENCE.sub("", markdown)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(markdown: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    prose = CODE_SPAN.sub("", FENCE.sub("", markdown))
    return [m.group(1) for m in INLINE.finditer(prose)] + DEFINITION.findall(prose)


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``doc`` whose file is missing (or outside ``root``), or
    whose anchor is no heading of the Markdown file it points into."""
    broken = []
    for target in links(doc.read_text()):
        if not target or SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists() or not path.is_relative_to(root):
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(root)}")
    return broken


def test_the_docs_are_read_and_hold_links() -> None:
    assert ROOT / "README.md" in DOCS
    assert len(DOCS) > 5
    assert len(links((ROOT / "README.md").read_text())) > 20


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == []


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Two tiers: the store (`--state-dir`)\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "# Top\n## Top\n"
        "[ok](docs/a.md) [ok](docs/a.md#two-tiers-the-store---state-dir) [ok](#top-1)\n"
        "[web](https://example.com/x) [mail](mailto:a@b.c) `[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nope) [here](#top-2)\n"
        '[titled](docs/c.md "title")\n[label]: docs/d.md\n'
        "[escapes](../outside.md)\n"
    )
    assert broken_links(doc, root=tmp_path) == [
        "docs/b.md: no such file",
        "docs/a.md#nope: no heading #nope in docs/a.md",
        "#top-2: no heading #top-2 in README.md",
        "docs/c.md: no such file",
        "../outside.md: no such file",
        "docs/d.md: no such file",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "Two tiers: the scheduler's store (`--state-dir`)",
            "two-tiers-the-schedulers-store---state-dir",
        ),
        ("Under faults: `make chaos`", "under-faults-make-chaos"),
        ("Every hop cheaper (issue 35), 2026-11-27", "every-hop-cheaper-issue-35-2026-11-27"),
        ("A cluster: no single point of failure", "a-cluster-no-single-point-of-failure"),
        ("The [HTTP API](x.md) and *more*", "the-http-api-and-more"),
        ("runs_by_job", "runs_by_job"),
    ],
)
def test_anchors_follow_githubs_slugs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
