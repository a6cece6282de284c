"""The benchmarks' code run in another revision's checkout (tests.bench.common.for_checkout):
a revision from before the folders were packages of cronstream imports them by their
top-level names."""

from __future__ import annotations

from pathlib import Path

from tests.bench.common import for_checkout

SOURCE = (
    "from cronstream.streams.core.misfire import Fire\n"
    "from cronstream.consumers import archive\n"
    "import cronstream.cli\n"
    "from cronstream import Client\n"
)


def test_a_checkout_with_the_links_imports_as_written(tmp_path: Path) -> None:
    (tmp_path / "cronstream" / "schemas").mkdir(parents=True)
    assert for_checkout(tmp_path, SOURCE) == SOURCE


def test_an_older_checkout_imports_the_folders_by_their_top_level_names(tmp_path: Path) -> None:
    (tmp_path / "cronstream").mkdir()
    assert for_checkout(tmp_path, SOURCE) == (
        "from streams.core.misfire import Fire\n"
        "from consumers import archive\n"
        "import cronstream.cli\n"
        "from cronstream import Client\n"
    )
