"""The engine's core: its event queue finds what rescanning every job would, an outside decider
at its decision points runs the same study as its own policy, and snapshots carry a version."""

from __future__ import annotations

import math
import pickle

import pytest

from benchmarks.bench_engine import Rescanning
from xdscheduler.errors import UserError
from xdscheduler.faults.failure_model import FaultEvent
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.sim.domain import LocalDomains
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.events import EventQueue
from xdscheduler.sim.inputs import study_dynamics, study_jobs
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
    return cls(scn, study_jobs(scn, HOURS, SEED), policy or PlannerPolicy(scn.weights), dyn,
               LocalDomains(scn.domains, dyn), HOURS * 3600, faults=faults)


def faults() -> Faults:
    events = [FaultEvent(1800.0, "node_crash", "east/n0", 1800.0),
              FaultEvent(2400.0, "straggler", "west/n1", 900.0, slowdown=2.0),
              FaultEvent(4000.0, "link_cut", "east|west", 600.0),
              FaultEvent(6000.0, "domain_outage", "north", 900.0)]
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
        (r.start_s, r.end_s, r.placement) for r in own.jobs]


def test_a_snapshot_resumes_and_one_of_another_version_is_refused():
    first = engine()
    first.run(until_s=3600)
    blob = first.snapshot()
    again = engine()
    again.restore(blob)
    assert again.now == first.now and again.decisions == first.decisions
    old = pickle.loads(blob)
    old["version"] = 1
    with pytest.raises(UserError, match="version 1; this xdscheduler reads version 2"):
        engine().restore(pickle.dumps(old))
    with pytest.raises(UserError, match="version None"):
        engine().restore(pickle.dumps({"runs": []}))  # a snapshot from before versions
