"""Faults in a study: node crashes replaced from the backup pool, stragglers swapped without
losing work, a domain outage and a link cut recovered; all of it in the report."""

from __future__ import annotations

import json

import pytest

from xdscheduler.faults.failure_model import FaultEvent
from xdscheduler.registry import make_policy
from xdscheduler.report.writer import report_json
from xdscheduler.runtime.study import run_here, run_study
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.recovery import Faults, backup_pool

from .conftest import small_scenario

HOURS, SEED, DETECT_S = 4.0, 2, 2.0


def run_with(events: list[FaultEvent], pool_nodes: int = 2):
    scn = small_scenario()
    jobs = study_jobs(scn, HOURS, SEED)
    pool = {d.name: 8 * pool_nodes for d in scn.domains}
    faults = Faults(events, [DETECT_S] * len(events), pool, node_rate_per_hour=1e-3)
    res = run_here(
        StudyInputs(scn, jobs, study_dynamics(scn, SEED, HOURS), HOURS, faults),
        make_policy("planner", scn.weights),
    )
    return res, faults


@pytest.fixture(scope="module")
def faulty():
    events = [
        FaultEvent(3600.0, "node_crash", "east/n0", 1800.0),
        FaultEvent(4000.0, "straggler", "east/n1", 1200.0, slowdown=2.0),
        FaultEvent(5000.0, "node_crash", "west/n2", 1800.0),
        FaultEvent(7200.0, "link_cut", "east|west", 900.0),
        FaultEvent(9000.0, "domain_outage", "north", 1200.0),
    ]
    return run_with(events)


def test_every_job_hit_resumes_within_five_minutes_and_nothing_is_left(faulty):
    res, faults = faulty
    report = res.faults.model_dump()
    assert report["injected"] == 5 and report["unrecovered"] == 0
    hit = [i for i in faults.incidents if i.jobs]
    assert hit, "the faults must hit running jobs"
    assert report["recovery_s_max"] <= 300 and report["interrupted_s_max"] <= 600
    assert all(r.end_s is not None for r in res.jobs)


def test_node_faults_take_the_pool_and_stragglers_lose_no_work(faulty):
    res, faults = faulty
    crash, slow = faults.incidents[0], faults.incidents[1]
    if crash.jobs:
        assert crash.how.startswith("node replaced from east's backup pool")
        assert res.faults.lost_work_gpu_h > 0
    if slow.jobs:
        assert "checkpoint saved" in slow.how
    assert faults.spare == faults.reserve  # every node repaired by the end: pools refilled


def test_an_empty_pool_means_re_planning_not_waiting():
    res, faults = run_with([FaultEvent(3600.0, "node_crash", "east/n0", 1800.0)], pool_nodes=0)
    (crash,) = faults.incidents
    if crash.jobs:
        assert crash.how.startswith("pool empty: re-planned")
        assert any(d.action == "recover" for d in res.decisions)


def test_pools_are_sized_from_failure_rates():
    scn = small_scenario()
    small = backup_pool(scn, node_rate_per_hour=1e-5, repair_h=2)
    large = backup_pool(scn, node_rate_per_hour=1e-2, repair_h=2)
    assert all(v == 8 for v in small.values())  # at least one node each
    assert sum(large.values()) > sum(small.values())
    assert all(large[d.name] <= d.gpus / 8 for d in scn.domains)  # capped


def test_a_domain_of_fewer_than_eight_nodes_holds_none_back():
    doc = small_scenario().model_dump(mode="json", exclude_defaults=True)
    for d in doc["domains"]:
        d["nodes"][0]["count"] = 2  # 16 accelerators: a node held back would be half of it
    scn = parse_scenario(doc)
    assert backup_pool(scn, node_rate_per_hour=1e-2, repair_h=2) == {d.name: 0 for d in scn.domains}


def test_faulty_run_reports_faults(tmp_path):
    scn = small_scenario()
    summary = run_study(scn, ["planner"], 2.0, 4, tmp_path, local=True, faults=200.0)
    f = json.loads((tmp_path / "report.json").read_text())["faults"]
    assert f == report_json(summary)["faults"]
    for key in (
        "injected",
        "detected",
        "false_alarms",
        "detection_s_p50",
        "detection_s_p99",
        "idle_wait_fraction",
        "blocking_rate",
    ):
        assert key in f
    assert f["injected"] > 0 and f["detected"] <= f["injected"]
    per = f["policies"]["planner"]
    for key in ("recovery_s_p50", "recovery_s_max", "lost_work_gpu_h"):
        assert key in per


@pytest.mark.parametrize("policy", ["fifo-single-domain", "greedy-cross-domain"])
def test_a_job_asking_for_a_whole_domain_is_not_starved_by_the_backup_pool(policy):
    # "big" asks for up to 256; the largest domain has 128, of which the pool holds back a
    # node. Asked for the whole domain, FIFO would wait at the head of the queue for ever.
    scn = small_scenario(hours_of_jobs=False)
    pool = {d.name: 8 for d in scn.domains}
    res = run_here(
        StudyInputs(scn, scn.jobs, study_dynamics(scn, 1, 2.0), 2.0, Faults([], [], pool, 1e-3)),
        make_policy(policy, scn.weights),
    )
    (big,) = res.jobs
    assert big.start_s is not None, f"{policy} never placed the job"
