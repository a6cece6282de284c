"""Retry timing: exponential backoff with full jitter and a cap.

Attempt n (1-based) failed; attempt n+1 waits ``uniform(0, min(cap, initial * 2^(n-1)))``
("full jitter", which spreads a failure storm instead of re-synchronising it). After
``max_attempts`` attempts there is no next one: the run is dead-lettered.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from cronstream.schemas.events import RetryPolicy

# No wait is longer than the documented limit, whatever a definition says (one written
# by another producer is not checked by ``jobs put``): a retry due past year 9999
# cannot even be written.
from cronstream.schemas.limits import MAX_BACKOFF_MS


def backoff_ceiling_ms(policy: RetryPolicy, attempt: int) -> int:
    """The upper bound of the wait after attempt ``attempt`` failed (0 to 30 days)."""
    exponent = min(max(attempt - 1, 0), 62)
    ceiling = min(policy.max_backoff_ms, policy.initial_backoff_ms * (1 << exponent))
    return max(0, min(ceiling, MAX_BACKOFF_MS))


def next_attempt_due(
    policy: RetryPolicy,
    attempt: int,
    now_ms: int,
    *,
    uniform: Callable[[float, float], float] = random.uniform,
) -> int | None:
    """When attempt ``attempt + 1`` is due, or None when ``attempt`` was the last."""
    if attempt >= policy.max_attempts:
        return None
    return now_ms + round(uniform(0, backoff_ceiling_ms(policy, attempt)))
