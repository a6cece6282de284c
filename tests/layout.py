"""The design card's folders at the repository's root, each installed and imported as a
package of ``cronstream`` (``cronstream/<folder>`` links to it: docs/design.md, "One
installed name"). The tests and benchmarks that need the list take it from here."""

from __future__ import annotations

FOLDERS = ("schemas", "runtime", "streams", "consumers", "producers", "infra")
