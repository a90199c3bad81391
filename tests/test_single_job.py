"""The single-job experiment (`xds bench job`): the forecast and the run's figures worked by
hand, the swings' bounds, and one short run of every plan."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from xdscheduler.cli import main
from xdscheduler.report import single_job as sj


def test_the_forecast_is_each_links_ar1_fitted_on_its_window():
    # e = 0.2, 0.1, 0.05: phi = (0.1·0.2 + 0.05·0.1) / (0.2² + 0.1²) = 0.5, next e = 0.025
    leased = np.array([[0.0, 10.0], [10.0, 0.0]])
    history = np.array([leased * (1 + e) for e in (0.2, 0.1, 0.05)])
    np.testing.assert_allclose(sj.forecast(history, leased), leased * 1.025)
    rising = np.array([leased * (1 + e) for e in (-0.1, 0.1)])  # phi < 0 is kept at 0
    np.testing.assert_allclose(sj.forecast(rising, leased), leased)


def test_a_runs_figures_weigh_each_sample_by_the_steps_trained_in_it():
    # 300 s at 10 s a step, then 300 s at 20 s of which 60 s paused: 30 + 12 steps
    line = sj.Timeline(
        step_s=np.array([10.0, 20.0]),
        compute_s=np.array([8.0, 8.0]),
        comm_s=np.array([4.0, 16.0]),
        hidden_s=np.array([2.0, 4.0]),
        wan_gb=np.array([1.0, 3.0]),
        extra_tokens=np.array([0.06, 0.0]),
        pause_s=np.array([0.0, 60.0]),
        replans=1,
    )
    job = sj.job_of(sj.SETTINGS["70b"])
    f = sj.figures(line, job)
    assert f["step_s"] == pytest.approx(600 / 42)
    mean = (30 * 10 + 12 * 20) / 42
    assert f["step_std_s"] == pytest.approx(
        np.sqrt((30 * (10 - mean) ** 2 + 12 * (20 - mean) ** 2) / 42)
    )
    assert f["wan_gb_per_step"] == pytest.approx((30 * 1 + 12 * 3) / 42)
    assert f["comm_over_compute"] == pytest.approx((30 * 4 + 12 * 16) / 42 / 8)
    assert f["overlap"] == pytest.approx((30 * 2 + 12 * 4) / (30 * 4 + 12 * 16))
    assert f["extra_tokens"] == pytest.approx(30 * 0.06 / 42)
    tokens_per_s = job.global_batch * job.seq * 42 / 600
    assert f["tokens_per_s"] == pytest.approx(tokens_per_s)
    assert f["days_to_target"] == pytest.approx(
        20 * job.arch.params * (1 + f["extra_tokens"]) / tokens_per_s / 86400
    )


def test_the_swings_stay_within_thirty_percent_and_the_rtts_in_their_range():
    setting = sj.SETTINGS["70b"]
    scn = sj.cluster(setting, 10.0, seed=3)
    assert all(20 <= link.rtt_ms <= 100 for link in scn.links) and len(scn.links) == 6
    bw = sj.swings(scn, 3, 6.0)
    linked = bw[0] > 0
    ratio = bw[:, linked] / 10.0
    assert ratio.min() >= 0.7 - 1e-9 and ratio.max() <= 1.3 + 1e-9 and ratio.std() > 0.05
    assert sj.cluster(setting, 10.0, seed=3) == scn  # a seed's links are the same every time


@pytest.fixture(scope="module")
def short_run():
    return sj.run(sj.SETTINGS["70b"], 10.0, seed=0, hours=1.0)


def test_every_plan_runs_and_the_baselines_are_what_they_say(short_run):
    rows = {r["policy"]: r for r in short_run}
    assert list(rows) == list(sj.POLICIES)
    assert rows["mast"]["wan_gb_per_step"] == 0  # one domain: nothing crosses
    assert rows["diloco"]["extra_tokens"] == pytest.approx(3 * 0.02)  # 4 replica groups
    for name in ("megatron", "fsdp", "sailor"):  # synchronous
        assert rows[name]["extra_tokens"] == 0
    # every step, Megatron's replicas exchange the whole gradient; DiLoCo every 100 steps
    assert rows["megatron"]["wan_gb_per_step"] > 50 * rows["diloco"]["wan_gb_per_step"]
    best = min(r["days_to_target"] for name, r in rows.items() if name != "ours")
    assert rows["ours"]["days_to_target"] <= 1.02 * best


def test_no_plan_steps_faster_than_the_free_wan_bound(short_run):
    bound = short_run[0]["free_wan_step_s"]
    assert all(r["free_wan_step_s"] == bound for r in short_run)
    steps = {r["policy"]: r["step_s"] for r in short_run}
    assert min(steps.values()) >= bound * (1 - 1e-6)
    # every synchronous plan across 10 Gbit/s links pays for it; DiLoCo hides its sync
    assert min(steps[p] for p in ("megatron", "fsdp", "sailor")) > 2 * bound
    assert steps["diloco"] == pytest.approx(bound, rel=0.01)
    text = sj.markdown(pd.DataFrame(short_run), hours=1.0)
    assert "the 25% target missed" in text and "out of reach: it asks" in text
    assert f"the fastest plan steps in {bound:,.2f} s" in text


def test_bench_job_prints_a_table_per_setting_and_writes_its_files(tmp_path, capsys):
    code = main(
        [
            "bench",
            "job",
            "--sizes",
            "70b",
            "--gbps",
            "10",
            "--seeds",
            "2",
            "--hours",
            "0.5",
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and "25% target" in doc["headline"] and len(doc["runs"]) == 12
    for name in ("single_job.csv", "single_job.md", "single_job.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| MAST-style" in (tmp_path / "single_job.md").read_text()


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--sizes", "7b"], "unknown job size 7b"),
        (["--gbps", "x"], "--gbps takes comma-separated numbers"),
        (["--gbps", "0"], "bandwidth is in (0, 10000]"),
        (["--seeds", "1"], "argument --seeds: 1 is outside [2, 1,000]"),
    ],
)
def test_bad_input_exits_2_with_one_line(flags, message, tmp_path, capsys):
    code = main(["bench", "job", "--hours", "0.5", "--out", str(tmp_path), *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
