"""Re-plans on load swings and RTT rises: make-before-break against numbers worked by hand, the
restart fallback, and seeded injection that reproduces."""

from dataclasses import replace

import numpy as np
import pytest

from xdscheduler import catalog
from xdscheduler.costmodel.plan import Plan
from xdscheduler.network.dynamics import Dynamics, base_matrices
from xdscheduler.planner.policies import Placement
from xdscheduler.planner.space import SINGLE
from xdscheduler.runtime.study import run_here, study_dynamics, study_jobs
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim import reconfig
from xdscheduler.sim.domain import LocalDomains
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.reconfig import RESTART, RESTART_S
from xdscheduler.sim.swings import inject_swings

from .conftest import small_scenario

SWING_S = 600.0  # the load of `east` rises by half here


def two_domains():
    """east and west (64 H100 each, 400 Gbit/s NICs), one 10 Gbit/s link, one long 8B job."""
    return parse_scenario({
        "name": "two", "domains": [
            {"name": n, "location": {"city": n}, "intra_domain_gbps": 400,
             "nodes": [{"accelerator": "H100-SXM", "count": 8}]} for n in ("east", "west")],
        "links": [{"a": "east", "b": "west", "bandwidth_gbps": 10, "rtt_ms": 20}],
        "jobs": [{"name": "j", "model": "llama3-8b", "global_batch": 256, "tokens": 1e12,
                  "gpus": {"min": 8, "max": 32}}]})


def plan_on(domain: int, gpus: int) -> Placement:
    return Placement("j", SINGLE, (domain,), (gpus,), Plan(dp=gpus))


class Scripted:
    """Places the job on 16 accelerators of east; once east's load has swung, re-plans it to
    `then` (None before: the swing must be what fires the move)."""

    name = "scripted"

    def __init__(self, then: Placement):
        self.then = then

    def decide(self, queue, view, now_s):
        return [plan_on(0, 16)] if queue else []

    def replan(self, job, current, view):
        return self.then if view.domains[0].reserved_gpus > 2 else None


def swing_dynamics(scn, hours: float = 2.0) -> Dynamics:
    bw, rtt, _ = base_matrices(scn)
    steps = int(hours * 3600 / 300) + 1
    load = np.full((steps, 2), 2 / 64)  # 2 of east's 64 accelerators held by other tenants
    load[int(SWING_S // 300):, 0] = 3 / 64  # 3 of 64: a 50% swing
    return Dynamics(np.arange(steps) * 300.0, np.repeat(bw[None], steps, 0),
                    np.repeat(rtt[None], steps, 0), load, 300.0)


def run(then: Placement, replan: str = reconfig.MAKE_BEFORE_BREAK):
    scn = two_domains()
    dyn = swing_dynamics(scn)
    eng = Engine(scn, scn.jobs, Scripted(then), dyn, LocalDomains(scn.domains, dyn), 3600.0,
                 replan=replan)
    eng.run(until_s=1800.0)
    return eng


def test_a_load_swing_grows_the_job_in_place_with_the_dip_worked_by_hand():
    eng = run(plan_on(0, 32))
    (s,) = [s for s in eng.swings if s.how != "kept"]
    assert (s.cause, s.how, s.start_s, s.wan_gb) == ("load", "make-before-break", SWING_S, 0.0)
    # Each accelerator sends its old slice: 8.03e9 params × (2 B + 12 B / 16 DP ranks), at
    # 400 Gbit/s × 0.8 bus efficiency = 40 GB/s; one domain, so no WAN barrier.
    params = catalog.model("llama3-8b").params
    pause = params * 2.75 / 40e9
    assert s.prepare_s == 5.0 and s.pause_s == pytest.approx(pause)
    assert pause == pytest.approx(0.552, abs=1e-3)
    # Training goes on for the 5 s of preparation, stops for the pause, and is then faster.
    assert s.swing_rate == s.reference and s.new_rate > s.reference
    assert s.recovery_s == pytest.approx(5.0 + pause)
    assert s.tokens == pytest.approx(5.0 * s.reference)
    assert s.dip == pytest.approx(pause / (5.0 + pause)) and s.dip == pytest.approx(0.0994, 1e-2)
    assert s.swing_dip == 0.0  # a load swing leaves the job's own speed as it was
    (r,) = eng.runs
    assert r.placement.gpus == (32,) and eng.domains.states[0].allocations == {"j": 32}


def test_the_old_restart_stops_the_job_for_300_s():
    eng = run(plan_on(0, 32), RESTART)
    (s,) = [s for s in eng.swings if s.how != "kept"]
    assert (s.cause, s.how, s.recovery_s, s.dip) == ("load", RESTART, RESTART_S, 1.0)


def test_a_move_across_the_wan_pauses_for_the_state_sent():
    eng = run(plan_on(1, 32))
    (s,) = [s for s in eng.swings if s.how != "kept"]
    state_gb = catalog.model("llama3-8b").params * 14 / 1e9
    assert s.wan_gb == pytest.approx(state_gb)
    # One copy of the state over 10 Gbit/s at 90% goodput (one domain after: no WAN barrier).
    assert s.pause_s == pytest.approx(state_gb / (10 / 8 * 0.9))
    assert s.dip == pytest.approx(s.pause_s / (5.0 + s.pause_s))


def test_no_room_alongside_falls_back_to_checkpoint_and_restart(monkeypatch):
    real = reconfig.switch_cost
    monkeypatch.setattr(reconfig, "switch_cost",
                        lambda *a: replace(real(*a), alongside=False))
    eng = run(plan_on(0, 32))
    (s,) = [s for s in eng.swings if s.how != "kept"]
    assert (s.how, s.prepare_s, s.dip) == ("fallback", 0.0, 1.0)
    assert s.recovery_s == pytest.approx(RESTART_S + real(
        plan_on(0, 16), plan_on(0, 32), catalog.model("llama3-8b").params, eng.view).pause_s)
    assert reconfig.summary(eng.swings)["fallbacks_to_restart"] == 1


def test_a_job_that_finishes_while_preparing_gives_the_accelerators_back():
    scn = two_domains()
    scn.jobs[0] = scn.jobs[0].model_copy(update={"tokens": 1.0})
    dyn = swing_dynamics(scn)
    eng = Engine(scn, scn.jobs, Scripted(plan_on(0, 32)), dyn, LocalDomains(scn.domains, dyn),
                 3600.0)
    eng.run()
    assert all(not s.allocations for s in eng.domains.states)


def test_injected_swings_reproduce_with_their_seed():
    scn = small_scenario()
    dyn = study_dynamics(scn, 1, 3.0)
    a, sa = inject_swings(dyn, 4, until_s=3 * 3600)
    b, sb = inject_swings(dyn, 4, until_s=3 * 3600)
    _, sc = inject_swings(dyn, 5, until_s=3 * 3600)
    assert sa == sb and sa != sc and {s["kind"] for s in sa} <= {"load", "rtt"}
    assert np.array_equal(a.rtt_ms, b.rtt_ms) and np.array_equal(a.background_load,
                                                                 b.background_load)
    for s in sa:  # each one is at least the size the triggers react to
        assert abs(s["factor"] - 1) >= 0.2 if s["kind"] == "load" else s["factor"] >= 1.5
    jobs = study_jobs(scn, 3.0, 1)
    from xdscheduler.planner.policies import PlannerPolicy

    runs = [run_here(scn, jobs, PlannerPolicy(scn.weights), a, 3.0) for _ in range(2)]
    assert [(s.job, s.cause, s.start_s, s.end_s) for s in runs[0].swings] == [
        (s.job, s.cause, s.start_s, s.end_s) for s in runs[1].swings]
