"""A mapping that keeps only its most recently used entries: the planner's memos of searches
per job shape and cluster, which a long-lived service would otherwise grow without end (every
distinct job a client sends adds one)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, MutableMapping
from typing import TypeVar

V = TypeVar("V")


class BoundedCache(MutableMapping[Hashable, V]):
    """At most `size` entries; reading or writing one makes it the most recent, and a write
    beyond `size` drops the least recent."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a cache holds at least one entry, not {size}")
        self.size = size
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def __getitem__(self, key: Hashable) -> V:
        value = self._entries[key]
        self._entries.move_to_end(key)
        return value

    def __contains__(self, key: object) -> bool:  # asked on the hot path: no reordering
        return key in self._entries

    def __setitem__(self, key: Hashable, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __delitem__(self, key: Hashable) -> None:
        del self._entries[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
