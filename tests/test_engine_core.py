"""The engine's core: its event queue finds what rescanning every job would, an outside decider
at its decision points runs the same study as its own policy, and snapshots carry a version."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_engine import Rescanning
from xdscheduler.faults.failure_model import FaultEvent
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.events import EventQueue
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.recovery import Faults
from xdscheduler.sim.swings import inject_swings

from .conftest import small_scenario

HOURS, SEED = 3.0, 3


def test_an_event_moves_when_rescheduled_and_goes_when_cancelled():
    q = EventQueue()
    q.schedule("a", 5.0)
    q.schedule("b", 3.0)
    q.schedule("a", 2.0)  # moved earlier: 5.0 is gone
    assert q.next_time(0.0, include_now=False) == 2.0
    q.cancel("a")
    assert q.next_time(0.0, include_now=False) == 3.0
    assert q.next_time(3.0, include_now=True) == 3.0  # at `now`, before anything happened then
    assert q.next_time(3.0, include_now=False) == math.inf  # and never again after
    q.schedule("c", math.inf)
    assert q.next_time(0.0, include_now=True) == math.inf


class Checked(Engine):
    """The engine, checking at every event that its queue agrees with a rescan of every job."""

    checked = 0

    def next_event(self) -> float:
        t = super().next_event()
        expected = Rescanning.next_event(self)
        assert t == pytest.approx(expected, rel=1e-9, abs=1e-9), (self.now, t, expected)
        self.checked += 1
        return t


def engine(cls=Engine, faults=None, swings: bool = False, policy=None) -> Engine:
    scn = small_scenario()
    dyn = study_dynamics(scn, SEED, HOURS)
    if swings:
        dyn, _ = inject_swings(dyn, SEED, 900.0, until_s=HOURS * 3600)
    inputs = StudyInputs(scn, study_jobs(scn, HOURS, SEED), dyn, HOURS, faults=faults)
    return cls(inputs, policy or PlannerPolicy(scn.weights))


def faults() -> Faults:
    events = [
        FaultEvent(1800.0, "node_crash", "east/n0", 1800.0),
        FaultEvent(2400.0, "straggler", "west/n1", 900.0, slowdown=2.0),
        FaultEvent(4000.0, "link_cut", "east|west", 600.0),
        FaultEvent(6000.0, "domain_outage", "north", 900.0),
    ]
    return Faults(events, [2.0] * len(events), {"east": 16, "west": 16, "north": 8}, 1e-3)


def test_the_event_queue_finds_what_rescanning_every_job_finds():
    eng = engine(Checked, faults(), swings=True)
    res = eng.run()
    assert eng.checked > 100 and (res.relocations or res.swings)  # switches and moves were due
    assert sum(r.end_s is not None for r in res.jobs) > 0


def test_an_outside_decider_at_decision_points_runs_the_same_study():
    own = engine(swings=True).run()
    eng = engine(swings=True)
    decider = PlannerPolicy(small_scenario().weights)
    points = 0
    while (point := eng.next_decision()) is not None:
        points += 1
        for p in decider.decide([r.spec for r in point.queue], eng.view, point.time_s):
            eng.place(next(r for r in point.queue if r.spec.name == p.job), p)
    outside = eng.results()
    assert points > 10
    assert [(r.start_s, r.end_s, r.placement) for r in outside.jobs] == [
        (r.start_s, r.end_s, r.placement) for r in own.jobs
    ]


def test_a_job_one_domain_holds_reclaims_what_a_preemptible_giant_holds():
    """The giant (more than any domain holds) spreads over both domains preemptibly; a job that
    fits one domain takes that domain back: the giant saves, waits, and pays for it on restart."""
    from xdscheduler.runtime.study import run_here
    from xdscheduler.scenario import parse_scenario
    from xdscheduler.sim.measurement import Action

    def job(name, lo, hi, tokens, at, batch=256):
        return {
            "name": name,
            "model": "llama3-8b",
            "global_batch": batch,
            "tokens": tokens,
            "arrival_s": at,
            "gpus": {"min": lo, "max": hi},
        }

    scn = parse_scenario(
        {
            "name": "pair",
            "seed": 1,
            "domains": [
                {
                    "name": n,
                    "location": {"city": n},
                    "nodes": [{"accelerator": "H100-SXM", "count": 4}],
                }
                for n in ("east", "west")
            ],
            "links": [{"a": "east", "b": "west", "bandwidth_gbps": 10, "rtt_ms": 20}],
            "jobs": [job("giant", 40, 64, 2e10, 0.0, batch=480), job("fits", 16, 16, 5e8, 600.0)],
        }
    )
    hours = 4.0
    inputs = StudyInputs(scn, scn.jobs, study_dynamics(scn, 1, hours), hours)
    res = run_here(inputs, PlannerPolicy(scn.weights))
    log = {j: [d for d in res.decisions if d.job == j] for j in ("giant", "fits")}
    first, *later = log["giant"]
    assert len(first.domains) == 2  # spread over both
    preempted = [d for d in later if d.action == Action.REQUEUE]
    assert preempted and "fits reclaims" in preempted[0].explanation
    assert log["fits"][0].time_s == pytest.approx(600.0, abs=1.0)  # it did not wait
    # It starts again on what is left (before the job that took its place is done).
    back = next(d for d in later if d.action == Action.PLACE)
    assert back.time_s < next(r.end_s for r in res.jobs if r.spec.name == "fits")
    assert back.domains.get("east", 0) + 16 <= 32  # no accelerator of east is given twice


@pytest.mark.parametrize("hours", [0.2, 0.1, 0.37])
def test_a_study_whose_drain_limit_is_off_the_sampling_grid_finishes(hours):
    """`xds run --hours 0.2` ran for ever: its drain limit (0.8 h) fell between two samples,
    no event lay at or before it, and the engine never reached it. It ends there now."""
    from xdscheduler.registry import make_policy
    from xdscheduler.scenario import load_scenario

    from .conftest import SCENARIOS

    scn = load_scenario(SCENARIOS / "five_domains.yaml")
    eng = Engine(StudyInputs.drawn(scn, hours, 7), make_policy("planner", scn.weights))
    for hour in range(1, 20):  # as the study's driver advances it, an hour at a time
        eng.run(until_s=hour * 3600)
        if eng.finished:
            break
    assert eng.finished and eng.now <= eng.end_limit_s
