"""`python` targets: import ``module:function`` and call it with the RunContext.

Only allowlisted callables run (``--python-allow``; by default the ``examples``
package). An entry is a module prefix (``examples`` allows ``examples`` and every
``examples.*`` module) or one exact ``module:function``. The check happens before the
import (importing a module runs its code), and again on what the import gives: a
function name starting with ``_`` is refused, and the callable must have been defined
in an allowed module (``from os import system`` in an allowed module does not make
``os.system`` callable as a job).

The callable runs in the worker's thread pool. Python cannot stop a thread, so a
timeout or a cancel is cooperative: the callable should watch ``context.cancelled`` and
``context.remaining()``; when it ignores them the worker records TIMED_OUT/CANCELED at
the deadline and the thread finishes in the background (its result is discarded).

Output (docs/run-output.md): what the callable returns; a ``str`` as it is, ``bytes``
decoded as UTF-8, None nothing (no output record), anything else its ``repr()``. A
callable that raises leaves its traceback as the failed attempt's output. What it
prints is not captured (``sys.stdout`` is the worker's, shared by every run thread).
"""

from __future__ import annotations

import importlib
import re
import sys
import traceback
from collections.abc import Iterable

from cronstream.consumers.errors import ExecutionFailed, TargetInvalid
from cronstream.consumers.executors.base import RunContext, told
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.schemas.events import Target

DEFAULT_ALLOW = ("examples",)
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_FUNCTION = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


class PythonPolicy:
    """Which ``module:function`` names a worker may import and call."""

    def __init__(self, allow: Iterable[str] = DEFAULT_ALLOW) -> None:
        entries = tuple(allow)
        for entry in entries:
            module, colon, function = entry.partition(":")
            if not _MODULE.match(module) or (colon and not _FUNCTION.match(function)):
                raise ValueError(
                    f"python allowlist entry {entry!r} is neither a module prefix "
                    "(pkg.mod) nor a callable (pkg.mod:function)"
                )
        self.modules = tuple(e for e in entries if ":" not in e)
        self.callables = frozenset(e for e in entries if ":" in e)

    def module_allowed(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def check_name(self, name: str) -> tuple[str, str]:
        """(module, function) of an allowed ``module:function``; raises TargetInvalid."""
        module, _, function = name.partition(":")
        if not _MODULE.match(module) or not _FUNCTION.match(function):
            raise TargetInvalid(
                f"{name!r} is not module:function (a public function of an absolute module)"
            )
        if name not in self.callables and not self.module_allowed(module):
            raise TargetInvalid(
                f"{name!r} is not allowed on this worker (--python-allow: "
                f"{', '.join(self.modules + tuple(sorted(self.callables))) or 'nothing'})"
            )
        return module, function

    def check_callable(self, name: str, func: object) -> None:
        """The object found must be a callable defined where the allowlist points."""
        if not callable(func):
            raise TargetInvalid(f"{name!r} is not callable")
        if name in self.callables:
            return
        defined_in = getattr(func, "__module__", None)
        if not isinstance(defined_in, str) or not self.module_allowed(defined_in):
            raise TargetInvalid(
                f"{name!r} is defined in {defined_in!r}, outside the python allowlist"
            )


def executor(setup: ExecutorSetup) -> PythonExecutor:
    """The worker's python executor (declared by ``schemas.targets.python``)."""
    return PythonExecutor(PythonPolicy(setup.config.python_allow))


class PythonExecutor:
    kind = "python"

    def __init__(self, policy: PythonPolicy | None = None) -> None:
        self.policy = policy or PythonPolicy()

    def execute(self, target: Target, context: RunContext) -> str | bytes | None:
        name = target.callable or ""
        try:
            module_name, func_name = self.policy.check_name(name)
        except TargetInvalid as exc:
            raise told(context, exc, f"{name!r} is not allowed on this worker") from exc
        try:
            module = importlib.import_module(module_name)
            func = getattr(module, func_name)
        except Exception as exc:  # an import runs arbitrary code: any error is the target's
            # Its text may name the worker's files (a SyntaxError's path): a tenant is told
            # the kind of error only, the operators' log has the whole of it.
            error = TargetInvalid(f"cannot import {name!r}: {exc!r}")
            raise told(context, error, f"cannot import {name!r}: {type(exc).__name__}") from exc
        self.policy.check_callable(name, func)
        try:
            result = func(context)
        except ExecutionFailed:
            raise
        except BaseException as exc:  # sys.exit() or KeyboardInterrupt ends the job, not us
            trace = "".join(traceback.format_exception(exc))
            raise ExecutionFailed(f"{name} raised {exc!r}", output=trace) from exc
        finally:
            # The thread runs the next attempt too: a trace or profile function the job
            # installed (sys.settrace) must not follow it there.
            sys.settrace(None)
            sys.setprofile(None)
        if result is None or isinstance(result, str | bytes):
            return result
        try:
            return repr(result)
        except Exception as exc:  # the job's __repr__: its output says so, it succeeded
            return f"<{type(result).__name__} whose repr() raised {exc!r}>"
