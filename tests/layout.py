"""The design card's folders at the repository's root, each installed and imported as a
package of ``cronstream`` (``cronstream/<folder>`` links to it: docs/design.md, "One
installed name"), and every folder of code. The tests and benchmarks that need the lists
take them from here."""

from __future__ import annotations

FOLDERS = ("schemas", "runtime", "streams", "consumers", "producers", "infra")

# Every folder of Python code but the tests: the package, its folders, the examples.
CODE = ("cronstream", *FOLDERS, "examples")
