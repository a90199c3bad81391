"""Jobs that cross the same WAN link share it: each trains at its step under the link as the
others leave it, and a policy places new jobs on the links as running ones leave them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xdscheduler.planner.search import estimate_placement, search
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job, Scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics
from xdscheduler.sim.measurement import Action
from xdscheduler.sim.wan_traffic import Traffic, hops, sent_gbps

from .test_truth import two_domains

HOURS = 2.0


def pair(names: str = "ew") -> tuple[Scenario, list[Job]]:
    """Domains of 64 H100 joined by 1 Gbit/s links, and two jobs of 32 accelerators each."""
    scn = two_domains({"min": 32, "max": 32}, names)
    one = scn.jobs[0].model_copy(update={"name": "one"})
    return scn, [one, one.model_copy(update={"name": "two"})]


def engine(names: str = "ew") -> Engine:
    scn, jobs = pair(names)
    return Engine(StudyInputs(scn, jobs, study_dynamics(scn, 1, HOURS), HOURS), None)


def spread(eng: Engine, r, over: dict[str, int], kinds=("pipeline", "data")):
    """A synchronous placement of job r over these domains' accelerators."""
    free = {n: over.get(n, 0) for n in eng.names}
    opts = SearchOptions(kinds=kinds)
    return search(r.spec, eng.view.with_free(free), eng.scn.weights, opts).best


def test_a_sender_finds_what_others_leave_and_at_least_its_fair_share():
    view = ClusterView.from_scenario(pair()[0])
    gbps, senders = np.array([[0, 0.4], [0.95, 0]]), np.array([[0, 1], [3, 0]])
    left = view.less_traffic(gbps, senders).bandwidth_gbps
    assert left[0, 1] == pytest.approx(0.6)  # what the one other sender leaves
    assert left[1, 0] == pytest.approx(0.25)  # a quarter: three others want nearly all of it
    assert view.less_traffic(np.zeros((2, 2)), np.zeros((2, 2))) is view


def test_two_jobs_on_one_link_slow_each_other_and_speed_up_when_one_ends():
    eng = engine()
    one, two = eng.runs
    p1 = spread(eng, one, {"e": 16, "w": 16})
    assert len(p1.domains) == 2 and p1.plan.diloco_h == 0  # synchronous over the link
    eng.start(one, p1, Action.PLACE)
    alone = one.rate
    assert alone == pytest.approx(one.spec.global_batch * one.spec.seq / p1.estimate.step_time_s)
    # a new job's policy sees the link as `one` leaves it
    left = eng.speeds.links_left().bandwidth_gbps
    sent = sent_gbps(one, eng.now) / 2  # each way
    assert left[0, 1] == pytest.approx(max(1 - sent, 1 / 2))
    eng.start(two, spread(eng, two, {"e": 16, "w": 16}), Action.PLACE)
    eng.speeds.reshare()
    assert one.rate < alone and two.rate < alone
    traffic = Traffic(eng.active, eng.view, eng.now)
    seen = traffic.seen_by(one, one.placed, eng.view)
    assert seen.bandwidth_gbps[0, 1] < 1
    step = estimate_placement(one.placed, one.spec, seen).step_time_s
    assert one.rate == pytest.approx(one.spec.global_batch * one.spec.seq / step)
    eng.release(two)
    eng.active.remove(two)
    eng.speeds.reshare()
    assert one.rate == pytest.approx(alone)


def test_a_ring_sends_one_way_and_a_paused_job_sends_nothing():
    eng = engine("ews")
    one = eng.runs[0]
    ring = spread(eng, one, {"e": 8, "w": 8, "s": 16}, kinds=("data",))
    assert ring.ring and len(hops(ring, eng.view)) == 3  # east→west→south→east
    eng.start(one, ring, Action.PLACE)
    eng.pause(one, eng.now + 60)
    assert sent_gbps(one, eng.now) == 0
    assert eng.speeds.links_left().bandwidth_gbps[0, 1] == 1
    one.paused_until = 0.0
    traffic = Traffic(eng.active, eng.view, eng.now)
    assert np.count_nonzero(traffic.senders) == 3
    assert traffic.gbps.sum() == pytest.approx(sent_gbps(one, eng.now))
    assert traffic.without("one")[1].sum() == 0


def test_a_study_reports_what_its_jobs_sent_over_each_link(tmp_path):
    """metrics.parquet holds each policy's traffic on the links its jobs crossed, per sample,
    and report.html sums it up per link: here synchronous jobs too large for one domain fill
    most of the 1 Gbit/s link."""
    import pandas as pd

    from xdscheduler.runtime.study import run_study

    scn = two_domains({"min": 96, "max": 96})
    job = scn.jobs[0].model_copy(update={"tokens": 2e9})
    jobs = [job.model_copy(update={"name": f"j{k}", "arrival_s": 600.0 * k}) for k in range(2)]
    run_study(
        scn.model_copy(update={"jobs": jobs}),
        ["planner"],
        1.0,
        1,
        tmp_path / "s",
        local=True,
        show_progress=False,
    )
    tidy = pd.read_parquet(tmp_path / "s" / "metrics.parquet")
    traffic = tidy.query("table == 'traffic'")
    assert set(traffic["link"]) == {"a-b"} and set(traffic["policy"]) == {"planner"}
    assert (traffic["gbps"] > 0.5).all() and (traffic["share"] <= 1).all()
    assert (traffic["jobs"] == 1).all()  # 96 of 128 accelerators: one at a time
    page = (tmp_path / "s" / "report.html").read_text()
    assert "WAN links the jobs shared" in page
    # the resource graph draws it on the link: its mean while the jobs sent, as the table
    (drawn,) = re.findall(r'data-link="a-b"[^>]*data-sent="([\d.]+)"', page)
    assert float(drawn) == pytest.approx(traffic["gbps"].mean(), abs=1e-3)
