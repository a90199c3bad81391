"""The planner's memos are bounded: a long-lived service meets job shapes without end, and
each distinct one would otherwise stay in memory for good."""

from __future__ import annotations

import pytest

from tests.test_planner import eight_b, pair
from xdscheduler.cache import BoundedCache
from xdscheduler.planner import search


def test_the_least_recently_used_entry_goes_first():
    cache: BoundedCache[int] = BoundedCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache["a"] == 1  # read: now the most recent
    cache["c"] = 3
    assert dict(cache) == {"a": 1, "c": 3}
    assert "c" in cache and cache.get("b") is None
    cache["a"] = 4  # written again: most recent, still two entries
    cache["d"] = 5
    assert dict(cache) == {"a": 4, "d": 5}


def test_a_cache_of_no_entries_is_refused():
    with pytest.raises(ValueError, match="at least one entry"):
        BoundedCache(0)


def test_the_ideal_speeds_memo_keeps_its_bound_and_a_dropped_shape_is_searched_again(
    monkeypatch,
):
    monkeypatch.setattr(search, "_IDEAL", BoundedCache(2))
    view = pair()
    jobs = [eight_b(8, n) for n in (8, 16, 32)]  # three shapes
    first = [search.ideal_tokens_per_s(job, view) for job in jobs]
    assert len(search._IDEAL) == 2
    assert search.ideal_tokens_per_s(jobs[0], view) == first[0]  # dropped, searched again
    assert len(search._IDEAL) == 2


def test_every_memo_of_the_planner_is_bounded():
    from xdscheduler.planner import policies

    for memo in (search._IDEAL, search._PLANNABLE, policies._BEST_MFU):
        assert isinstance(memo, BoundedCache) and memo.size == search.MEMO_SIZE
