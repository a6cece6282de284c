"""Every cache in a long-running process is bounded, and keyed only on what passed the
limits (found by review: a cron expression was parsed, and remembered whole, before its
256-character limit was checked: 20 refused 600 KB expressions kept 52 MB in the API;
every job id a scheduler ever read stayed in ``text_key``'s cache: 200,000 fresh ids put
then deleted, +112 MB, never given back).

``test_no_unbounded_cache_in_the_code`` reads the source of every module of our packages
and finds what can grow for as long as a process runs: ``functools.cache`` and
``lru_cache(maxsize=None)``, and module-level containers (a dict, set, list, Counter,
defaultdict... bound at module level) that a function adds to. Each must be bounded or
on ``REVIEWED`` with the reason it cannot grow with what tenants send. A bounded
``lru_cache`` or ``Memo`` holds a fixed number of entries; the worst-case bytes are
written next to each (its key passed the limits first)."""

from __future__ import annotations

import ast
import importlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronstream.runtime.kafka.records import text_key
from cronstream.schemas.definition import job_from_spec, problems
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import CronSchedule, JobDefinition, Target, utc_now
from tests.layout import FOLDERS

PACKAGES = (*(f"cronstream.{name}" for name in FOLDERS), "cronstream")
ROOT = Path(__file__).resolve().parents[2]

# (module path, name) -> why it cannot grow with what tenants send.
REVIEWED = {
    ("schemas/avro.py", "_raw"): "keyed by a schema's name: the closed set of .avsc files",
    ("schemas/avro.py", "schema_json"): "keyed by a schema's name: the .avsc files",
    ("schemas/avro.py", "parsed_schema"): "keyed by a schema's name: the .avsc files",
    ("consumers/sink.py", "transient_errors"): "no arguments: one entry",
    ("runtime/metrics.py", "labelled"): (
        "one entry per series its metric keeps anyway: statuses, target types, roles, "
        "stages, partitions, exception types and the configured tenants"
    ),
    ("schemas/definition/cron.py", "_SHARED"): "bounded by _shared: 100,000 values at most",
    ("runtime/kafka/logs.py", "_ROUTED"): "two fixed keys, set once by route()",
    ("runtime/options/option.py", "_WARNED"): "the older spellings declared, once each",
}

CONTAINER_CALLS = frozenset(
    {
        "dict",
        "set",
        "list",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "deque",
        "WeakValueDictionary",
        "WeakKeyDictionary",
        "WeakSet",
        "ChainMap",
    }
)
GROWING_METHODS = frozenset(
    {"setdefault", "append", "add", "update", "extend", "insert", "appendleft", "__setitem__"}
)


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        # resolved: cronstream/<folder> is a symlink to the folder at the root, which
        # rglob does not follow from cronstream itself (each module read once)
        folder = Path(importlib.import_module(package).__path__[0]).resolve()
        for path in sorted(folder.rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _name(node: ast.expr) -> str:
    """``cache`` of ``cache``, ``functools.cache`` and ``functools.cache(...)``."""
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _unbounded_lru(node: ast.expr) -> bool:
    """``functools.cache`` or ``lru_cache(maxsize=None)``/``lru_cache(None)``."""
    name = _name(node)
    if name == "cache":
        return True
    if name != "lru_cache" or not isinstance(node, ast.Call):
        return False  # a bare @lru_cache holds 128 entries
    sizes = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "maxsize")]
    return any(isinstance(s, ast.Constant) and s.value is None for s in sizes)


def _caches(tree: ast.Module) -> Iterator[str]:
    """Functions wrapped in an unbounded functools cache."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_unbounded_lru(d) for d in node.decorator_list):
                yield node.name
        elif isinstance(node, ast.Call) and _unbounded_lru(node.func):
            yield ast.unparse(node)  # functools.cache(f) or lru_cache(None)(f)


def _module_containers(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        growable = isinstance(
            value, ast.Dict | ast.Set | ast.List | ast.DictComp | ast.SetComp | ast.ListComp
        ) or (isinstance(value, ast.Call) and _name(value.func) in CONTAINER_CALLS)
        if growable:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _grown(tree: ast.Module, names: set[str]) -> Iterator[str]:
    """Module-level containers that a function adds to."""
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            target = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                target = node.value
            elif isinstance(node, ast.AugAssign):
                target = node.target
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in GROWING_METHODS
            ):
                target = node.func.value
            if isinstance(target, ast.Name) and target.id in names:
                yield target.id


def test_no_unbounded_cache_in_the_code() -> None:
    found: set[tuple[str, str]] = set()
    for path, tree in _modules():
        found.update((path, name) for name in _caches(tree))
        found.update((path, name) for name in _grown(tree, _module_containers(tree)))
    unreviewed = sorted(found - REVIEWED.keys())
    assert not unreviewed, f"unbounded caches (bound them, or review them here): {unreviewed}"
    assert not REVIEWED.keys() - found, "a reviewed cache is gone: drop its entry"


def test_the_finder_sees_each_kind_of_unbounded_cache() -> None:
    """The checks above cannot pass for want of finding anything."""
    tree = ast.parse(
        "import functools\nfrom functools import cache, lru_cache\n"
        "SEEN = {}\nIDS: set[str] = set()\nLAST = []\nBOUNDED = Memo(10)\n"
        "@functools.cache\ndef a(x): return x\n"
        "@lru_cache(maxsize=None)\ndef b(x): return x\n"
        "@lru_cache(maxsize=100)\ndef ok(x): return x\n"
        "c = functools.lru_cache(None)(len)\n"
        "def d(k): SEEN[k] = 1; IDS.add(k); LAST.append(k); BOUNDED[k] = 1\n"
    )
    assert set(_caches(tree)) == {"a", "b", "functools.lru_cache(None)(len)"}
    assert set(_grown(tree, _module_containers(tree))) == {"SEEN", "IDS", "LAST"}


def _retained(calls: int, call: object) -> int:
    """Bytes still allocated after ``calls`` calls of ``call(i)`` (tracemalloc counts
    Python's own allocations: the same on every run, however busy the machine)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(calls):
            call(i)  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _long_cron(i: int) -> str:
    """A valid expression of 600 KB, different each time (refused by its length only)."""
    return f"{i % 60} 0 * * *" + " " * 600_000


def test_a_refused_cron_expression_leaves_nothing_behind() -> None:
    """The API's check (``job_from_spec``) and the admission's (``problems``)."""
    spec = {"id": "j", "target": "http", "url": "https://e.x/h"}

    def put(i: int) -> None:
        with pytest.raises(SpecError, match="over 256"):
            job_from_spec({**spec, "cron": _long_cron(i)}, max_payload_bytes=1024)

    def admit(i: int) -> None:
        job = JobDefinition(
            job_id="j",
            target=Target(type="http", url="https://e.x/h"),
            schedule=CronSchedule(expression=_long_cron(i)),
            updated_at=utc_now(),
        )
        assert any("over 256" in p for p in problems(job, max_payload_bytes=1024))

    put(0)  # first use: imports, compiled patterns
    admit(0)
    assert _retained(20, put) < 256 * 1024  # was 52 MB
    assert _retained(20, admit) < 256 * 1024


def test_record_keys_are_not_remembered() -> None:
    text_key(b"warm")
    assert _retained(20_000, lambda i: text_key(f"tenant/job-{i:08d}".encode())) < 256 * 1024
