"""Metrics that reward work, worked by hand: useful utilisation, slowdown, accelerator-hours per
job, offered load; an unfinished job counts with the time it has taken so far."""

from __future__ import annotations

import pytest

from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.registry import make_policy
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics
from xdscheduler.sim.metrics import (
    free_share,
    ideal_rates,
    offered_load,
    peak_flop_per_s,
    summarise,
)
from xdscheduler.workload import MFU

HOURS = 2.0


def one_domain(tokens: float):
    return parse_scenario(
        {
            "name": "one",
            "domains": [
                {
                    "name": "east",
                    "location": {"city": "east"},
                    "nodes": [{"accelerator": "H100-SXM", "count": 4}],
                }
            ],
            "jobs": [
                {
                    "name": "j",
                    "model": "llama3-8b",
                    "global_batch": 256,
                    "tokens": tokens,
                    "gpus": {"min": 8, "max": 16},
                }
            ],
        }
    )


def study(tokens: float, hours: float = HOURS):
    scn = one_domain(tokens)
    view = ClusterView.from_scenario(scn)
    res = run_here(
        StudyInputs(scn, scn.jobs, study_dynamics(scn, 1, hours), hours),
        make_policy("planner", scn.weights),
    )
    spec = JobSpec.of(scn.jobs[0])
    return (
        res,
        summarise(
            res, scn.weights, ideal_rates([spec], view), view, hours * 3600, free_share_gpus=32.0
        ),
        spec,
    )


def test_a_finished_job_counts_its_model_flops_its_slowdown_and_its_accelerator_hours():
    res, m, spec = study(2e8)
    (r,) = res.jobs
    assert r.end_s is not None and r.end_s < HOURS * 3600
    peak = 32 * 989.4e12 * HOURS * 3600  # every accelerator of the cluster
    assert m.useful_utilization == pytest.approx(r.tokens * spec.flops_per_token / peak)
    assert m.gpu_h_per_job == pytest.approx(r.placement.total_gpus * (r.end_s - r.start_s) / 3600)
    ideal_s = r.tokens / ideal_rates([spec], ClusterView.from_scenario(one_domain(2e8)))["j"]
    assert m.mean_slowdown == pytest.approx(r.end_s / ideal_s)  # arrived at 0
    assert m.mean_efficiency == pytest.approx(min(1.0, ideal_s / r.end_s))


def test_work_after_the_horizon_is_not_useful_utilisation_and_unfinished_jobs_still_count():
    res, m, spec = study(4e8, hours=0.5)  # runs past the half hour of arrivals
    (r,) = res.jobs
    rate = r.tokens / (r.end_s - r.start_s) if r.end_s else None
    assert rate is not None  # it finished while the queue drained
    window = min(r.end_s, 1800.0) - r.start_s
    assert m.useful_utilization == pytest.approx(
        rate * window * spec.flops_per_token / (32 * 989.4e12 * 1800), rel=1e-6
    )
    res, short, _ = study(1e10, hours=0.5)  # does not finish within 4x the arrival window
    (r,) = res.jobs
    ideal = ideal_rates([spec], ClusterView.from_scenario(one_domain(1e10)))["j"]
    assert short.jobs_unfinished == 1
    assert short.mean_jct_s == pytest.approx(4 * 1800 + (r.tokens - r.done) / ideal)
    assert short.mean_slowdown > 1 and short.mean_efficiency < 1


def test_offered_load_is_the_work_asked_at_the_generators_mfu_over_what_the_cluster_has():
    scn = one_domain(1.0)
    view = ClusterView.from_scenario(scn)
    spec = JobSpec.of(scn.jobs[0])
    one_hour = MFU * peak_flop_per_s(view) * 3600 / (6 * spec.arch.params)  # tokens
    assert offered_load(
        [spec.__class__(**{**spec.__dict__, "tokens": one_hour})], view, 3600.0
    ) == pytest.approx(1.0)


def test_starved_jobs_are_counted_and_weigh_their_work_in_r():
    """A 16-32 accelerator job takes 16 of the domain's 32 (~10% held by other tenants: 28
    free; its plans take powers of two) and trains past the study's end; a 16-accelerator job
    arriving a minute later never starts. The first asks for more than the domain's free
    share: a giant."""
    scn = parse_scenario(
        {
            "name": "one",
            "weights": {"efficiency": 1.0, "utilization": 0.3, "cost": 0.3},
            "domains": [
                {
                    "name": "east",
                    "location": {"city": "east"},
                    "nodes": [{"accelerator": "H100-SXM", "count": 4}],
                }
            ],
            "jobs": [
                {
                    "name": "long",
                    "model": "llama3-8b",
                    "global_batch": 256,
                    "tokens": 4e10,
                    "gpus": {"min": 16, "max": 32},
                },
                {
                    "name": "short",
                    "model": "llama3-8b",
                    "global_batch": 256,
                    "tokens": 1e8,
                    "arrival_s": 60,
                    "gpus": {"min": 16, "max": 16},
                },
            ],
        }
    )
    view, hours = ClusterView.from_scenario(scn), 0.5
    dyn = study_dynamics(scn, 1, hours)
    res = run_here(
        StudyInputs(scn, scn.jobs, dyn, hours), make_policy("planner-single-domain", scn.weights)
    )
    share = free_share(dyn, view, hours * 3600)
    assert 28 < share < 30  # 32 less the other tenants' ~10%
    specs = [JobSpec.of(j) for j in scn.jobs]
    ideal = ideal_rates(specs, view)
    m = summarise(res, scn.weights, ideal, view, hours * 3600, share)
    long, short = res.jobs
    assert long.start_s is not None and long.end_s is None and short.start_s is None
    assert (m.jobs_unfinished, m.jobs_never_started) == (2, 1)
    giant, fit = m.classes["giant"], m.classes["fit"]
    assert (giant.jobs, giant.unfinished, giant.never_started) == (1, 1, 0)
    assert (fit.jobs, fit.unfinished, fit.never_started, fit.crossed) == (1, 1, 1, 0)
    work = [s.work_flops for s in specs]
    assert giant.gpu_time_share == pytest.approx(work[0] / sum(work))
    # each job's efficiency as summarised: its ideal time over the least JCT it could reach
    jct = [res.end_s - r.arrival_s + (r.tokens - r.done) / ideal[r.name] for r in res.jobs]
    eff = [min(1.0, r.tokens / ideal[r.name] / t) for r, t in zip(res.jobs, jct, strict=True)]
    assert fit.mean_jct_s == pytest.approx(jct[1]) and giant.mean_jct_s == pytest.approx(jct[0])
    assert m.mean_efficiency == pytest.approx(sum(eff) / 2)
    assert m.work_efficiency == pytest.approx((eff[0] * work[0] + eff[1] * work[1]) / sum(work))
    # R (work) and R (per job) differ only in their efficiency term
    assert m.objective - m.objective_work == pytest.approx(m.mean_efficiency - m.work_efficiency)
    assert m.free_share_gpus == share


def test_a_job_across_the_pools_of_one_data_centre_did_not_cross_the_wan():
    """32 H100 and 32 A100 in one data centre, a job on 40 of them: it runs over both pools, yet
    sends nothing over the WAN and is not counted among the jobs that ran across (before: 1
    across and some GB of WAN traffic for a job that never left the building)."""
    scn = one_domain(2e8)
    east = scn.model_dump()["domains"][0]
    east["nodes"] = [
        {"accelerator": "H100-SXM", "count": 4},
        {"accelerator": "A100-80GB", "count": 4},
    ]
    scn = parse_scenario(
        {
            "name": "mixed",
            "domains": [east],
            "jobs": [{**scn.jobs[0].model_dump(), "gpus": {"min": 40, "max": 40}}],
        }
    )
    view = ClusterView.from_scenario(scn)
    dyn = study_dynamics(scn, 1, HOURS)
    res = run_here(StudyInputs(scn, scn.jobs, dyn, HOURS), make_policy("planner", scn.weights))
    (r,) = res.jobs
    assert r.start_s is not None and len(r.placement.domains) == 2
    # the data centre as written offers both pools: such a job is no giant (before: 32 less
    # the other tenants', the larger pool's)
    assert 56 < free_share(dyn, view, HOURS * 3600) <= 64
    ideal = ideal_rates([JobSpec.of(scn.jobs[0])], view)
    m = summarise(res, scn.weights, ideal, view, HOURS * 3600, free_share_gpus=32.0)
    assert m.cross_domain_gb == 0 and m.cross_domain_cost_usd == 0
    assert m.classes["giant"].crossed == 0
