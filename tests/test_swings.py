"""Re-plans on load swings and RTT rises: make-before-break against numbers worked by hand, the
restart fallback, and seeded injection that reproduces."""

from dataclasses import replace

import numpy as np
import pytest

from xdscheduler import catalog
from xdscheduler.costmodel.plan import Plan
from xdscheduler.network.dynamics import Dynamics, base_matrices
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.space import SINGLE
from xdscheduler.planner.view import ClusterView
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim import reconfig, replanning
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.reconfig import RESTART_S, Switch
from xdscheduler.sim.swings import inject_swings

from .conftest import small_scenario

SWING_S = 600.0  # the load of `east` rises by half here


def two_domains():
    """east and west (64 H100 each, 400 Gbit/s NICs), one 10 Gbit/s link, one long 8B job."""
    return parse_scenario(
        {
            "name": "two",
            "domains": [
                {
                    "name": n,
                    "location": {"city": n},
                    "intra_domain_gbps": 400,
                    "nodes": [{"accelerator": "H100-SXM", "count": 8}],
                }
                for n in ("east", "west")
            ],
            "links": [{"a": "east", "b": "west", "bandwidth_gbps": 10, "rtt_ms": 20}],
            "jobs": [
                {
                    "name": "j",
                    "model": "llama3-8b",
                    "global_batch": 256,
                    "tokens": 1e12,
                    "gpus": {"min": 8, "max": 32},
                }
            ],
        }
    )


def plan_on(domain: int, gpus: int) -> Placement:
    return Placement("j", SINGLE, (domain,), (gpus,), Plan(dp=gpus))


class Scripted:
    """Places the job on 16 accelerators of east; once east's load has swung, re-plans it to
    `then` (None before: the swing must be what fires the move)."""

    name = "scripted"

    def __init__(self, then: Placement, start: Placement | None = None):
        self.then, self.start = then, start or plan_on(0, 16)

    def decide(self, queue, view, now_s):
        return [self.start] if queue else []

    def replan(self, job, current, view):
        return self.then if view.domains[0].reserved_gpus > 2 else None


def swing_dynamics(scn, hours: float = 2.0) -> Dynamics:
    bw, rtt, _ = base_matrices(scn)
    steps = int(hours * 3600 / 300) + 1
    load = np.full((steps, 2), 2 / 64)  # 2 of east's 64 accelerators held by other tenants
    load[int(SWING_S // 300) :, 0] = 3 / 64  # 3 of 64: a 50% swing
    return Dynamics(
        np.arange(steps) * 300.0,
        np.repeat(bw[None], steps, 0),
        np.repeat(rtt[None], steps, 0),
        load,
        300.0,
    )


def engine(scn, policy: Scripted, jobs=None, replan: Switch = Switch.MAKE_BEFORE_BREAK):
    """An engine over the scenario's jobs (or `jobs`) under the swing of `swing_dynamics`."""
    inputs = StudyInputs(scn, scn.jobs if jobs is None else jobs, swing_dynamics(scn), 1.0)
    return Engine(inputs, policy, replan=replan)


def run(
    then: Placement,
    replan: Switch = Switch.MAKE_BEFORE_BREAK,
    until_s: float = 1800.0,
    start: Placement | None = None,
):
    eng = engine(two_domains(), Scripted(then, start), replan=replan)
    eng.run(until_s=until_s)
    return eng


H100_NODE_NICS = 8 * 400 / 8 * 0.8 * 1e9  # a node's 8 NICs at 400 Gbit/s, 80% bus bandwidth
NVLINK = 450 * 0.8 * 1e9  # H100 NVLink per direction, 80% bus bandwidth


def test_a_load_swing_grows_the_job_in_place_with_the_dip_worked_by_hand():
    eng = run(plan_on(0, 32))
    (s,) = [s for s in eng.results().swings if s.how != "kept"]
    assert (s.cause, s.how, s.start_s, s.wan_gb) == ("load", "make-before-break", SWING_S, 0.0)
    # Only the bf16 weights block: each node holds a whole copy (DP 16 -> 32, TP = PP = 1),
    # 2 B × 8.03e9 params, striped over its 8 NICs (8 × 40 GB/s), then each GPU's copy over
    # NVLink (360 GB/s). The optimizer shards (12 B × P / 16 = 6.0 GB each, 0.15 s over a
    # GPU's own NIC) stream during the first step, whose NICs are free for longer.
    params = catalog.model("llama3-8b").params
    pause = 2 * params / H100_NODE_NICS + 2 * params / NVLINK
    assert pause == pytest.approx(0.0948, abs=1e-4)
    assert s.prepare_s == 5.0 and s.pause_s == pytest.approx(pause)
    r = eng.runs[0]
    assert eng.speeds.of(r, plan_on(0, 32))[1] > 12 * params / 16 / 40e9  # the window
    # Training goes on for the 5 s of preparation, stops for the pause, and is then faster.
    assert s.swing_rate == s.reference and s.new_rate > s.reference
    assert s.recovery_s == pytest.approx(5.0 + pause)
    assert s.tokens == pytest.approx(5.0 * s.reference)
    assert s.dip == pytest.approx(pause / (5.0 + pause)) and s.dip == pytest.approx(0.0186, 1e-2)
    assert s.swing_dip == 0.0  # a load swing leaves the job's own speed as it was
    assert s.adjustment_dip == pytest.approx(s.dip)  # so all of the dip is the adjustment's
    assert r.placement.gpus == (32,) and eng.domains.states[0].allocations == {"j": 32}
    assert not eng.results().relocations


def test_the_adjustments_own_dip_leaves_out_the_swings_slowdown():
    # 100 tokens/s before the swing, 80 under it: 5 s of preparation at 80, a 0.5 s pause.
    s = reconfig.Swing(
        "j",
        "rtt",
        Switch.MAKE_BEFORE_BREAK,
        0.0,
        100.0,
        80.0,
        120.0,
        0.0,
        5.0,
        0.5,
        end_s=5.5,
        tokens=400.0,
    )
    assert s.dip == pytest.approx(1 - 400 / 550)  # against the rate before the swing
    assert s.swing_dip == pytest.approx(0.2)
    assert s.adjustment_dip == pytest.approx(1 - 400 / 440)  # against keeping the plan
    stats = reconfig.adjustment_stats([s])
    assert stats.adjustment_dip_max == pytest.approx(0.5 / 5.5)
    assert stats.swing_dip_max == pytest.approx(0.2)


def test_the_old_restart_stops_the_job_for_300_s():
    eng = run(plan_on(0, 32), Switch.RESTART)
    (s,) = [s for s in eng.results().swings if s.how != "kept"]
    assert (s.cause, s.how, s.recovery_s, s.dip) == ("load", Switch.RESTART, RESTART_S, 1.0)


def test_optimizer_state_not_in_by_the_optimizer_step_adds_to_the_pause():
    view = engine(two_domains(), Scripted(plan_on(0, 16)), jobs=[]).view
    params = catalog.model("llama3-8b").params
    weights = 2 * params / H100_NODE_NICS + 2 * params / NVLINK
    optimizer = 12 * params / 16 / 40e9  # the old, larger shard over one NIC
    for window, stall in ((0.0, optimizer), (0.1, optimizer - 0.1), (1.0, 0.0)):
        cost = reconfig.switch_cost(plan_on(0, 16), plan_on(0, 32), params, view, window)
        assert cost.pause_s == pytest.approx(weights + stall)
        assert cost.wan_gb == 0.0 and cost.wan_cost == 0.0


def test_what_one_node_holds_follows_megatrons_rank_order():
    def share(**plan):
        return reconfig.node_share(Placement("j", SINGLE, (0,), (64,), Plan(**plan)), 8)

    assert share(dp=2, tp=4, pp=8) == 1 / 8  # one stage, both DP copies of its TP shards
    assert share(dp=1, tp=8, pp=8) == 1 / 8  # one stage's TP group, no copies
    assert share(dp=1, tp=2, pp=32) == 4 / 32  # four stages of TP 2
    assert share(dp=64, tp=1, pp=1) == 1.0  # eight whole replicas
    assert share(dp=64, tp=1, pp=1, zero=3) == 8 / 64  # ZeRO-3: eight distinct shards


def test_the_charges_of_moving_worked_by_hand():
    # 1,000 tokens left at 1 tok/s on 10 accelerators; the move: 20 accelerators at 4 tok/s.
    finish, idle = reconfig.switch_charge(1000, 1.0, 4.0, 10, 20, 5.0, 100.0)
    assert (finish, idle) == (5 + 100 + 995 / 4, 20 * 5 + 30 * 100)
    assert reconfig.charge_s(finish, idle, 20) == finish + 3100 / 20
    # through the checkpoint written in 60 s: 90 s of copy, 30 s of load; the 120 s the old
    # plan trains after the checkpoint are redone, and held against the move
    finish, idle = reconfig.checkpoint_charge(1000, 1.0, 4.0, 10, 20, 60.0, 90.0, 30.0)
    assert (finish, idle) == (60 + 90 + 30 + 940 / 4, 10 * 120 + 20 * 30)
    # its accelerator-seconds: 10 held for the 180 s to the switch, 20 loading for 30 s of
    # them, then 20 to the end
    assert reconfig.gpu_seconds(finish, 180.0, 10, 20, 30.0, 20) == 1800 + 600 + 20 * 235


def test_a_move_to_more_accelerators_no_faster_each_is_not_made():
    # west's 32 accelerators train no faster each than east's 16: the job would finish sooner,
    # but take more accelerator-seconds (the pause's idle ones) than staying
    eng = run(plan_on(1, 32))
    assert not eng.results().relocations and eng.runs[0].placement == plan_on(0, 16)


# TP 8 × PP 2 on 16 of east's accelerators trains at 2/3 of the per-accelerator rate of DP on
# west: moving there pays the job and takes fewer accelerator-seconds to finish.
SLOW = Placement("j", SINGLE, (0,), (16,), Plan(dp=1, tp=8, pp=2))


def test_a_move_across_the_wan_is_a_relocation_charged_for_its_pause_and_idle_accelerators():
    eng = run(plan_on(1, 32), start=SLOW)
    (s,) = [s for s in eng.results().swings if s.cause == "load"]
    assert s.how == "kept"  # no adjustment on east: the swing block has nothing to measure
    (m,) = eng.results().relocations
    params = catalog.model("llama3-8b").params
    state_gb = params * 14 / 1e9
    r = eng.runs[0]
    window = eng.speeds.of(r, plan_on(1, 32))[1]
    # One copy over 10 Gbit/s at 90% goodput, less the optimizer state that streams in the
    # first step's window (one domain after: no WAN barrier).
    assert (m.how, m.phase, m.wan_gb) == ("transfer", "done", pytest.approx(state_gb))
    assert m.pause_s == pytest.approx(state_gb / (10 / 8 * 0.9) - window)
    assert m.switch_s == SWING_S + 5.0 and m.lost_s == m.pause_s
    # 32 new accelerators prepare for 5 s, then they and the 16 held idle for the pause
    assert m.lost_gpu_s == pytest.approx(32 * 5 + 48 * m.pause_s)
    assert m.charge_s < m.stay_s and m.gpu_s < m.stay_gpu_s
    assert m.stay_gpu_s == pytest.approx(16 * m.stay_s)  # 16 accelerators until the end
    assert r.wan_gb == pytest.approx(state_gb)  # billed to the job
    block = reconfig.summary(eng.results().swings, moves=eng.results().relocations)
    assert block.count == 0 and block.relocations.switched == 1
    assert block.relocations.transfer_s_max == pytest.approx(m.pause_s)


def test_a_relocation_is_made_only_when_it_beats_staying_by_more_than_the_models_error(monkeypatch):
    """The move from SLOW to west saves a share of the time staying takes; with the margin just
    above that share the job stays, just below it the job moves."""
    assert replanning.MOVE_MARGIN == 0.10
    (m,) = run(plan_on(1, 32), start=SLOW).results().relocations
    saved = 1 - m.charge_s / m.stay_s
    assert saved > replanning.MOVE_MARGIN
    monkeypatch.setattr(replanning, "MOVE_MARGIN", saved + 0.01)
    eng = run(plan_on(1, 32), start=SLOW)
    assert not eng.results().relocations and eng.runs[0].placement == SLOW
    monkeypatch.setattr(replanning, "MOVE_MARGIN", saved - 0.01)
    assert len(run(plan_on(1, 32), start=SLOW).results().relocations) == 1


def test_a_relocations_wan_bill_is_charged_as_time_of_the_accelerators_it_moves_to():
    """A dollar of WAN weighs what a dollar of the target's accelerator time does: the same
    move over a link of $0.05/GB is charged its bill over 32 H100 at $2/h more."""

    def moved(price: float):
        scn = two_domains()
        scn = scn.model_copy(
            update={"links": [scn.links[0].model_copy(update={"price_per_gb": price})]}
        )
        eng = engine(scn, Scripted(plan_on(1, 32), SLOW))
        eng.run(until_s=1800.0)
        (m,) = eng.results().relocations
        return m

    free, priced = moved(0.0), moved(0.05)
    assert free.wan_cost == 0 and priced.wan_cost == pytest.approx(0.05 * priced.wan_gb)
    per_s = 32 * 2.0 / 3600  # the target's accelerators, at the scenario's default price
    assert priced.charge_s - free.charge_s == pytest.approx(priced.wan_cost / per_s)
    view = ClusterView.from_scenario(two_domains())
    assert reconfig.wan_seconds(14.4, plan_on(1, 32), view) == pytest.approx(810.0)


def test_a_relocation_through_the_checkpoint_redoes_what_was_trained_since(monkeypatch):
    real = reconfig.switch_charge
    monkeypatch.setattr(
        reconfig,
        "switch_charge",  # make the paused transfer never pay
        lambda *a: (float("inf"), 0.0) if a[4] else real(*a),
    )
    eng = run(plan_on(1, 32), until_s=3000.0, start=SLOW)
    (m,) = eng.results().relocations
    params = catalog.model("llama3-8b").params
    assert (m.how, m.phase) == ("checkpoint", "done")
    # The next checkpoint: 30 min after the start at 0; then copied for the whole state's time
    # over the link, then loaded (storage at 200 Gbit/s: 112 GB in 4.5 s, + 60 s warm-up).
    copy = params * 14 / 1e9 / (10 / 8 * 0.9)
    assert m.at_s - m.transfer_s == 1800.0 and m.transfer_s == pytest.approx(copy)
    assert two_domains().domains[1].storage.io_gbps == 200
    assert m.hold_s == pytest.approx(params * 14 / 25e9 + 60.0)
    assert m.switch_s == pytest.approx(1800.0 + copy + m.hold_s)
    # the old plan trained on meanwhile; all of it is redone on the new one
    old_rate = eng.speeds.of(eng.runs[0], SLOW)[0]
    assert m.redone == pytest.approx(old_rate * (m.switch_s - 1800.0), rel=1e-6)
    assert m.lost_s == pytest.approx(m.switch_s - 1800.0)
    assert m.lost_gpu_s == pytest.approx(16 * m.lost_s + 32 * m.hold_s)  # + 32 loading


def test_no_room_alongside_falls_back_to_checkpoint_and_restart(monkeypatch):
    real = reconfig.switch_cost
    monkeypatch.setattr(reconfig, "switch_cost", lambda *a: replace(real(*a), alongside=False))
    eng = run(plan_on(0, 32))
    (s,) = [s for s in eng.results().swings if s.how != "kept"]
    assert (s.how, s.prepare_s, s.dip) == ("fallback", 0.0, 1.0)
    window = eng.speeds.of(eng.runs[0], plan_on(0, 32))[1]
    assert s.recovery_s == pytest.approx(
        RESTART_S
        + real(
            plan_on(0, 16), plan_on(0, 32), catalog.model("llama3-8b").params, eng.view, window
        ).pause_s
    )
    assert reconfig.summary(eng.results().swings).fallbacks_to_restart == 1


def test_a_job_that_finishes_while_preparing_gives_the_accelerators_back():
    scn = two_domains()
    scn.jobs[0] = scn.jobs[0].model_copy(update={"tokens": 1.0})
    eng = engine(scn, Scripted(plan_on(0, 32)))
    eng.run()
    assert all(not s.allocations for s in eng.domains.states)


def test_injected_swings_reproduce_with_their_seed():
    scn = small_scenario()
    dyn = study_dynamics(scn, 1, 3.0)
    a, sa = inject_swings(dyn, 4, until_s=3 * 3600)
    b, sb = inject_swings(dyn, 4, until_s=3 * 3600)
    _, sc = inject_swings(dyn, 5, until_s=3 * 3600)
    assert sa == sb and sa != sc and {s["kind"] for s in sa} <= {"load", "rtt"}
    assert np.array_equal(a.rtt_ms, b.rtt_ms) and np.array_equal(
        a.background_load, b.background_load
    )
    for s in sa:  # each one is at least the size the triggers react to
        assert abs(s["factor"] - 1) >= 0.2 if s["kind"] == "load" else s["factor"] >= 1.5
    jobs = study_jobs(scn, 3.0, 1)
    runs = [run_here(StudyInputs(scn, jobs, a, 3.0), PlannerPolicy(scn.weights)) for _ in range(2)]
    assert [(s.job, s.cause, s.start_s, s.end_s) for s in runs[0].swings] == [
        (s.job, s.cause, s.start_s, s.end_s) for s in runs[1].swings
    ]


def test_a_lone_domain_gets_load_swings_only():
    """No link to slow: every injected swing is a load swing (it used to fail drawing one)."""
    one = parse_scenario(
        {
            "name": "one",
            "domains": [
                {
                    "name": "east",
                    "location": {"city": "e"},
                    "nodes": [{"accelerator": "H100-SXM", "count": 1}],
                }
            ],
        }
    )
    _, swings = inject_swings(study_dynamics(one, 1, 3.0), 4, 600.0, until_s=3 * 3600)
    assert swings and {s["kind"] for s in swings} == {"load"}
