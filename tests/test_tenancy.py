"""Tenants: quota arithmetic, a borrow-then-reclaim and a priority preemption worked by hand on
the engine, the per-tenant report, and bad tenancy definitions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_cli import run
from xdscheduler.errors import UserError
from xdscheduler.network.dynamics import Dynamics, base_matrices
from xdscheduler.planner.policies import POLICIES
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.measurement import Action
from xdscheduler.tenants import ALL, Quotas, Tenancy

HOUR = 3600.0


def scenario(tenants: list[dict], jobs: list[dict], **tenancy) -> dict:
    """One domain of 64 H100s (8 nodes of 8) and the given tenants and jobs."""
    return {
        "name": "tenants",
        "seed": 1,
        "domains": [
            {
                "name": "dc",
                "location": {"city": "x"},
                "nodes": [{"accelerator": "H100-SXM", "count": 8}],
            }
        ],
        "tenancy": {"tenants": tenants, **tenancy},
        "jobs": [{"model": "llama3-8b", "global_batch": 512, **j} for j in jobs],
    }


def engine(data: dict, policy: str = "gang-single-domain") -> Engine:
    """No other tenants' load and steady links: every accelerator is the tenants'."""
    scn = parse_scenario(data)
    bw, rtt, _ = base_matrices(scn)
    steps = 200
    dyn = Dynamics(
        np.arange(steps) * 300.0,
        np.repeat(bw[None], steps, 0),
        np.repeat(rtt[None], steps, 0),
        np.zeros((steps, len(scn.domains))),
        300.0,
    )
    pol = POLICIES[policy](scn.weights, {})
    return Engine(StudyInputs(scn, scn.jobs, dyn, 48.0), pol)


def test_quota_arithmetic():
    tenancy = Tenancy.model_validate(
        {
            "tenants": [
                {"name": "a", "quota": {"all": 48}, "cohort": "c", "lending_limit": 40},
                {"name": "b", "quota": {"all": 16}, "cohort": "c", "borrowing_limit": 20},
                {"name": "solo", "quota": {"all": 8}},
            ]
        }
    )
    q = Quotas(tenancy)
    used = {"a": {ALL: 0}, "b": {ALL: 0}, "solo": {ALL: 0}}
    # b: its own 16, then what a lends (at most 40 of its idle 48), within b's limit of 20
    assert q.headroom(used, "b", ALL) == 16 + 20
    assert q.headroom(used, "solo", ALL) == 8  # no cohort: nothing to borrow
    used["b"][ALL] = 30  # b borrows 14 ...
    assert q.borrowed(used, "b", ALL) == 14 and q.lent(used, ALL)["a"] == pytest.approx(14)
    assert q.headroom(used, "b", ALL) == 6  # ... and may borrow 6 more
    used["a"][ALL] = 40  # a leaves 8 idle: b can borrow no more than that, already exceeded
    assert q.headroom(used, "b", ALL) == 0 and q.headroom(used, "a", ALL) == 8


def test_borrow_then_reclaim_by_hand():
    """The borrower runs 64 (48 of them borrowed) until the owner needs 32 of its 48: the
    borrower's job is preempted at once, without a checkpoint yet, losing 1,000 s × 64."""
    eng = engine(
        scenario(
            [
                {"name": "owner", "quota": {"all": 48}, "cohort": "c"},
                {"name": "borrower", "quota": {"all": 16}, "cohort": "c"},
            ],
            [
                {
                    "name": "b1",
                    "tenant": "borrower",
                    "tokens": 4e10,
                    "arrival_s": 0.0,
                    "gpus": {"min": 64, "max": 64},
                },
                {
                    "name": "a1",
                    "tenant": "owner",
                    "tokens": 2e9,
                    "arrival_s": 1000.0,
                    "gpus": {"min": 32, "max": 32},
                },
            ],
        )
    )
    res = eng.run(until_s=6 * HOUR)
    log = [(d.time_s, d.job, d.action) for d in res.decisions]
    assert log[:3] == [
        (0.0, "b1", Action.PLACE),
        (1000.0, "b1", Action.REQUEUE),
        (1000.0, "a1", Action.PLACE),
    ]
    why = res.decisions[1].explanation
    assert "owner reclaims its nominal quota lent to borrower" in why
    assert "loses 17.78 accelerator-hours" in why  # 1,000 s × 64 / 3,600
    a1 = next(r for r in res.jobs if r.name == "a1")
    b1 = next(r for r in res.jobs if r.name == "b1")
    # while a1 runs the borrower may take its own 16 and the owner's idle 16: not b1's 64
    restart = next(d.time_s for d in res.decisions[3:] if d.job == "b1")
    assert restart == pytest.approx(a1.end_s)
    t = res.tenants
    assert t["borrower"]["preempted"] == 1 and t["owner"]["preempted"] == 0
    assert t["borrower"]["lost_gpu_h"] == pytest.approx(1000 * 64 / HOUR)
    # 48 borrowed for the first 1,000 s, lent by the owner; then again once a1 is done
    lent_later = 48 * (res.end_s - a1.end_s) if b1.end_s is None else 48 * (b1.end_s - restart)
    assert t["borrower"]["borrowed_gpu_h"] == pytest.approx((48 * 1000 + lent_later) / HOUR)
    assert t["owner"]["lent_gpu_h"] == pytest.approx(t["borrower"]["borrowed_gpu_h"])
    assert t["owner"]["admitted"] == 1 and t["borrower"]["admitted"] == 1
    assert b1.lost_gpu_s == pytest.approx(1000 * 64)


def test_priority_preemption_picks_the_victim_losing_least_work():
    """Two low-priority jobs fill the domain; the older one checkpointed 200 s ago, the newer
    one has none after 1,000 s. The high-priority job takes the older one's accelerators: it
    loses 200 s × 32, the newer would lose 1,000 s × 32 (the giants' rule, newest first,
    would have chosen it)."""
    jobs = [
        {
            "name": "old",
            "tenant": "team",
            "priority": 0,
            "tokens": 4e10,
            "arrival_s": 0.0,
            "gpus": {"min": 32, "max": 32},
        },
        {
            "name": "new",
            "tenant": "team",
            "priority": 0,
            "tokens": 4e10,
            "arrival_s": 1000.0,
            "gpus": {"min": 32, "max": 32},
        },
        {
            "name": "urgent",
            "tenant": "team",
            "priority": 5,
            "tokens": 1e9,
            "arrival_s": 2000.0,
            "gpus": {"min": 32, "max": 32},
        },
    ]
    eng = engine(scenario([{"name": "team", "quota": {"all": 64}}], jobs))
    res = eng.run(until_s=3 * HOUR)
    requeued = [d for d in res.decisions if d.action == Action.REQUEUE]
    assert (requeued[0].time_s, requeued[0].job) == (2000.0, "old")
    assert "priority 5 over 0" in requeued[0].explanation
    assert "loses 1.78 accelerator-hours" in requeued[0].explanation  # 200 s × 32
    urgent = next(d for d in res.decisions if d.job == "urgent")
    assert urgent.time_s == 2000.0 and urgent.action == Action.PLACE
    assert res.tenants["team"]["lost_gpu_h"] == pytest.approx(200 * 32 / HOUR)


def test_a_grace_period_lets_the_victim_checkpoint():
    jobs = [
        {
            "name": "low",
            "tenant": "team",
            "priority": 0,
            "tokens": 4e10,
            "arrival_s": 0.0,
            "gpus": {"min": 64, "max": 64},
        },
        {
            "name": "high",
            "tenant": "team",
            "priority": 5,
            "tokens": 1e9,
            "arrival_s": 1000.0,
            "gpus": {"min": 32, "max": 32},
        },
    ]
    eng = engine(
        scenario([{"name": "team", "quota": {"all": 64}}], jobs, preemption={"grace_s": 120.0})
    )
    res = eng.run(until_s=2 * HOUR)
    requeue = next(d for d in res.decisions if d.action == Action.REQUEUE)
    assert requeue.time_s == pytest.approx(1120.0) and "loses nothing" in requeue.explanation
    assert next(d for d in res.decisions if d.job == "high").time_s == pytest.approx(1120.0)
    assert res.tenants["team"]["lost_gpu_h"] == 0.0


def test_admission_keeps_tenants_within_their_quota():
    """No cohort: a tenant never holds more than its quota, whatever is free."""
    eng = engine(
        scenario(
            [{"name": "a", "quota": {"all": 24}}, {"name": "b", "quota": {"all": 40}}],
            [
                {
                    "name": f"a{i}",
                    "tenant": "a",
                    "tokens": 5e9,
                    "arrival_s": 0.0,
                    "gpus": {"min": 8, "max": 16},
                }
                for i in range(4)
            ],
        ),
        policy="planner",
    )
    peak = 0
    while (point := eng.next_decision(until_s=4 * HOUR)) is not None:
        from xdscheduler.sim import scheduling

        scheduling.decide(eng, eng.policy, point.time_s)
        peak = max(peak, sum(r.placement.total_gpus for r in eng.active))
    assert 0 < peak <= 24


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_job_its_quota_caps_below_its_memory_waits_and_the_rest_run(policy):
    """Quota 1: llama3-8b's training state needs more than one H100, so the job asking 1-8 waits
    (capped to 1 it has no plan), and a smaller model's job on 1 finishes; no policy stops."""
    eng = engine(
        scenario(
            [{"name": "a", "quota": {"all": 1}}],
            [
                {"name": "big", "tenant": "a", "tokens": 1e8, "gpus": {"min": 1, "max": 8}},
                {
                    "name": "small",
                    "model": "gpt3-1.3b",
                    "tenant": "a",
                    "tokens": 1e8,
                    "arrival_s": 60.0,
                    "gpus": {"min": 1, "max": 1},
                },
            ],
        ),
        policy=policy,
    )
    res = eng.run(until_s=4 * HOUR)
    by_name = {r.name: r for r in res.jobs}
    assert by_name["big"].start_s is None
    assert by_name["small"].end_s is not None


def test_whether_a_capped_job_has_a_plan_is_the_same_asked_in_any_order():
    """`plannable` keeps, per job and cluster, the largest cap known too small and the least
    known enough; its answers equal a fresh search's, whatever the order of the caps."""
    from dataclasses import replace

    from xdscheduler.planner import search
    from xdscheduler.planner.search import JobSpec, plannable
    from xdscheduler.planner.view import ClusterView

    data = scenario(
        [{"name": "a", "quota": {"all": 64}}], [{"name": "j", "tenant": "a", "tokens": 1e9}]
    )
    scn = parse_scenario(data)
    view, job = ClusterView.from_scenario(scn), JobSpec.of(scn.jobs[0])
    job = replace(job, gpus_min=1)
    fresh = {}
    for cap in (1, 2, 3, 8):
        search._PLANNABLE.clear()
        fresh[cap] = plannable(replace(job, gpus_max=cap), view)
    assert not fresh[1] and fresh[8]
    search._PLANNABLE.clear()
    for cap in (8, 1, 3, 2, 1, 8):
        assert plannable(replace(job, gpus_max=cap), view) == fresh[cap]


def test_three_tenant_study_reports_every_tenant(tmp_path, capsys):
    out = tmp_path / "study"
    code, _, err = run(
        capsys,
        "run",
        "scenarios/three_tenants.yaml",
        "--hours",
        "3",
        "--local",
        "--policies",
        "planner,gang-single-domain",
        "--out",
        str(out),
    )
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    for policy in report["policies"].values():
        tenants = policy["tenants"]
        assert set(tenants) == {"big-lab", "small-lab", "production"}
        for figures in tenants.values():
            for key in (
                "quota",
                "use_gpu_h",
                "borrowed_gpu_h",
                "lent_gpu_h",
                "admitted",
                "preempted",
                "mean_wait_s",
                "bill_usd",
            ):
                assert key in figures
        assert tenants["small-lab"]["borrowed_gpu_h"] > 0  # it lives on what others lend
        total = sum(t["use_gpu_h"] for t in tenants.values())
        # what tenants held is what the jobs held
        assert total == pytest.approx(policy["gpu_h_per_job"] * report["jobs"], rel=1e-6)
        for t in tenants.values():
            assert t["bill_usd"] == pytest.approx(t["accelerators_usd"] + t["wan_usd"])


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t["tenants"][0]["quota"].update(all=-4), "quota.all: Input should be greater"),
        (lambda t: t["tenants"][0]["quota"].update(TPUv9=8), "unknown accelerator class 'TPUv9'"),
        (lambda t: t["tenants"][0].update(lending_limit=100), "lending_limit 100 is more than"),
        (
            lambda t: t.update(
                cohorts=[{"name": "x", "parent": "y"}, {"name": "y", "parent": "x"}]
            ),
            "form a cycle",
        ),
        (lambda t: t["tenants"][0].update(cohort="nowhere"), "unknown cohort 'nowhere'"),
        (lambda t: t["tenants"].append({"name": "a", "quota": {"all": 1}}), "repeated: a"),
        (
            lambda t: t["tenants"][1].update(name="small lab"),
            r"tenants\[1\]\.name: 'small lab' is not accepted: .*; e\.g\. 'small-lab'",
        ),
        (lambda t: t["tenants"][0]["quota"].update(all=60), "add up to 76, over 1 x the 64"),
    ],
)
def test_bad_tenancy_is_named(change, message):
    data = scenario(
        [{"name": "a", "quota": {"all": 16}, "cohort": "c"}],
        [{"name": "j", "tenant": "a", "tokens": 1e9}],
        cohorts=[{"name": "c"}],
    )
    data["tenancy"]["tenants"].append({"name": "b", "quota": {"all": 16}})
    change(data["tenancy"])
    with pytest.raises(UserError, match=message):
        parse_scenario(data, "t.yaml")


def test_a_job_of_an_unknown_tenant_is_named(tmp_path, capsys):
    data = scenario(
        [{"name": "a", "quota": {"all": 16}}], [{"name": "j", "tenant": "nobody", "tokens": 1e9}]
    )
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    code, _, err = run(capsys, "scenario", "check", str(path))
    assert code == 2 and "jobs[0].tenant: unknown tenant 'nobody'" in err


def test_a_job_re_placed_after_a_fault_stays_within_its_quota():
    """The fault path (jobs that lost their accelerators go first, on the backup pools) admits
    as the queue does: a recovering job of a tenant with quota 16 gets at most 16."""
    from xdscheduler.sim import scheduling
    from xdscheduler.sim.recovery import Faults

    eng = engine(
        scenario(
            [{"name": "a", "quota": {"all": 16}}],
            [
                {
                    "name": "j",
                    "tenant": "a",
                    "tokens": 5e9,
                    "arrival_s": 0.0,
                    "gpus": {"min": 8, "max": 64},
                }
            ],
        ),
        policy="planner",
    )
    eng.faults = Faults([], [], {}, node_rate_per_hour=1e-4)
    point = eng.next_decision()
    (job,) = point.queue
    job.recovering = True
    scheduling.decide(eng, eng.policy, point.time_s)
    assert job.placement is not None and job.placement.total_gpus <= 16
