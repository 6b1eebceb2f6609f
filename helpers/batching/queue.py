"""A priority queue that buckets requests by input length (the handout's PRIORITYQUEUE, bonus feature 1)."""
from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterator

from helpers.batching.request import Request


class BucketedQueue:
    """Requests waiting for prefill, grouped into buckets of similar prompt length.

    Bucket ``k`` holds prompts of ``k*bucket_width+1 .. (k+1)*bucket_width`` tokens, so a prefill batch drawn from
    one bucket pads each prompt by less than ``bucket_width`` tokens. Within the whole queue the order is by
    priority (smaller first), then arrival; by default the priority is the arrival order (first come, first served).
    """

    def __init__(self, bucket_width: int = 16) -> None:
        if bucket_width < 1:
            raise ValueError(f"bucket_width={bucket_width} must be at least 1 token")
        self.bucket_width = bucket_width
        self._buckets: dict[int, list[tuple[float, int, Request]]] = {}  # each list sorted by (priority, arrival)
        self._arrivals = itertools.count()

    def bucket_of(self, request: Request) -> int:
        return (request.prompt_len - 1) // self.bucket_width

    def put(self, request: Request, priority: float | None = None) -> None:
        arrival = next(self._arrivals)
        entry = (arrival if priority is None else priority, arrival, request)
        bisect.insort(self._buckets.setdefault(self.bucket_of(request), []), entry, key=lambda e: e[:2])

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._buckets.values())

    def __bool__(self) -> bool:
        return any(self._buckets.values())

    def _in_order(self, bucket: int | None) -> Iterator[tuple[float, int, Request]]:
        if bucket is not None:
            return iter(list(self._buckets.get(bucket, [])))
        return heapq.merge(*[list(entries) for entries in self._buckets.values()], key=lambda e: e[:2])

    def constrained_get(self, condition: Callable[[Request], bool] = lambda r: True, *,
                        bucket: int | None = None) -> Request | None:
        """Remove and return the first request (by priority) that satisfies ``condition``, or None.

        With ``bucket`` only that length bucket is searched: that is how a prefill batch gathers similar lengths.
        """
        for entry in self._in_order(bucket):
            request = entry[2]
            if condition(request):
                entries = self._buckets[self.bucket_of(request)]
                entries.remove(entry)
                if not entries:
                    del self._buckets[self.bucket_of(request)]
                return request
        return None
