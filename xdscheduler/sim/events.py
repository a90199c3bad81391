"""The engine's one event queue: when something happens next, scheduled by whatever causes it.

Each event has a key (a job finishing, a pause ending, a switch, a relocation's next phase, the
next sample, the next fault, the next arrival). Scheduling a key again moves its event; a key
holds at most one. Moved and cancelled events stay in the heap until they surface and are
dropped there, so a change costs O(log n) and finding the next event never rescans the jobs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable, int]] = []  # (time, order, key, version)
        self._version: dict[Hashable, int] = {}
        self._pushed = 0  # ties broken by scheduling order, so a queue pickles and replays alike

    def schedule(self, key: Hashable, time_s: float) -> None:
        """The event under `key` happens at `time_s` (never, if infinite), and only then."""
        version = self._version.get(key, 0) + 1
        self._version[key] = version
        if time_s < math.inf:
            heapq.heappush(self._heap, (time_s, self._pushed, key, version))
            self._pushed += 1

    def cancel(self, key: Hashable) -> None:
        self.schedule(key, math.inf)

    def next_time(self, now: float, include_now: bool) -> float:
        """The earliest event after `now` (or at it, with `include_now`); inf when none is left.
        Events before it are dropped: nothing earlier can happen any more."""
        heap = self._heap
        while heap:
            t, _, key, version = heap[0]
            if version == self._version[key] and (t > now or (include_now and t == now)):
                return t
            heapq.heappop(heap)
        return math.inf
