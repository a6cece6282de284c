"""What every command shares: exit codes and argument types.

Exit codes: 0 done; 2 invalid input (nothing was written); 3 a service is unreachable;
4 no such job (or run).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_FOUND = 4
EXIT_REFUSED = 5  # Kafka refused the credentials (runtime.kafka.security)


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse
