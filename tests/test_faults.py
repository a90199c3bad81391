"""Fault detectors, failure model, checkpoint intervals and the `xds faults bench` command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.faults import bench as fb
from xdscheduler.faults import checkpointing as ck
from xdscheduler.faults import failure_model as fm
from xdscheduler.faults.detector import LOG_THRESHOLD, FaultDetector
from xdscheduler.faults.heartbeat import PhiAccrual, phi_from
from xdscheduler.faults.logs import LogAnomalyDetector, LogRecord


@pytest.fixture(scope="module")
def model():
    return fb.fit_log_model(0)


def _feed(acc: PhiAccrual, sender: str, times) -> None:
    for t in times:
        acc.heartbeat(sender, float(t))


def test_phi_grows_with_silence_and_adapts_to_jitter():
    acc = PhiAccrual(["steady", "jittery"], 0.5)
    rng = np.random.default_rng(1)
    _feed(acc, "steady", np.arange(1, 101) * 0.5)
    _feed(acc, "jittery", 0.5 * np.cumsum(1 + rng.uniform(-0.3, 0.3, 100)) + 50 - 0.5 * 100)
    acc.last[:] = 50.0
    phis = np.array([acc.phi(50.0 + dt) for dt in (0.3, 0.6, 0.9, 1.2)])
    assert np.all(np.diff(phis, axis=0) > 0)  # monotone in silence
    assert phis[1, 1] < phis[1, 0]  # the jittery sender is suspected later
    mean, std = acc.stats()
    assert np.allclose(acc.phi(51.0), phi_from(1.0, mean, std))


def test_jitter_and_benign_noise_alone_give_no_verdict(model):
    for seed in range(4):
        verdicts = fb.run_trial(np.random.default_rng(seed), None, model, fb.DetectorConfig())
        assert verdicts == []


@pytest.mark.parametrize(
    "kind", ["node_crash", "domain_outage", "link_cut", "actor_crash", "gpu_error", "straggler"]
)
def test_each_fault_kind_is_detected_within_3_s(model, kind):
    rng = np.random.default_rng(7)
    fault = fb.draw_fault(rng, kind)
    verdicts = fb.run_trial(rng, fault, model, fb.DetectorConfig())
    assert [(v.target, v.kind) for v in verdicts] == [(fault.target, kind)]
    assert 0 <= verdicts[0].time_s - fault.time_s <= 3.0
    assert verdicts[0].evidence


def test_detection_delay_for_a_study(model):
    delay = fb.detection_delay_s("node_crash", seed=3, model=model)
    assert delay is not None and 0 < delay <= 3.0


def test_benign_burst_not_flagged_but_error_burst_is(model):
    logs = LogAnomalyDetector(model)
    burst = [
        LogRecord(10 + i * 0.05, "east/n0", "WARNING", "nccl_retry", {"recovered": True})
        for i in range(60)
    ]
    assert max(logs.observe(r) for r in burst) < LOG_THRESHOLD
    errors = [
        LogRecord(20.0, "east/n1", "ERROR", "cuda_oom"),
        LogRecord(20.3, "east/n1", "ERROR", "xid", {"code": 79}),
    ]
    assert max(logs.observe(r) for r in errors) >= LOG_THRESHOLD


def test_verdicts_are_journaled_with_evidence(model):
    det = FaultDetector(fb.CLUSTER, model)
    for t in np.arange(0.5, 10, 0.5):
        for s in det.hb.senders:
            if not (s == "west/n2" and t > 5):
                det.heartbeat(s, float(t))
    new = [v for tick in np.arange(5, 10, 0.1) for v in det.evaluate(float(tick))]
    assert [(v.target, v.kind) for v in new] == [("west/n2", "node_crash")]
    line = json.loads(det.journal())
    assert line["evidence"]["phi"] >= 8 and "suspected_since_s" in line["evidence"]


def test_failure_model_rates_and_seeded_events():
    # Llama 3: 419 unexpected interruptions, 54 days, 16,384 GPUs → about 50,700 GPU-hours MTBF
    assert math.isclose(fm.GPU_FAILURE_PER_HOUR * (54 * 24 * 16384), 419)
    cluster = fm.Cluster({"a": 16, "b": 8}, (("a", "b"),))
    model = fm.FailureModel(scale=200)
    a = model.generate(cluster, 7 * fm.DAY, seed=3)
    assert a == model.generate(cluster, 7 * fm.DAY, seed=3)
    assert a != model.generate(cluster, 7 * fm.DAY, seed=4)
    crashes = sum(e.kind in ("node_crash", "gpu_error") for e in a)
    expected = 24 * 7 * 24 * model.node_per_hour * 200
    assert abs(crashes - expected) < 4 * math.sqrt(expected)
    assert all(0 <= e.time_s < 7 * fm.DAY and e.duration_s > 0 for e in a)
    assert {e.kind for e in a} <= set(fm.KINDS)


def test_young_daly_against_hand_computed_values():
    assert ck.young_interval_s(60, 3600) == pytest.approx(657.267, abs=1e-3)  # sqrt(432000)
    # Daly: 657.267·(1 + sqrt(1/120)/3 + 1/1080) − 60
    assert ck.daly_interval_s(60, 3600) == pytest.approx(617.876, abs=1e-3)
    assert ck.daly_interval_s(100, 40) == 40  # C ≥ 2M: checkpoint every MTBF
    assert ck.expected_loss_per_failure_s(600, 60, 300) == 630
    assert ck.checkpoint_cost_s(70e9, 49.0) == pytest.approx(20.0)  # 980 GB at 49 GB/s
    plan = ck.plan_checkpoints(
        nodes=100, checkpoint_s=60, restart_s=300, node_failures_per_hour=1e-3
    )
    assert plan.mtbf_s == pytest.approx(36000)
    assert plan.interval_s == pytest.approx(ck.daly_interval_s(60, 36000))
    with pytest.raises(UserError):
        ck.young_interval_s(0, 3600)


def test_bench_is_seeded_and_reports_the_figures():
    a, b = fb.bench(12, seed=5), fb.bench(12, seed=5)
    assert a == b
    for key in ("precision", "recall", "detection_s_p50", "detection_s_p99"):
        assert 0 <= a[key] <= (1 if key in ("precision", "recall") else 3)


@pytest.mark.parametrize("argv", [["--n", "0"], ["--n", "-5"], ["--seed", "-1"]])
def test_bench_cli_bad_input_exits_2_with_one_line(capsys, argv):
    assert main(["faults", "bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xds: error:")


def test_bench_cli_json(capsys):
    assert main(["faults", "bench", "--n", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_faults"] == 6 and "recall_by_kind" in out


def test_run_with_faults_0_is_a_study_without_faults(capsys, tmp_path):
    argv = ["run", "--local", "--policies", "planner", "--hours", "0.2", "--json"]
    assert main([*argv, "--faults", "0", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["faults"] is None
    assert json.loads((tmp_path / "study.json").read_text())["faults"] is None


def test_domain_reports_feed_the_detector():
    from types import SimpleNamespace

    cluster = fm.Cluster({"a": 2, "b": 2}, (("a", "b"),))
    det = FaultDetector.create(cluster, seed=0, train_s=600.0)
    for t in np.arange(0.5, 12, 0.5):
        for dom, other in (("a", "b"), ("b", "a")):
            reach = 0.0 if t > 6 else 10.0  # the a-b link is cut at 6 s
            report = SimpleNamespace(domain=dom, time_s=float(t), links={other: (reach, 20.0)})
            det.observe_report(report, [f"{dom}/n0", f"{dom}/n1"])
        det.evaluate(float(t))
    assert [(v.target, v.kind) for v in det.verdicts] == [("a|b", "link_cut")]


def test_a_domain_fails_about_once_a_quarter_and_a_link_once_a_month():
    """Per-hour rates of events written per days: 1 / (90 days in seconds) per hour made a
    domain outage once in 900 years (no study ever drew one, at sixty times the rates)."""
    from xdscheduler.faults.failure_model import Cluster, FailureModel

    model = FailureModel()
    assert model.domain_per_hour * 90 * 24 == pytest.approx(1.0)
    assert model.link_per_hour * 30 * 24 == pytest.approx(1.0)
    cluster = Cluster({f"d{i}": 8 for i in range(5)}, (("d0", "d1"), ("d1", "d2")))
    year = FailureModel().generate(cluster, 365 * 86400, seed=0)
    outages = sum(e.kind == "domain_outage" for e in year)
    cuts = sum(e.kind == "link_cut" for e in year)
    assert 10 <= outages <= 35 and 12 <= cuts <= 40  # means 20.3 and 24.3
