"""Fair share of one priority's backlog among tenants.

One FIFO per tenant; starts go round the tenants that have runs waiting, ``weight``
starts per turn (1 unless configured), so a tenant with 100,000 runs waiting takes one
turn in each round like a tenant with one: the other tenant's run waits for at most one
round, not for the burst. Within a tenant, runs keep their order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    def __init__(self, tenant_of: Callable[[T], str], weights: Mapping[str, int] | None = None):
        self._tenant_of = tenant_of
        self._weights = dict(weights or {})
        self._queues: dict[str, deque[T]] = {}
        self._ring: deque[str] = deque()  # tenants with runs waiting, the current one first
        self._left = 0  # starts the current tenant has left in its turn
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[T]:
        for queue in self._queues.values():
            yield from queue

    def append(self, item: T) -> None:
        tenant = self._tenant_of(item)
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
        if not queue:
            self._ring.append(tenant)
            if len(self._ring) == 1:
                self._left = self._weight(tenant)
        queue.append(item)
        self._size += 1

    def peek(self) -> T | None:
        """The run the next ``popleft`` returns."""
        return self._queues[self._ring[0]][0] if self._ring else None

    def popleft(self) -> T:
        tenant = self._ring[0]
        queue = self._queues[tenant]
        item = queue.popleft()
        self._size -= 1
        self._left -= 1
        if not queue:
            self._ring.popleft()
            del self._queues[tenant]
            self._left = self._weight(self._ring[0]) if self._ring else 0
        elif self._left <= 0:
            self._ring.rotate(-1)
            self._left = self._weight(self._ring[0])
        return item

    def keep(self, wanted: Callable[[T], bool]) -> None:
        """Drop the runs ``wanted`` refuses (order kept)."""
        items = [item for item in self if wanted(item)]
        self._queues.clear()
        self._ring.clear()
        self._left = self._size = 0
        for item in items:
            self.append(item)

    def _weight(self, tenant: str) -> int:
        return max(1, self._weights.get(tenant, 1))
