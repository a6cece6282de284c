"""`python` targets: import ``module:function`` and call it with the RunContext.

The callable runs in the worker's thread pool. Python cannot stop a thread, so a
timeout or a cancel is cooperative: the callable should watch ``context.cancelled`` and
``context.remaining()``; when it ignores them the worker records TIMED_OUT/CANCELED at
the deadline and the thread finishes in the background (its result is discarded).
"""

from __future__ import annotations

import importlib
import sys

from consumers.executors.base import ExecutionFailed, RunContext, TargetInvalid
from schemas.events import Target


class PythonExecutor:
    kind = "python"

    def execute(self, target: Target, context: RunContext) -> str:
        module_name, _, func_name = (target.callable or "").partition(":")
        try:
            module = importlib.import_module(module_name)
            func = getattr(module, func_name)
        except Exception as exc:  # an import runs arbitrary code: any error is the target's
            raise TargetInvalid(f"cannot import {target.callable!r}: {exc!r}") from exc
        if not callable(func):
            raise TargetInvalid(f"{target.callable!r} is not callable")
        try:
            result = func(context)
        except ExecutionFailed:
            raise
        except BaseException as exc:  # sys.exit() or KeyboardInterrupt ends the job, not us
            raise ExecutionFailed(f"{target.callable} raised {exc!r}") from exc
        finally:
            # The thread runs the next attempt too: a trace or profile function the job
            # installed (sys.settrace) must not follow it there.
            sys.settrace(None)
            sys.setprofile(None)
        return f"returned {str(result)[:200]!r}" if result is not None else "returned"
