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
    soon = wf.soonest_finish_s(job, held(600.0), Weights(), SINGLE, 0.0, here_s)
    assert 600.0 < soon < 0.6 * here_s  # twice the accelerators, ten minutes from now
    assert wf.soonest_finish_s(job, held(here_s), Weights(), SINGLE, 0.0, here_s) == here_s
    # a release the job's minimum does not fit into is not looked at
    too_few = pair().with_free({"east": 8, "west": 0}).with_releases([(600.0, 1, 4)])
    assert wf.soonest_finish_s(job, too_few, Weights(), SINGLE, 0.0, here_s) == here_s


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
    finally:
        wf.policies.POLICIES.pop(wf.VARIANT, None)
    with pytest.raises(UserError, match=wf.VARIANT):
        make_policy(wf.VARIANT, Weights())


def test_the_table_reads_the_variants_changes():
    doc: dict = {"grid": {"loads": [0.9]}, "paired": [], "summary": []}
    for figure, mean in zip(wf.FIGURES, (-0.033, -0.1, None, 0.001), strict=True):
        cell = {"load": 0.9, "policy": wf.VARIANT, "figure": figure, "mean": mean}
        doc["paired"].append(
            cell | {"half_width": 0.048, "significant": figure == "giant_mean_jct_s"}
        )
    assert wf.rows_of(doc, "five") == [
        ["five", "0.9", "-3.3% ± 4.8%", "-10.0% ± 4.8%*", "–", "+0.1% ± 4.8%"]
    ]
