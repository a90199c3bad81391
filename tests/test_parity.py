"""Studies give the figures they gave when the goldens were made (tests/golden): a change to the
engine, the policies or the metrics that moves a figure must say so by making them again
(`python -m tests.golden_make`). The first goldens were made by the commit before the engine
was split into a core and parts, and proved the split changed nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.report_parity import differences
from xdscheduler.faults.failure_model import FaultEvent
from xdscheduler.registry import make_policy, names
from xdscheduler.report.writer import report_json
from xdscheduler.runtime.study import run_here, run_study
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.reconfig import Switch
from xdscheduler.sim.recovery import Faults
from xdscheduler.sim.swings import inject_swings

from .conftest import small_scenario

GOLDEN = Path(__file__).parent / "golden"

STUDIES = {  # golden file -> (scenario, hours, seed, fault scale)
    "study_three_domains_faults200_seed4_3h.report.json": (small_scenario, 3.0, 4, 200.0),
    "study_five_domains_seed7_4h.report.json": (
        lambda: load_scenario(default_scenario_path()),
        4.0,
        7,
        None,
    ),
    "study_five_domains_faults60_seed5_3h.report.json": (
        lambda: load_scenario(default_scenario_path()),
        3.0,
        5,
        60.0,
    ),
}


def study_report(golden: str, out: Path) -> dict:
    scenario, hours, seed, faults = STUDIES[golden]
    report = run_study(
        scenario(),
        names(),
        hours,
        seed,
        out,
        local=True,
        show_progress=False,
        faults=faults,
        truth=False,
    )  # the model as the truth, as they were made
    return report_json(report)


def same_report(tmp_path: Path, golden: str) -> None:
    expected = json.loads((GOLDEN / golden).read_text())
    assert not differences(expected, study_report(golden, tmp_path))


def test_a_faulty_study_reports_what_it_did_before(tmp_path):
    same_report(tmp_path, "study_three_domains_faults200_seed4_3h.report.json")


@pytest.mark.slow
def test_the_default_study_reports_what_it_did_before(tmp_path):
    same_report(tmp_path, "study_five_domains_seed7_4h.report.json")


@pytest.mark.slow
def test_a_study_at_sixty_times_the_failure_rates_reports_what_it_did_before(tmp_path):
    same_report(tmp_path, "study_five_domains_faults60_seed5_3h.report.json")


def digest(res) -> dict:
    """What the engine did: every job's life, the decision log, swings and relocations."""
    return {
        "jobs": [
            [r.spec.name, r.start_s, r.end_s, r.done, r.replans, r.requeues, r.wan_gb, r.lost_gpu_s]
            for r in res.jobs
        ],
        "decisions": [[d.time_s, d.job, str(d.action)] for d in res.decisions],
        "swings": [[s.job, s.cause, str(s.how), s.start_s, s.end_s] for s in res.swings],
        "relocations": [
            [m.job, str(m.how), str(m.phase), m.switch_s, m.lost_s] for m in res.relocations
        ],
        "busy_gpu_s": res.busy_gpu_s,
        "end_s": res.end_s,
        "down": res.down,
    }


FAULTS = [
    FaultEvent(3600.0, "node_crash", "east/n0", 1800.0),
    FaultEvent(4000.0, "straggler", "east/n1", 1200.0, slowdown=2.0),
    FaultEvent(5000.0, "node_crash", "west/n2", 1800.0),
    FaultEvent(7200.0, "link_cut", "east|west", 900.0),
    FaultEvent(9000.0, "domain_outage", "north", 1200.0),
    FaultEvent(9500.0, "domain_outage", "east", 600.0),
]


def faults_digest() -> dict:
    scn = small_scenario()
    got = {}
    for name in ("planner", "greedy-cross-domain"):
        faults = Faults(FAULTS, [2.0] * len(FAULTS), {d.name: 16 for d in scn.domains}, 1e-3)
        res = run_here(
            StudyInputs.drawn(scn, 4.0, 2, faults=faults),
            make_policy(name, scn.weights),
        )
        got[name] = {**digest(res), "incidents": [[i.how, i.jobs] for i in faults.incidents]}
    return json.loads(json.dumps(got))


def swings_digest() -> dict:
    scn = load_scenario(default_scenario_path())
    dyn, _ = inject_swings(study_dynamics(scn, 8, 4.0), 8, 1800.0, until_s=4 * 3600)
    return json.loads(
        json.dumps(
            {
                str(mode): digest(
                    run_here(
                        StudyInputs(scn, study_jobs(scn, 4.0, 8), dyn, 4.0),
                        make_policy("planner", scn.weights),
                        replan=mode,
                    )
                )
                for mode in (Switch.MAKE_BEFORE_BREAK, Switch.RESTART)
            }
        )
    )


ENGINE = {
    "engine_faults_small_seed2_4h.json": faults_digest,
    "engine_swings_five_domains_seed8_4h.json": swings_digest,
}


def test_hand_injected_faults_play_out_as_before():
    expected = json.loads((GOLDEN / "engine_faults_small_seed2_4h.json").read_text())
    assert not differences(expected, faults_digest())


def test_swings_and_relocations_play_out_as_before():
    expected = json.loads((GOLDEN / "engine_swings_five_domains_seed8_4h.json").read_text())
    assert not differences(expected, swings_digest())


def test_a_difference_is_found():
    """The comparison can fail: a changed figure, and a key that appeared, are both seen."""
    assert differences({"a": 1.0, "b": [1, 2]}, {"a": 1.0 + 1e-6, "b": [1, 2]}) == [
        ".a: 1.0 then, 1.000001 now"
    ]
    assert differences({"a": 1.0}, {"a": 1.0, "c": 3}) == [".c: None then, 3 now"]
    assert not differences({"cross_domain_cost": 2.0, "wall_s": 1}, {"cross_domain_cost_usd": 2.0})
