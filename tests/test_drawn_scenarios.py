"""The drawn-scenarios benchmark: what it draws is a valid, connected cluster, and a point
counts as lost only where another policy is significantly better than the planner."""

from __future__ import annotations

import numpy as np

from benchmarks.drawn_scenarios import (
    GIANT_ROOM,
    GPUS_PER_NODE,
    OURS_CONFINED,
    draw_scenario,
    points,
    sizes,
    with_giants,
)
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.inputs import unplannable


def test_drawn_clusters_are_valid_scenarios_and_every_domain_is_reachable():
    rng = np.random.default_rng(3)
    for i in range(20):
        doc = draw_scenario(rng, i)
        view = ClusterView.from_scenario(parse_scenario(doc, "drawn"))
        linked = np.asarray(view.bandwidth_gbps) > 0
        reach = np.eye(len(view.domains), dtype=bool) | linked
        for _ in range(len(view.domains)):
            reach = reach | ((reach.astype(int) @ linked.astype(int)) > 0)
        assert reach.all(), doc["name"]


def row(policy: str, figure: str, mean: float, significant: bool) -> dict:
    return {
        "scenario": "s",
        "load": 0.9,
        "policy": policy,
        "figure": figure,
        "mean": mean,
        "half_width": 0.01,
        "significant": significant,
    }


def test_a_point_is_lost_only_to_a_significantly_better_policy_and_peers_leave_ours_out():
    doc = {
        "paired": [
            row("a", "mean_jct_s", -0.10, False),  # better, not significantly
            row("b", "mean_jct_s", +0.20, True),  # significantly worse
            row(OURS_CONFINED, "mean_jct_s", -0.02, False),
            row("a", "objective_work", +0.05, True),  # significantly better R
            row("b", "objective_work", -0.01, False),
            row(OURS_CONFINED, "objective_work", +0.08, False),
        ]
    }
    (point,) = points(doc)
    best, beaten = point["best"]["mean_jct_s"]
    assert best["policy"] == "a" and beaten is None
    best, beaten = point["best"]["objective_work"]
    assert best["policy"] == OURS_CONFINED  # the best, but within its interval
    assert beaten["policy"] == "a"  # significantly better: a loss
    assert point["peer"]["objective_work"]["policy"] == "a"
    assert not point["tie"]


def test_listed_giants_outgrow_every_domain_and_only_where_the_rest_can_hold_them():
    rng = np.random.default_rng(0)
    added, models = 0, set()
    for i in range(12):
        doc = draw_scenario(rng, i)
        held = sizes(doc)
        giants = with_giants(doc, 2, 6.0, np.random.default_rng([0, i])).get("jobs", [])
        added += bool(giants)
        for job in giants:
            assert max(held) < job["gpus"]["min"] <= job["gpus"]["max"] <= GIANT_ROOM * sum(held)
            assert job["gpus"]["min"] % GPUS_PER_NODE == job["gpus"]["max"] % GPUS_PER_NODE == 0
            assert 0 <= job["arrival_s"] < 6.0 * 3600 / 2
            models.add(job["model"])
        if giants:  # every one a plan can run on the whole cluster
            scn = parse_scenario({**doc, "jobs": giants}, "drawn")
            assert not unplannable(scn, scn.jobs)
        else:
            assert max(held) + GPUS_PER_NODE > GIANT_ROOM * sum(held)
    assert 0 < added < 12  # seed 0 draws both kinds
    assert len(models) >= 3  # not one kind of giant
