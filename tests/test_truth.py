"""A study's ground truth: drawn from its seed for every policy alike, the model itself when its
factors are 1, hidden from the policies, run at by the engine, and learnt from observed rates."""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from tests.test_parity import digest
from xdscheduler.costmodel.constants import DEFAULT
from xdscheduler.costmodel.plan import Plan
from xdscheduler.errors import UserError
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import JobSpec, estimate_placement
from xdscheduler.planner.space import DATA
from xdscheduler.planner.view import ClusterView
from xdscheduler.runtime import study
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.correction import Correction, error_figures
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.truth import Truth
from xdscheduler.sim.truth_params import PARAMS

from .conftest import small_scenario

SMALL_ARCH = {"layers": 16, "hidden": 2048, "ffn_hidden": 8192, "heads": 16, "vocab": 32000}


def two_domains(gpus: dict | None = None, names: str = "ab"):
    """Two one-node H100 domains (or one a letter of `names`) joined by slow links; one small
    job (1 GPU unless told)."""
    return parse_scenario(
        {
            "name": "two",
            "seed": 1,
            "domains": [
                {
                    "name": n,
                    "location": {"city": n},
                    "nodes": [{"accelerator": "H100-SXM", "count": 8}],
                }
                for n in names
            ],
            "links": [
                {"a": a, "b": b, "bandwidth_gbps": 1, "rtt_ms": 10}
                for a, b in itertools.combinations(names, 2)
            ],
            "jobs": [
                {
                    "name": "small",
                    "architecture": SMALL_ARCH,
                    "seq_len": 2048,
                    "global_batch": 64,
                    "tokens": 1e9,
                    "gpus": gpus or {"min": 1, "max": 1},
                }
            ],
        }
    )


def engine(scn, jobs, hours: float, seed: int, truth, policy=None) -> Engine:
    inputs = StudyInputs(scn, jobs, study_dynamics(scn, seed, hours), hours, truth=truth)
    return Engine(inputs, policy or PlannerPolicy(scn.weights))


def test_the_truth_is_drawn_from_the_seed():
    scn = small_scenario()
    jobs = study_jobs(scn, 2.0, 3)
    a, b, c = Truth.draw(scn, jobs, 3), Truth.draw(scn, jobs, 3), Truth.draw(scn, jobs, 4)
    assert np.array_equal(a.speed, b.speed) and np.array_equal(a.goodput, b.goodput)
    assert a.jitter == b.jitter and set(a.jitter) == {j.name for j in jobs}
    assert not np.array_equal(a.speed, c.speed)
    assert np.array_equal(a.goodput, a.goodput.T)  # a link is one link both ways
    assert a.goodput.max() <= 1 / DEFAULT.wan_efficiency  # no faster than the line
    assert min(a.jitter.values()) >= 1.0


def test_every_policy_of_a_study_meets_the_same_truth(tmp_path, monkeypatch):
    seen = []
    real = study.run_here

    def spy(inputs, *args, **kwargs):
        seen.append(inputs.truth)
        return real(inputs, *args, **kwargs)

    monkeypatch.setattr(study, "run_here", spy)
    scn = small_scenario()
    report = study.run_study(
        scn, ["planner", "greedy-cross-domain"], 1.0, 5, tmp_path, local=True, show_progress=False
    )
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0] is not None
    drawn = Truth.draw(scn, study_jobs(scn, 1.0, 5), 5)
    assert np.array_equal(seen[0].speed, drawn.speed) and seen[0].jitter == drawn.jitter
    assert report.truth == drawn.summary(scn)
    assert all(p.prediction_error_p50 is not None for p in report.policies.values())


def test_with_the_truth_equal_to_the_model_nothing_changes():
    scn = small_scenario()
    jobs = study_jobs(scn, 2.0, 3)
    model = engine(scn, jobs, 2.0, 3, Truth.model(scn, jobs))
    same = digest(model.run())
    assert same == digest(engine(scn, jobs, 2.0, 3, None).run())
    figures = error_figures(model.speeds.predictions)
    assert model.speeds.predictions and all(v == 0 for v in figures.values())
    learnt = model.speeds.correction
    assert np.all(learnt.speed == 1) and np.all(learnt.goodput == 1)


def test_a_domain_at_half_speed_runs_a_job_at_half_its_rate():
    scn = two_domains()
    slow = Truth(np.array([0.5, 0.5]), np.ones((2, 2)), {"small": 1.0})
    eng = engine(scn, scn.jobs, 1.0, 1, slow)
    eng.run(until_s=1.0)
    r = eng.runs[0]
    predicted_s = r.placement.estimate.step_time_s
    # By hand: on one accelerator every part of the step runs at peak or memory bandwidth,
    # so halving both doubles it, but for the kernel launch overhead, 3 per layer and
    # micro-batch (one forward, two backward), which the accelerator's speed does not touch.
    plan = r.placement.plan
    launches_s = (64 // plan.micro_batch) * SMALL_ARCH["layers"] * 3 * DEFAULT.kernel_overhead_s
    assert plan.gpus == 1 and plan.recompute == "none"
    true_s = 2 * predicted_s - launches_s
    assert r.rate == pytest.approx(64 * 2048 / true_s, rel=1e-12)
    assert r.rate == pytest.approx(r.placement.estimate.tokens_per_s / 2, rel=0.06)
    [made] = eng.speeds.predictions
    error = error_figures([made])
    assert error["prediction_error_p50"] == pytest.approx(true_s / predicted_s - 1, rel=1e-12)
    assert error["prediction_error_p50"] == pytest.approx(1.0, abs=0.06)  # 100%: twice as fast
    assert error["prediction_bias"] == error["prediction_error_p50"]  # predicted too fast


def test_the_policies_decide_on_the_nominal_view():
    scn = small_scenario()
    jobs = study_jobs(scn, 2.0, 3)
    truth = Truth.draw(scn, jobs, 3)
    views = []

    class Watching(PlannerPolicy):
        def decide(self, specs, view, now_s):
            views.append(view)
            return super().decide(specs, view, now_s)

    engine(scn, jobs, 2.0, 3, truth, Watching(scn.weights)).run()
    assert np.all(views[0].speed == 1) and np.all(views[0].goodput_factor == 1)
    assert not any(np.array_equal(v.speed, truth.speed) for v in views)
    assert not np.array_equal(views[-1].speed, views[0].speed)  # it learnt something


def test_a_replay_learns_what_the_run_before_it_learnt():
    scn = small_scenario()
    jobs = study_jobs(scn, 2.0, 3)
    truth = Truth.draw(scn, jobs, 3)
    whole = engine(scn, jobs, 2.0, 3, truth)
    first = engine(scn, jobs, 2.0, 3, truth)
    first.run(until_s=3600)
    resumed = engine(scn, jobs, 2.0, 3, truth)
    resumed.replay(3600)
    assert np.array_equal(resumed.speeds.correction.speed, first.speeds.correction.speed)
    assert digest(resumed.run()) == digest(whole.run())
    assert resumed.speeds.predictions == whole.speeds.predictions


def test_the_correction_converges_on_a_domains_speed():
    scn = two_domains()
    view = ClusterView.from_scenario(scn)
    spec = JobSpec.of(scn.jobs[0])
    truth = Truth(np.array([0.7, 1.0]), np.ones((2, 2)), {"small": 1.0})
    p = Placement("small", "single", (0,), (1,), Plan(dp=1, micro_batch=2), ("a",))
    c = Correction.start(2)
    gaps = []
    for _ in range(12):
        c = c.observe(p, spec, view, truth.step_s(p, spec, view))
        gaps.append(abs(np.log(c.speed[0] / 0.7)))
    assert all(b < a for a, b in itertools.pairwise(gaps))  # nearer every time
    assert c.speed[0] == pytest.approx(0.7, rel=0.01) and c.speed[1] == 1.0


def test_the_correction_converges_on_a_links_goodput():
    scn = two_domains({"min": 2, "max": 2})
    view = ClusterView.from_scenario(scn)
    spec = JobSpec.of(scn.jobs[0])
    goodput = np.array([[1.0, 0.6], [0.6, 1.0]])
    truth = Truth(np.ones(2), goodput, {"small": 1.0})
    # Replicas in both domains all-reduce 0.6 GB of gradients a step over 1 Gbit/s: the link
    # sets the pace, so the rate says what its goodput is.
    p = Placement("small", DATA, (0, 1), (1, 1), Plan(dp=2, micro_batch=2), ("a", "b"))
    c = Correction.start(2)
    for _ in range(20):
        c = c.observe(p, spec, view, truth.step_s(p, spec, view))
    assert c.goodput[0, 1] == c.goodput[1, 0] == pytest.approx(0.6, rel=0.01)
    assert np.all(c.speed == 1)  # a job across domains says nothing of their speeds


def test_a_ring_of_replicas_corrects_the_narrowest_hop_it_sends_over():
    """Replicas in three domains all-reduce round a ring, each hop one way: a step slower than
    the model is put on the narrowest hop the ring sends over, not on a link whose unused
    direction is narrower."""
    scn = two_domains({"min": 3, "max": 3}, names="abc")
    base = ClusterView.from_scenario(scn)
    bw = np.ones_like(base.bandwidth_gbps)
    bw[1, 0] = 0.1  # the way back from b to a: no hop of the ring a -> b -> c -> a
    bw[1, 2] = 0.5  # the ring's narrowest hop
    view = base.with_links(bw, base.rtt_ms)
    p = Placement("small", DATA, (0, 1, 2), (1, 1, 1), Plan(dp=3, micro_batch=1), tuple("abc"))
    spec = JobSpec.of(scn.jobs[0])
    c = Correction.start(3).observe(
        p, spec, view, 1.3 * estimate_placement(p, spec, view).step_time_s
    )
    assert c.goodput[1, 2] < 1 and c.goodput[0, 1] == 1


def test_a_correction_relaxes_back_to_the_model_in_logs():
    c = Correction(np.array([0.25, 1.0, 4.0]), np.array([[1.0, 0.5], [0.5, 1.0]]))
    half = c.relaxed(0.5)
    assert half.speed == pytest.approx([0.5, 1.0, 2.0])
    assert half.goodput[0, 1] == pytest.approx(0.5**0.5)
    assert np.all(c.relaxed(1.0).speed == 1.0) and c.relaxed(0.0).speed[0] == 0.25


def test_the_fitted_parameters_are_what_the_data_gives(data_dir):
    from benchmarks.fit_truth import fit, render

    text = render(fit(data_dir))
    tree = ast.parse(text)
    assert ast.get_docstring(tree)
    fitted = ast.literal_eval(tree.body[-1].value)
    for block, values in PARAMS.items():
        for key, value in values.items():
            if isinstance(value, float):
                assert fitted[block][key] == pytest.approx(value, rel=1e-9), (block, key)
            elif not isinstance(value, dict):
                assert fitted[block][key] == value, (block, key)


def test_the_fit_refuses_step_times_it_cannot_use_and_writes_nothing_unfinite(tmp_path):
    """A PAI file with a cell that is not a time, or a fit that gives NaN, is named; the
    parameters module is never written with a figure that would not import."""
    from benchmarks.fit_truth import finite, jitter_params

    folder = tmp_path / "steptime"
    folder.mkdir()
    rows = "time,batch_time_norm\n1,10\n1,12\n2,11\n3,slow\n"
    (folder / "pai_minibatch_job_7_norm.csv").write_text(rows)
    with pytest.raises(UserError, match=r"job_7_norm\.csv: row 5, batch_time_norm: 'slow'"):
        jitter_params(folder)
    (folder / "pai_minibatch_job_7_norm.csv").write_text(rows.replace("slow", "13"))
    fitted = jitter_params(folder)  # any job number the folder holds
    assert fitted["jobs"] == {"pai_minibatch_job_7": pytest.approx(12.0 / 12.0)}
    with pytest.raises(UserError, match=r"goodput\.loc = nan: .* nothing written"):
        finite({"goodput": {"loc": float("nan"), "pairs": 0}})


def test_the_fit_reads_pai_jobs_by_any_published_name_in_job_order(tmp_path):
    """job_1_norm.csv as published, pai_job_7.csv, ...: each a job, in the order of their
    numbers (2 before 10); the published coefficient_variation.csv is not a job; one job in
    two files, or a time off the dataset's 0-1000 scale, is refused naming file and row."""
    from benchmarks.fit_truth import jitter_params

    folder = tmp_path / "steptime"
    folder.mkdir()
    rows = "time,batch_time_norm\n1,10\n1,12\n2,11\n3,13\n"
    for name in ("job_10_norm.csv", "job_2_norm.csv", "pai_job_7.csv"):
        (folder / name).write_text(rows)
    (folder / "coefficient_variation.csv").write_text("0,1\n0.1,0.2\n")
    fitted = jitter_params(folder)
    assert list(fitted["jobs"]) == ["job_2", "pai_job_7", "job_10"]
    assert fitted["source"].endswith("(steptime/job_2-10)")
    (folder / "pai_minibatch_job_2_norm.csv").write_text(rows)
    with pytest.raises(UserError, match=r"job 2 is in both job_2_norm\.csv and pai_minibatch_job"):
        jitter_params(folder)
    (folder / "pai_minibatch_job_2_norm.csv").unlink()
    (folder / "pai_job_7.csv").write_text(rows.replace("2,11", "2,1e9"))
    with pytest.raises(UserError, match=r"pai_job_7\.csv: row 4, batch_time_norm: 1e\+09 is not"):
        jitter_params(folder)


def test_the_goodput_fit_names_why_the_grids_cannot_be_compared(tmp_path):
    """Grids of other dates are compared; ones sharing no region pair, or a single grid, are
    refused with the reason, not fitted to NaN."""
    from benchmarks.fit_truth import goodput_params

    folder = tmp_path / "wan"
    folder.mkdir()
    head = "src_region,dst_region,throughput_received\n"
    (folder / "skyplane_latency_2023-05.csv").write_text("src_region,dst_region,avg_rtt\na,b,9\n")
    (folder / "skyplane_throughput_2023-05.csv").write_text(head + "aws:a,azure:b,4e9\n")
    with pytest.raises(UserError, match=r"one throughput grid \(skyplane_throughput_2023-05"):
        goodput_params(folder)
    (folder / "skyplane_throughput_2023-11.csv").write_text(head + "aws:a,gcp:c,5e9\n")
    with pytest.raises(UserError, match=r"no region pair measured in both 2023-05 and 2023-11"):
        goodput_params(folder)
    (folder / "skyplane_throughput_2023-11.csv").write_text(head + "aws:a,azure:b,5e9\n")
    fitted = goodput_params(folder)
    assert fitted["loc"] == pytest.approx(np.log(5 / 4)) and fitted["pairs"] == 1
    assert "grids 2023-05 and 2023-11" in fitted["source"]


def test_a_step_across_domains_no_link_explains_is_left_to_the_job():
    """DiLoCo syncing every 100 steps hardly depends on its link: a step 30% slower than the
    model changes no factor (spreading it on the domains' speed, as the live plane once did,
    made every other pair of domains look faster to the job), and is the job's own. A step that
    depends on its link is split between the link and the job; one inside a domain says
    nothing of crossing."""
    from xdscheduler.live.jobs import LiveJob
    from xdscheduler.live.records import JobRecord

    scn = two_domains({"min": 2, "max": 2})
    view = ClusterView.from_scenario(scn)
    spec = JobSpec.of(scn.jobs[0])
    diloco = Plan(dp=2, micro_batch=2, diloco_h=100)
    p = Placement("small", DATA, (0, 1), (1, 1), diloco, ("a", "b"))
    c = Correction.start(2)
    model_s = estimate_placement(p, spec, view).step_time_s
    learnt, left = c.observe_run(p, spec, view, 1.3 * model_s)
    assert learnt is c and left == pytest.approx(1.3)
    synced = Placement("small", DATA, (0, 1), (1, 1), Plan(dp=2, micro_batch=2), ("a", "b"))
    learnt, left = c.observe_run(
        synced, spec, view, 1.3 * estimate_placement(synced, spec, view).step_time_s
    )
    assert learnt.goodput[0, 1] < 1 and 1.0 < left < 1.3
    single = Placement("small", "single", (0,), (2,), Plan(dp=2, micro_batch=2), ("a",))
    learnt, left = c.observe_run(
        single, spec, view, 1.3 * estimate_placement(single, spec, view).step_time_s
    )
    assert learnt.speed[0] < 1 and left is None
    rec = JobRecord(LiveJob(name="small"), 0.0)
    rec.unexplained = 1.3
    assert rec.across(p) == 1.3 and rec.across(single) == 1.0  # inside a domain: no WAN


def test_a_step_across_domains_is_split_between_its_link_and_the_job():
    """The least-squares split: the link takes a share of the excess that grows with how much
    the step depends on it, the job the rest, and together they predict the step seen, so that
    the same step seen again moves nothing (the job's own factor, given back, counts)."""
    scn = two_domains({"min": 2, "max": 2})
    spec = JobSpec.of(scn.jobs[0])
    p = Placement("small", DATA, (0, 1), (1, 1), Plan(dp=2, micro_batch=2), ("a", "b"))
    shares = []
    for gbps in (0.05, 1.0):  # a slow link: the step mostly its sync; a fast one: compute
        base = ClusterView.from_scenario(scn)
        bw = np.full_like(base.bandwidth_gbps, gbps)
        view = base.with_links(bw, base.rtt_ms)
        c = Correction.start(2)
        model_s = estimate_placement(p, spec, view).step_time_s
        learnt, left = c.observe_run(p, spec, view, 1.3 * model_s)
        now_s = left * estimate_placement(p, spec, learnt.apply(view)).step_time_s
        assert now_s == pytest.approx(1.3 * model_s, rel=0.02)  # the step seen
        again, left_again = learnt.observe_run(p, spec, view, 1.3 * model_s, own=left)
        assert again.goodput[0, 1] == pytest.approx(learnt.goodput[0, 1], rel=0.02)
        assert left_again == pytest.approx(left, rel=0.02)
        shares.append(math.log(1.3 / left) / math.log(1.3))
    assert 0 < shares[1] < shares[0] < 1  # the link takes more where the step is its sync


def test_links_nothing_was_learnt_of_are_pooled_with_those_that_were():
    """A job taught the model that its link delivers 60%: deciding its move, links no job has
    crossed are expected to deliver as much (the geometric mean of those learnt), not 100%,
    which would make every other pair of domains look faster to it."""
    c = Correction(np.ones(3), np.array([[1.0, 0.6, 1.0], [0.6, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    pooled = c.pooled()
    assert pooled.goodput[0, 2] == pooled.goodput[1, 2] == pytest.approx(0.6)
    assert pooled.goodput[0, 1] == 0.6 and np.all(np.diag(pooled.goodput) == 1.0)
    two = Correction(np.ones(3), np.array([[1.0, 0.5, 0.8], [0.5, 1.0, 1.0], [0.8, 1.0, 1.0]]))
    assert two.pooled().goodput[1, 2] == pytest.approx(np.sqrt(0.5 * 0.8))
    fresh = Correction.start(3)
    assert fresh.pooled() is fresh  # nothing learnt: the model's rates
    # 1 and 2 are pools of one data centre: their own network takes no WAN mean, gives none
    fabric = np.zeros((3, 3), dtype=bool)
    fabric[1, 2] = fabric[2, 1] = True
    site = Correction(np.ones(3), np.array([[1.0, 0.6, 1.0], [0.6, 1.0, 0.9], [1.0, 0.9, 1.0]]))
    kept = site.pooled(fabric)
    assert kept.goodput[1, 2] == 0.9 and kept.goodput[0, 2] == pytest.approx(0.6)
    assert c.pooled(fabric).goodput[1, 2] == 1.0  # nothing learnt of it: the model's rate


def test_a_link_learnt_to_deliver_what_the_model_said_counts_as_learnt():
    """What was learnt is recorded, not read off the factor: a link seen to deliver exactly the
    model's rate is pooled as learnt (1.0), and forgetting it makes it unlearnt again."""
    c = Correction(np.ones(3), np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    c = replace(c, learnt=c.learnt | (np.arange(3)[:, None] + np.arange(3) == 3))  # 1-2 too
    pooled = c.pooled()
    assert pooled.goodput[1, 2] == 1.0  # learnt: kept as it is
    assert pooled.goodput[0, 2] == pytest.approx(np.sqrt(0.5))  # untried: the learnt mean
    forgot = c.forgetting_link(1, 2)
    assert not forgot.learnt[1, 2] and forgot.pooled().goodput[1, 2] == pytest.approx(0.5)


def test_a_fit_without_its_data_folder_keeps_the_shipped_one_and_says_why(tmp_path):
    """Without steptime/ the jitter fit is skipped, not the whole fit: the other fits run,
    the jitter keeps the shipped parameters, and the reason is given; a folder holding
    neither measurement folder is refused. A job saved with a .CSV suffix is a job."""
    from benchmarks.fit_truth import fit

    folder = tmp_path / "steptime"
    folder.mkdir()
    (folder / "PAI_job_3_norm.CSV").write_text("time,batch_time_norm\n1,10\n2,12\n")
    skipped: dict[str, str] = {}
    fitted = fit(tmp_path, skipped)
    assert fitted["goodput"] == PARAMS["goodput"] and list(skipped) == ["goodput"]
    assert skipped["goodput"].startswith(f"no wan/ folder in {tmp_path}")
    assert list(fitted["jitter"]["jobs"]) == ["PAI_job_3"]
    with pytest.raises(UserError, match="holds neither wan/ nor steptime/"):
        fit(tmp_path / "elsewhere")


def test_a_job_over_the_pools_of_one_data_centre_teaches_their_speed_not_its_network():
    """Replicas over a's H100 and A100 pools step slower than the model: what they teach is
    their pools' speed, as a job inside one domain does, and nothing of a's own network
    between them (before: its goodput was learnt down, as if it were a WAN link)."""
    scn = two_domains({"min": 2, "max": 2}).model_dump()
    scn["domains"][0]["nodes"] = [
        {"accelerator": "H100-SXM", "count": 1},
        {"accelerator": "A100-80GB", "count": 1},
    ]
    scn = parse_scenario(scn)
    view = ClusterView.from_scenario(scn)
    names = ("a.H100-SXM", "a.A100-80GB")
    pools = tuple(view.names.index(n) for n in names)
    p = Placement("small", DATA, pools, (1, 1), Plan(dp=2, micro_batch=2), names)
    spec = JobSpec.of(scn.jobs[0])
    c = Correction.start(3)
    c, own = c.observe_run(p, spec, view, 1.3 * estimate_placement(p, spec, view).step_time_s)
    assert np.all(c.goodput == 1) and not c.learnt.any() and own is None
    assert np.all(c.speed[list(pools)] < 1) and c.speed[view.names.index("b")] == 1
