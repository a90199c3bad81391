"""The benchmark of waiting for a faster domain: its own variants and its table
(benchmarks/wait_for_faster.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import wait_for_faster as wf
from tests.test_planner import eight_b, pair
from xdscheduler.errors import UserError
from xdscheduler.planner.waiting import Hold, WaitsForFaster
from xdscheduler.registry import make_policy
from xdscheduler.scenario import Weights

WEST_FREES = pair().with_free({"east": 0, "west": 8}).with_releases([(600.0, 1, 8)])


def test_the_reserving_variant_holds_what_a_waiting_job_needs_until_it_frees():
    """west: 8 free now, 8 more in ten minutes; east all held. `a` waits for west's sixteen;
    `b` (eight, for hours) would take west's eight now, unless they are held for `a`; `c`
    (eight, for seconds) ends before the release, so it may (EASY backfill)."""
    a, b = replace(eight_b(8, 16), name="a"), replace(eight_b(8, 8), name="b")
    c = replace(eight_b(8, 8), name="c", tokens=1e6)
    waits = WaitsForFaster(Weights(), wf.UNBOUNDED, once=False)
    reserves = wf.ReservesFaster(Weights(), wf.RESERVING, once=False)
    for policy in (waits, reserves):
        assert policy.decide([a], WEST_FREES, 0.0) == []  # `a` waits for west's release
    (p,) = waits.decide([a, b], WEST_FREES, 1.0)
    assert p.job == "b" and set(p.domains) == {1}  # nothing held: `b` takes west's eight
    assert reserves.decide([a, b], WEST_FREES, 1.0) == []
    assert reserves.held == {"a": Hold(1, 600.0, 16)}
    (p,) = reserves.decide([a, b, c], WEST_FREES, 1.0)
    assert p.job == "c" and set(p.domains) == {1}
    # once `a` left the queue (or past the release it expected), the hold lapses
    (p,) = reserves.decide([b], WEST_FREES, 2.0)
    assert p.job == "b" and reserves.held == {}


def test_a_hold_spares_what_the_domain_frees_beyond_the_waiting_jobs_need():
    assert wf.spare(Hold(1, 600.0, 16), WEST_FREES) == 0
    assert wf.spare(Hold(1, 600.0, 12), WEST_FREES) == 4
    assert wf.spare(Hold(1, 300.0, 4), WEST_FREES) == 4  # nothing freed by then
    assert wf.spare(Hold(1, 600.0, 2), WEST_FREES) == 8  # no more than is free now


def test_the_variant_is_registered_in_this_process_only():
    wf.register()
    try:
        policy = make_policy(wf.UNBOUNDED, Weights())
        assert isinstance(policy, WaitsForFaster) and policy.name == wf.UNBOUNDED
        assert not policy.once and not policy.reserve_largest  # as it was measured
        policy = make_policy(wf.RESERVING, Weights())
        assert isinstance(policy, wf.ReservesFaster) and policy.name == wf.RESERVING
        assert not policy.reserve_largest
        policy = make_policy(wf.UNRESERVED, Weights())
        assert isinstance(policy, WaitsForFaster) and policy.once and not policy.reserve_largest
    finally:
        for name in (wf.UNBOUNDED, wf.RESERVING, wf.UNRESERVED):
            wf.policies.POLICIES.pop(name, None)
    for name in (wf.UNBOUNDED, wf.RESERVING, wf.UNRESERVED):
        with pytest.raises(UserError, match=name):
            make_policy(name, Weights())


def test_the_table_reads_the_changes_of_the_variants_the_run_had():
    old = "planner-waits-for-faster"  # a kept run's variant, by the name it had then
    grid = {"loads": [0.9], "policies": [wf.BASELINE, old, wf.RESERVING]}
    doc: dict = {"grid": grid, "paired": [], "summary": []}
    for policy, sign in ((old, 1), (wf.RESERVING, -1)):
        for figure, mean in zip(wf.FIGURES, (-0.033, -0.1, None, 0.001, 0.02, -0.05), strict=True):
            cell = {"load": 0.9, "policy": policy, "figure": figure}
            doc["paired"].append(
                cell
                | {"mean": mean and sign * mean, "half_width": 0.048}
                | {"significant": figure == "giant_mean_jct_s"}
            )
    waits = ["-3.3% ± 4.8%", "-10.0% ± 4.8%*", "–", "+0.1% ± 4.8%", "+2.0% ± 4.8%", "-5.0% ± 4.8%"]
    reserves = ["+3.3% ± 4.8%", "+10.0% ± 4.8%*", "–", "-0.1% ± 4.8%", "-2.0% ± 4.8%"]
    assert wf.rows_of("five", wf.cells_of(doc)) == [
        ["five", "0.9", old, *waits],
        ["five", "0.9", wf.RESERVING, *reserves, "+5.0% ± 4.8%"],
    ]


def test_the_points_pooled_average_their_changes_and_count_the_significant():
    def cells(all_jct: float, significant: bool) -> list[dict]:
        first = {"mean": all_jct, "half_width": 0.01, "significant": significant}
        none = {"mean": None, "half_width": None, "significant": False}
        return [first] + [none] * (len(wf.FIGURES) - 1)

    points = [(wf.SHIPPED, cells(m, s)) for m, s in ((-0.1, True), (-0.02, False), (0.03, True))]
    points += [(wf.RESERVING, cells(0.0, False))] * 2
    waits, reserves = wf.pooled_rows(points)
    assert waits[:3] == ["all points", "3", wf.SHIPPED]
    assert waits[3].startswith("-3.0% ± ") and waits[3].endswith("(1 lower, 1 higher)")
    assert waits[4] == "– (0 lower, 0 higher)"  # no point has a giant
    assert reserves[3] == "+0.0% ± 0.0% (0 lower, 0 higher)"


def test_a_folder_without_a_kept_comparison_is_a_clear_exit(tmp_path):
    with pytest.raises(SystemExit, match="no comparison"):
        wf.kept([tmp_path])


def test_two_draws_kept_apart_report_every_cluster(tmp_path):
    for draw in ("w0", "w1"):
        (tmp_path / draw / "drawn_00").mkdir(parents=True)
        (tmp_path / draw / "drawn_00" / "compare.json").write_text(f'{{"draw": "{draw}"}}')
    docs = wf.kept([tmp_path / "w0", tmp_path / "w1"])
    assert docs == {"drawn_00": {"draw": "w0"}, "w1/drawn_00": {"draw": "w1"}}
