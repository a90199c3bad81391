"""The study engine without Ray: policies over the same jobs and the same network."""

import pytest
import yaml

from xdscheduler.planner.baselines import FifoSingleDomain, GreedyCrossDomain
from xdscheduler.planner.policies import POLICIES, PlannerPolicy
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.jobs import JobState

from .conftest import SCENARIOS, small_scenario
from .test_scenario import UNEVEN_ONLY

HOURS = 6.0


@pytest.fixture(scope="module")
def study():
    scn = small_scenario()
    jobs = study_jobs(scn, HOURS, seed=1)
    return scn, jobs, study_dynamics(scn, 1, HOURS)


@pytest.fixture(scope="module")
def outcomes(study):
    scn, jobs, dyn = study
    return {
        p.name: run_here(StudyInputs(scn, jobs, dyn, HOURS), p)
        for p in (FifoSingleDomain(), GreedyCrossDomain(), PlannerPolicy(scn.weights))
    }


def test_every_job_is_accounted_for(study, outcomes):
    _, jobs, _ = study
    for res in outcomes.values():
        assert len(res.jobs) == len(jobs)
        assert all(r.state in JobState for r in res.jobs)
        for r in res.jobs:
            if r.end_s is not None:
                assert r.arrival_s <= r.start_s <= r.end_s
                assert r.done == pytest.approx(r.tokens, rel=1e-6)


def test_accelerators_are_never_oversubscribed(outcomes):
    for res in outcomes.values():
        for s in res.samples:
            assert 0 <= s["gpus_busy"] <= s["gpus_total"]


def test_single_domain_never_crosses_the_wan(outcomes):
    res = outcomes["fifo-single-domain"]
    assert sum(r.wan_gb for r in res.jobs) == 0
    assert all(len(r.placement.domains) == 1 for r in res.jobs if r.placement)


def test_the_same_inputs_give_the_same_study(study, outcomes):
    scn, jobs, dyn = study
    again = run_here(StudyInputs(scn, jobs, dyn, HOURS), PlannerPolicy(scn.weights))
    first = outcomes["planner"]
    assert [(r.start_s, r.end_s) for r in again.jobs] == [(r.start_s, r.end_s) for r in first.jobs]


def test_every_decision_is_logged_with_its_reason(outcomes):
    res = outcomes["planner"]
    placed = [d for d in res.decisions if d.action == "place"]
    assert {d.job for d in placed} == {r.spec.name for r in res.jobs if r.start_s is not None}
    assert all(d.explanation and d.decision_ms >= 0 and d.domains for d in placed)


@pytest.mark.parametrize("name", sorted(set(POLICIES) - {"fifo-single-domain"}))
def test_a_job_only_uneven_plans_run_starts_under_the_policies_that_tune_plans(name):
    """No even plan runs it, and studies searched even plans alone: it never started. FIFO
    keeps Megatron's recipe, whose pipeline degrees divide the layers: it never does."""
    doc = yaml.safe_load((SCENARIOS / "three_domains.yaml").read_text())
    scn = parse_scenario({**doc, "workload": None, "jobs": [UNEVEN_ONLY]})
    hours = 1.0
    inputs = StudyInputs(scn, study_jobs(scn, hours, 1), study_dynamics(scn, 1, hours), hours)
    (result,) = run_here(inputs, POLICIES[name](scn.weights, {})).jobs
    assert result.start_s is not None and result.placement.total_gpus == 64
