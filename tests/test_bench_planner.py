"""The planner benchmark's busy cluster: a decision in which `planner-waits` does its work."""

from __future__ import annotations

from benchmarks.bench_planner import RUNNING, busy, decided, waiting_job
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.waiting import WaitsForFaster


def test_the_busy_cluster_makes_planner_waits_look_at_every_release():
    view = busy(3)
    assert [d.free_gpus for d in view.domains] == [64, 64, 64]
    assert len(view.releases) == 3 * RUNNING  # each domain frees twice within 2 h
    assert all(600 <= t <= 7200 for t, _, _ in view.releases)
    job = waiting_job()
    # the timed decision is the one that costs: planner places, planner-waits waits
    assert decided(PlannerPolicy, [job], view)[1] == "1 placed"
    assert decided(WaitsForFaster, [job], view)[1] == "all wait"
