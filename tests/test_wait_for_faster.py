"""The planner variant that waits for a better domain (benchmarks/wait_for_faster.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import wait_for_faster as wf
from tests.test_planner import eight_b, pair
from xdscheduler.errors import UserError
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.registry import make_policy
from xdscheduler.scenario import Weights

SINGLE = replace(ONLINE, max_domains=1)


def held(west_frees_at_s: float):
    """east: 8 of 16 free now; west: all 16 held, given back at `west_frees_at_s`."""
    view = pair().with_free({"east": 8, "west": 0})
    return view.with_releases([(west_frees_at_s, 1, 16)])


def test_the_soonest_finish_is_on_the_domain_that_frees_or_the_limit():
    job = eight_b(gpus_min=8, gpus_max=16)
    here = PlannerPolicy(Weights())._best(job, held(1e9))
    here_s = job.tokens / here.estimate.tokens_per_s
    soon, hold = wf.soonest_finish_s(job, held(600.0), Weights(), SINGLE, 0.0, here_s)
    assert 600.0 < soon < 0.6 * here_s  # twice the accelerators, ten minutes from now
    assert hold == wf.Hold(1, 600.0, 16)  # all of west, once it frees
    late = wf.soonest_finish_s(job, held(here_s), Weights(), SINGLE, 0.0, here_s)
    assert late == (here_s, None)
    # a release the job's minimum does not fit into is not looked at
    too_few = pair().with_free({"east": 8, "west": 0}).with_releases([(600.0, 1, 4)])
    assert wf.soonest_finish_s(job, too_few, Weights(), SINGLE, 0.0, here_s)[0] == here_s


def test_a_job_waits_only_where_waiting_finishes_it_sooner():
    job = eight_b(gpus_min=8, gpus_max=16)
    waits = wf.WaitsForFaster(Weights(), wf.VARIANT)
    assert waits.decide([job], held(600.0), 0.0) == []  # west frees soon: it waits
    # west frees too late: it starts on east (a fresh policy: the one above skips the job
    # until the free accelerators change)
    (p,) = wf.WaitsForFaster(Weights(), wf.VARIANT).decide([job], held(1e9), 0.0)
    assert set(p.domains) == {0}  # east
    (same,) = PlannerPolicy(Weights()).decide([job], held(600.0), 0.0)  # planner never waits
    assert set(same.domains) == {0}


WEST_FREES = pair().with_free({"east": 0, "west": 8}).with_releases([(600.0, 1, 8)])


def test_the_reserving_variant_holds_what_a_waiting_job_needs_until_it_frees():
    """west: 8 free now, 8 more in ten minutes; east all held. `a` waits for west's sixteen;
    `b` (eight, for hours) would take west's eight now, unless they are held for `a`; `c`
    (eight, for seconds) ends before the release, so it may (EASY backfill)."""
    a, b = replace(eight_b(8, 16), name="a"), replace(eight_b(8, 8), name="b")
    c = replace(eight_b(8, 8), name="c", tokens=1e6)
    waits = wf.WaitsForFaster(Weights(), wf.VARIANT)
    reserves = wf.ReservesFaster(Weights(), wf.RESERVING)
    for policy in (waits, reserves):
        assert policy.decide([a], WEST_FREES, 0.0) == []  # `a` waits for west's release
    (p,) = waits.decide([a, b], WEST_FREES, 1.0)
    assert p.job == "b" and set(p.domains) == {1}  # nothing held: `b` takes west's eight
    assert reserves.decide([a, b], WEST_FREES, 1.0) == []
    assert reserves.held == {"a": wf.Hold(1, 600.0, 16)}
    (p,) = reserves.decide([a, b, c], WEST_FREES, 1.0)
    assert p.job == "c" and set(p.domains) == {1}
    # once `a` left the queue (or past the release it expected), the hold lapses
    (p,) = reserves.decide([b], WEST_FREES, 2.0)
    assert p.job == "b" and reserves.held == {}


def test_a_hold_spares_what_the_domain_frees_beyond_the_waiting_jobs_need():
    assert wf.Hold(1, 600.0, 16).spare(WEST_FREES) == 0
    assert wf.Hold(1, 600.0, 12).spare(WEST_FREES) == 4
    assert wf.Hold(1, 300.0, 4).spare(WEST_FREES) == 4  # nothing freed by then
    assert wf.Hold(1, 600.0, 2).spare(WEST_FREES) == 8  # no more than is free now


def test_a_giant_never_waits_for_one_domain():
    giant = eight_b(gpus_min=24, gpus_max=32)  # more than a domain holds
    view = pair().with_releases([(600.0, 1, 16)])
    waits = wf.WaitsForFaster(Weights(), wf.VARIANT)
    (p,) = waits.decide([giant], view, 0.0)
    assert len(p.domains) == 2


def test_the_variant_is_registered_in_this_process_only():
    wf.register()
    try:
        policy = make_policy(wf.VARIANT, Weights())
        assert isinstance(policy, wf.WaitsForFaster) and policy.name == wf.VARIANT
        policy = make_policy(wf.RESERVING, Weights())
        assert isinstance(policy, wf.ReservesFaster) and policy.name == wf.RESERVING
    finally:
        for name in (wf.VARIANT, wf.RESERVING):
            wf.policies.POLICIES.pop(name, None)
    for name in (wf.VARIANT, wf.RESERVING):
        with pytest.raises(UserError, match=name):
            make_policy(name, Weights())


def test_the_table_reads_the_variants_changes():
    doc: dict = {"grid": {"loads": [0.9]}, "paired": [], "summary": []}
    for policy, sign in ((wf.VARIANT, 1), (wf.RESERVING, -1)):
        for figure, mean in zip(wf.FIGURES, (-0.033, -0.1, None, 0.001, 0.02, -0.05), strict=True):
            cell = {"load": 0.9, "policy": policy, "figure": figure}
            doc["paired"].append(
                cell
                | {"mean": mean and sign * mean, "half_width": 0.048}
                | {"significant": figure == "giant_mean_jct_s"}
            )
    waits = ["-3.3% ± 4.8%", "-10.0% ± 4.8%*", "–", "+0.1% ± 4.8%", "+2.0% ± 4.8%", "-5.0% ± 4.8%"]
    reserves = ["+3.3% ± 4.8%", "+10.0% ± 4.8%*", "–", "-0.1% ± 4.8%", "-2.0% ± 4.8%"]
    assert wf.rows_of(doc, "five") == [
        ["five", "0.9", wf.VARIANT, *waits],
        ["five", "0.9", wf.RESERVING, *reserves, "+5.0% ± 4.8%"],
    ]


def test_the_points_pooled_average_their_changes_and_count_the_significant():
    def cells(all_jct: float, significant: bool) -> list[dict]:
        first = {"mean": all_jct, "half_width": 0.01, "significant": significant}
        none = {"mean": None, "half_width": None, "significant": False}
        return [first] + [none] * (len(wf.FIGURES) - 1)

    points = [(wf.VARIANT, cells(m, s)) for m, s in ((-0.1, True), (-0.02, False), (0.03, True))]
    points += [(wf.RESERVING, cells(0.0, False))] * 2
    waits, reserves = wf.pooled_rows(points)
    assert waits[:3] == ["all points", "3", wf.VARIANT]
    assert waits[3].startswith("-3.0% ± ") and waits[3].endswith("(1 lower, 1 higher)")
    assert waits[4] == "– (0 lower, 0 higher)"  # no point has a giant
    assert reserves[3] == "+0.0% ± 0.0% (0 lower, 0 higher)"


def test_a_folder_without_a_kept_comparison_is_a_clear_exit(tmp_path):
    with pytest.raises(SystemExit, match="no comparison"):
        wf.kept([tmp_path])
