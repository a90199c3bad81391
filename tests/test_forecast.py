"""Demand forecasting: series loading, the history model (no look-ahead), known jobs, the
hybrid's intervals, the backtest and its CLI. Real traces only where the shared data exists."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.forecast import backtest, series
from xdscheduler.forecast.history import (
    HistoryModel,
    features,
    features_last,
    future_mean,
    recent_swing,
    recent_swing_last,
)
from xdscheduler.forecast.hybrid import Forecaster, combine
from xdscheduler.forecast.structure import KnownJob, known_job, structural_demand
from xdscheduler.scenario import Job


def synthetic(days: int = 16, seed: int = 0, step_min: int = 1) -> pd.DataFrame:
    """Helios-like occupancy: jobs of 8–64 GPUs arriving more by day, holding for hours."""
    rng = np.random.default_rng(seed)
    n = days * 1440 // step_min
    t = np.arange(n) * step_min
    day_rate = 0.004 * (1 + 0.8 * np.sin((t % 1440) / 1440 * 2 * np.pi))
    starts = np.flatnonzero(rng.random(n) < day_rate * step_min)
    held = np.zeros(n + 1)
    for s in starts:
        dur = int(rng.exponential(300 / step_min)) + 1
        held[s : min(s + dur, n)] += rng.choice([8, 16, 32, 64])
    pending = np.zeros(n)
    return pd.DataFrame(
        {
            "time": pd.date_range("2020-05-01", periods=n, freq=f"{step_min}min"),
            "running_gpu_num": held[:n],
            "pending_gpu_num": pending,
        }
    )


def test_series_formats_and_errors(tmp_path):
    df = synthetic(days=3)
    s = series.from_frame(df, "occupancy")
    assert s.step_min == 1 and np.allclose(s.values, df.running_gpu_num)
    philly = pd.DataFrame({"time": df.time, "active": df.running_gpu_num + 1})
    assert series.from_frame(philly, "occupancy").values[0] == df.running_gpu_num[0] + 1
    gappy = df.drop(index=[5, 6, 7])  # gaps: occupancy holds its last value
    assert series.from_frame(gappy, "occupancy").values[5] == df.running_gpu_num[4]
    venus = pd.DataFrame({"time": df.time[:100], "submit_gpu_num": np.arange(100)})
    assert series.from_frame(venus.drop(index=[3]), "arrivals").values[3] == 0
    with pytest.raises(UserError, match="needs columns"):
        series.from_frame(philly, "arrivals")
    with pytest.raises(UserError, match="unknown target"):
        series.from_frame(df, "load")
    with pytest.raises(UserError, match="no such file"):
        series.load(tmp_path / "missing.csv", "occupancy")
    with pytest.raises(UserError, match="unknown horizon"):
        s.steps("2h")


def test_a_series_with_a_clock_seconds_off_reads_as_on_its_step():
    """Times up to 9 s either side of a 10-minute grid snap onto it: the same step, index and
    values as the trace on time (a median gap of 9 min 58 s is not a 9-minute series)."""
    df = synthetic(days=3, step_min=10)
    off = pd.to_timedelta(np.random.default_rng(0).integers(-9, 10, len(df)), "s")
    s, late = (series.from_frame(d, "occupancy") for d in (df, df.assign(time=df.time + off)))
    assert late.step_min == s.step_min == 10 and late.index.equals(s.index)
    assert np.array_equal(late.values, s.values)


def test_future_mean_and_last_row_features_agree():
    y = np.arange(10.0)
    assert future_mean(y, 3)[0] == pytest.approx(2.0) and np.isnan(future_mean(y, 3)[-1])
    s = series.from_frame(synthetic(days=9), "occupancy")
    for h in (10, 60):
        full = features(s.values, s.index, 1, h).iloc[[-1]].reset_index(drop=True)
        pd.testing.assert_frame_equal(
            full, features_last(s.values, s.index[-1], 1, h), check_dtype=False
        )


def test_history_model_never_sees_past_its_end():
    s = series.from_frame(synthetic(days=12), "occupancy")
    end = 9 * 1440
    a = HistoryModel(h=60, step_min=1).fit(s.values, s.index, end=end)
    tampered = s.values.copy()
    tampered[end:] = 10_000.0  # the future: must not change what was learnt
    b = HistoryModel(h=60, step_min=1).fit(tampered, s.index, end=end)
    origins = np.arange(3 * 1440, end - 61, 97)
    pa, _ = a.predict(s.values, s.index, origins)
    pb, _ = b.predict(tampered, s.index, origins)
    assert np.array_equal(pa, pb) and a.weight == b.weight


def test_known_jobs_hold_and_free():
    job = Job(name="j", model="llama2-7b", global_batch=256, tokens=256 * 4096 * 100)
    k = known_job(job, gpus=64, step_time_s=6.0, tokens_done=256 * 4096 * 50)
    assert k.finish_s == pytest.approx(50 * 6.0 * 4096 / job.arch.seq_len)
    jobs = [KnownJob("a", 16, finish_s=30 * 60), KnownJob("b", 8, 3 * 3600, start_s=10 * 60)]
    d = structural_demand(jobs, horizon_min=60)
    assert d.held[0] == 16 and d.held[15] == 24 and d.held[45] == 8
    assert d.frees == {"a": 30.0, "b": float("inf")}
    assert d.mean(60) == pytest.approx((16 * 29 + 8 * 51) / 60)  # minutes 1..60


def test_hybrid_uses_known_ends_and_orders_intervals():
    q = {0.025: -0.2, 0.1: -0.1, 0.9: 0.1, 0.975: 0.2}
    f = combine(history_mean=100, unit=100, rel_q=q, known_now=40, known_mean=10, horizon_min=60)
    assert f.mean == pytest.approx(70)  # the 40 known GPUs fall to 10 on average
    assert f.lo95 <= f.lo80 <= f.mean <= f.hi80 <= f.hi95 and f.lo95 >= 10


def test_forecaster_intervals_cover_on_synthetic_data():
    s = series.from_frame(synthetic(days=14, seed=1), "occupancy")
    end = 11 * 1440
    fc = Forecaster.fit(s.values[:end], s.index[:end], 1, "occupancy", horizons_min=(60,))
    model = fc.models[60]
    origins = np.arange(end, len(s.values) - 61, 30)
    point, unit = model.predict(s.values, s.index, origins)
    actual = future_mean(s.values, 60)[origins]
    lo = point + model.rel_quantiles[0.025] * unit
    hi = point + model.rel_quantiles[0.975] * unit
    assert np.mean((actual >= lo) & (actual <= hi)) >= 0.8
    # The served path (the last step only) gives the same point and interval unit.
    last = int(origins[-1])
    served = model.predict_last(s.values[: last + 1], s.index[last])
    assert served == pytest.approx((point[-1], unit[-1]))


def test_occupancy_blends_the_direct_models_of_shorter_horizons_fitting_each_once():
    from xdscheduler.forecast.history import Ensemble, blend_horizons, fit_history

    assert blend_horizons(360, 1) == [360, 60, 10] and blend_horizons(10, 1) == [10]
    assert blend_horizons(6, 10) == [6, 1] and blend_horizons(30, 1) == [30, 10]
    s = series.from_frame(synthetic(days=10, seed=4), "occupancy")
    end, fitted = 8 * 1440, {}
    hour = fit_history(s.values, s.index, 1, 60, "occupancy", end=end, fitted=fitted)
    assert isinstance(hour, Ensemble) and hour.horizons == [60, 10]
    assert set(fitted) == {(60, end), (10, end)}
    ten = fit_history(s.values, s.index, 1, 10, "occupancy", end=end, fitted=fitted)
    assert ten is fitted[10, end] and len(fitted) == 2  # reused, not fitted again
    origins = np.arange(end, len(s.values) - 61, 53)
    point, unit = hour.predict(s.values, s.index, origins)
    direct, direct_unit = fitted[60, end].predict(s.values, s.index, origins)
    short, _ = ten.predict(s.values, s.index, origins)
    assert np.allclose(point, (direct + short) / 2) and np.array_equal(unit, direct_unit)
    assert hour.rel_quantiles == fitted[60, end].rel_quantiles  # the hour's own residuals
    arrivals = fit_history(s.values, s.index, 1, 60, "arrivals", end=end)
    assert set(arrivals.horizons) == {60}  # bursty arrivals: anchors, no shorter horizons


def test_recent_swing_is_the_days_typical_change_over_the_horizon():
    y = np.r_[np.zeros(4), np.full(8, 8.0)]  # one rise of 8 GPUs; a "day" of 4 steps
    swing = recent_swing(y, h=2, per_day=4)
    # at step 5, the changes over 2 steps at the trailing day's steps 2..5 are 0, 0, 8, 8
    assert swing[5] == pytest.approx((16 / 4) / (y[2:6].mean() + 1))
    assert swing[1] == 0.0 and swing[-1] == 0.0  # nothing moved in the last day


def test_last_step_swing_matches_the_whole_series_on_short_and_long_histories():
    y = np.random.default_rng(1).integers(0, 40, 3000).astype(float)
    for n in (1, 3, 50, 3000):
        for h, per_day in ((1, 4), (6, 144), (60, 1440)):
            assert recent_swing_last(y[:n], h, per_day) == pytest.approx(
                recent_swing(y[:n], h, per_day)[-1]
            )


def test_intervals_widen_on_a_lively_day():
    s = series.from_frame(synthetic(days=14, seed=1), "occupancy")
    end = 11 * 1440
    model = HistoryModel(h=60, step_min=1, use_median=True).fit(s.values, s.index, end=end)
    calm = s.values.copy()
    calm[end - 1440 : end] = calm[end - 1]  # the same last value after a day without change
    _, lively_unit = model.predict(s.values, s.index, np.array([end - 1]))
    _, calm_unit = model.predict(calm, s.index, np.array([end - 1]))
    assert np.isclose(s.values[end - 1], calm[end - 1]) and lively_unit[0] > calm_unit[0] > 0


def test_interval_score_charges_width_and_misses():
    actual, point = np.array([10.0, 10.0]), np.array([10.0, 10.0])
    q = {0.025: -0.2, 0.1: -0.1, 0.9: 0.1, 0.975: 0.2}
    out = backtest.coverage(actual, point, np.array([10.0, 10.0]), q)
    assert out["coverage80"] == 1.0 and out["interval_score80"] == pytest.approx(0.2)
    # An actual of 14 misses the 80% interval [9, 11] by 3: width 2 + 2 / 0.2 * 3 = 32.
    out = backtest.coverage(np.array([10.0, 14.0]), point, np.array([10.0, 10.0]), q)
    assert out["coverage80"] == 0.5
    assert out["interval_score80"] == pytest.approx((2 + (2 + 30)) / 2 / 12)


def test_metrics():
    m = backtest.metrics(np.array([10.0, 10.0]), np.array([9.0, 12.0]))
    assert m["wape"] == pytest.approx(0.15) and m["accuracy"] == pytest.approx(0.85)
    assert m["origins"] == 2


def test_backtest_cli_on_synthetic_csv(tmp_path, capsys):
    path = tmp_path / "vcSyn.csv"
    synthetic(days=16, seed=2).to_csv(path, index=False)
    assert main(["forecast", "backtest", str(path), "--horizon", "1h", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["baselines"]) == {"persistence", "seasonal_naive", "auto_ets"}
    assert out["origins"] == len(backtest.window(series.load(path, "occupancy"), 60).origins)
    assert out["wape"] <= out["baselines"]["persistence"]["wape"] * 1.02
    assert out["accuracy"] == pytest.approx(1 - out["wape"])
    vs = out["vs_best_baseline"]
    best = min(out["baselines"].values(), key=lambda m: m["wape"])
    assert vs["wape_ratio"] == pytest.approx(out["wape"] / best["wape"])
    assert vs["ratio_ci90"][0] <= vs["wape_ratio"] * 1.05 and vs["ratio_ci90"][1] > 0


def test_a_published_prediction_is_scored_only_where_it_has_values():
    """Every model is scored on the steps the prediction covers; a step it lacks, or a bin
    between the series' steps, is refused, never read as a prediction of nought (which sank
    it: a prediction ending early, or with bins 5 minutes off the series', scored zeros)."""
    df = synthetic(days=16, seed=1, step_min=10)
    arrivals = series.from_frame(df.assign(submit_gpu_num=df.running_gpu_num), "arrivals")
    idx = arrivals.index
    published = pd.Series(df.running_gpu_num.to_numpy()[1100:2000], index=idx[1100:2000])
    assert backtest.published_span(arrivals, published) == (1100, 2000)
    r = backtest.run(arrivals, "1h", published)
    win = backtest.window(arrivals, 6, 1100, 2000)
    assert r["origins"] == len(win.origins) and win.origins[-1] + 6 < 2000
    assert r["test_start"] == str(idx[1100])
    with pytest.raises(UserError, match=r"no value for .* \(1 of the 900 steps"):
        backtest.published_span(arrivals, published.drop(idx[1500]))
    with pytest.raises(UserError, match=r"a bin at .*, between the steps of .* \(900 such\)"):
        backtest.published_span(arrivals, published.set_axis(idx[1100:2000] + pd.Timedelta("5min")))
    finer = published.set_axis(idx[1100:2000] + pd.Timedelta("5min"))
    with pytest.raises(UserError, match=r"\(900 such\)"):  # a 5-min grid over a 10-min series
        backtest.published_span(arrivals, pd.concat([published, finer]))
    busy = next(i for i in range(1100, 2000) if df.running_gpu_num[i : i + 6].all())
    with pytest.raises(UserError, match="the test window covers 5 steps; a forecast 6 steps"):
        backtest.run(arrivals, "1h", published[idx[busy] : idx[busy + 4]])
    one = backtest.run(arrivals, "1h", published[idx[busy] : idx[busy + 5]])  # a horizon exactly
    assert one["origins"] == 1
    with pytest.raises(UserError, match="covers none of"):
        backtest.published_span(arrivals, published.set_axis(idx[1100:2000] + pd.Timedelta("400D")))


def test_ratio_interval_separates_a_clear_win_from_noise():
    rng = np.random.default_rng(3)
    actual = rng.normal(100, 10, 40)
    rival = actual + rng.normal(0, 5, 40)
    assert backtest.ratio_interval(actual, rival, rival) == (1.0, 1.0)
    lo, hi = backtest.ratio_interval(actual, actual + rng.normal(0, 2, 40), rival)
    assert hi < 1.0  # errors a fifth of the rival's: a win under any resampling
    lo, hi = backtest.ratio_interval(actual, actual + rng.normal(0, 5, 40), rival)
    assert lo < 1.0 < hi  # as good as the rival: the interval straddles one


def test_pooled_siblings_are_cut_at_the_test_start(tmp_path, capsys):
    # The CLI pools CSVs of the same format found beside the one it backtests (ten-minute
    # samples: a tenth of the rows to fit, the same cut at the test start to check).
    target, sib_df = (synthetic(days=14, seed=s, step_min=10) for s in (4, 5))
    target.to_csv(tmp_path / "vcA.csv", index=False)
    sib_df.to_csv(tmp_path / "vcB.csv", index=False)
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    assert main(["forecast", "backtest", str(tmp_path / "vcA.csv"), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["pooled_with"] == ["vcB"] and "phases" not in first
    sib = series.from_frame(sib_df, "occupancy", name="vcB")
    start = sib.index.searchsorted(pd.Timestamp(first["test_start"]))
    tampered = sib.values.copy()
    tampered[start:] = 5_000.0  # sibling data from the test window must not be used
    again = backtest.run(
        series.from_frame(target, "occupancy", name="vcA"),
        "1h",
        pool=[series.Series("vcB", "occupancy", tampered, sib.index, 10)],
    )
    # every figure, intervals included (their quantiles come from the pooled rows too): the
    # WAPE alone stays put when the regression shrinks to persistence
    assert again["pooled_with"] == ["vcB"] and json.loads(json.dumps(again)) == first


def test_a_trace_without_a_week_before_its_test_window_is_told_how_long_it_must_be(
    tmp_path, capsys
):
    path = tmp_path / "s.csv"  # six days: two for training, but no week for seasonal-naive
    synthetic(days=6, step_min=10).to_csv(path, index=False)
    assert main(["forecast", "backtest", str(path), "--no-pool"]) == 2
    assert (
        "s: too short for a backtest (864 steps; needs a week of history before the test "
        "window, the last 30%: over 1441)\n"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["forecast", "backtest", "nope.csv"], "no such file"),
        (["forecast", "backtest", "{csv}", "--horizon", "3h"], "unknown horizon"),
        (["forecast", "backtest", "{csv}", "--target", "arrivals"], "submit_gpu_num"),
        (["forecast", "backtest", "{csv}"], "too short for a backtest"),
    ],
)
def test_backtest_cli_bad_input(tmp_path, capsys, argv, message):
    path = tmp_path / "s.csv"
    synthetic(days=2).to_csv(path, index=False)
    assert main([a.format(csv=path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_plot_writes_png(tmp_path):
    from xdscheduler.forecast import plot

    path = tmp_path / "s.csv"
    synthetic(days=10, seed=3, step_min=10).to_csv(path, index=False)
    out = tmp_path / "wave.png"
    assert main(["forecast", "plot", str(path), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    w = plot.waveform(series.load(path, "occupancy"), plot.LEADS_1H)
    assert list(w["horizon_min"]) == [10, 20, 30, 60]


def test_a_history_too_short_to_plot_says_whose_and_how_long_it_must_be(tmp_path, capsys):
    """10-minute steps: the 24 h panel's model needs 4.9 days; 4 days are refused before any
    model is fitted, naming the series; 5 days plot."""
    from xdscheduler.forecast.history import min_history

    need = min_history(144, 10)
    assert 4 * 144 < need < 5 * 144
    for days, code in ((4, 2), (5, 0)):
        path = tmp_path / f"d{days}.csv"
        synthetic(days=days, seed=3, step_min=10).to_csv(path, index=False)
        assert main(["forecast", "plot", str(path), "--out", str(tmp_path / "w.png")]) == code
    err = capsys.readouterr().err
    assert "d4: too little history to forecast 1440 min ahead: 576 steps of 10 min" in err
    assert f"it needs at least {need} (4.9 days)" in err


# --- real traces (skipped without ../shared/data) ---


def test_helios_occupancy_meets_accuracy(data_dir):
    s = series.load(data_dir / "demand" / "helios_earth" / "vcJLV.csv", "occupancy")
    r = backtest.run(s, "1h")
    assert r["accuracy"] >= 0.88
    assert r["wape"] <= r["baselines"]["persistence"]["wape"]
    assert r["wape"] < r["baselines"]["auto_ets"]["wape"]


def test_venus_arrivals_beat_persistence_and_lucid(data_dir):
    venus = data_dir / "demand" / "venus"
    s = series.load(venus / "venus_cluster_throughput_10min.csv", "arrivals")
    r = backtest.run(s, "10m", series.load_lucid(venus / "lucid_venus_prediction_2020-09.csv"))
    assert r["test_start"].startswith("2020-09-01")
    assert r["wape"] < r["baselines"]["persistence"]["wape"]
    assert r["wape"] < r["baselines"]["lucid"]["wape"]


def test_change_distribution_median_moves_only_on_a_clear_majority():
    from xdscheduler.forecast.history import ChangeDistribution

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 6000)
    # x > 0.5: a rise 80% of the time; elsewhere no change 80% of the time, else ±.
    rise = (x > 0.5) & (rng.uniform(size=x.size) < 0.8)
    noise = ~rise & (rng.uniform(size=x.size) < 0.2)
    change = np.where(rise, rng.uniform(0.1, 0.3, x.size), 0.0)
    change[noise] = rng.choice([-0.2, 0.2], noise.sum())
    X = pd.DataFrame({"x": x})
    dist = ChangeDistribution(seed=0).fit(X, change)
    probe = np.array([[0.9], [-0.5]])
    up, flat = dist.median(probe)
    assert 0.1 <= up <= 0.3 and flat == 0.0
    # Doubt puts mass on "no change": at one half no distribution can move any more.
    assert dist.median(probe, doubt=0.2)[0] <= up
    assert np.all(dist.median(probe, doubt=0.5) == 0.0)


def test_shrink_weights_keep_persistence_without_a_clear_gain():
    from xdscheduler.forecast.history import DOUBT_GRID, _shrink_weights

    rng = np.random.default_rng(1)
    actual = rng.normal(0, 1, 4000)
    noise = rng.normal(0, 1, (4000, 1 + len(DOUBT_GRID)))  # correctors with no skill
    noise[:, -1] = 0.0  # the last doubt level is persistence itself
    assert _shrink_weights(actual, noise, np.ones(4000), h=10) == (0.0, 1.0)
    skilled = noise.copy()
    skilled[:, 1] = actual  # the undoubted median knows the answer
    assert _shrink_weights(actual, skilled, np.ones(4000), h=10) == (0.0, 0.0)


def test_a_regression_gain_must_clear_two_standard_errors_to_be_kept(monkeypatch):
    from xdscheduler.forecast import history

    rng = np.random.default_rng(0)
    actual = rng.normal(0, 1, 4000)
    pred = np.zeros((4000, 1 + len(history.DOUBT_GRID)))  # no change distribution
    pred[:, 0] = 0.05 * actual + rng.normal(0, 0.3, 4000)  # a little skill, much noise
    weight = {}
    for k in (1.0, 2.0):
        monkeypatch.setattr(history, "EVIDENCE_SE", k)
        weight[k] = history._shrink_weights(actual, pred, np.ones(4000), h=10)[0]
    assert 0 < weight[2.0] < weight[1.0]  # a weak gain is shrunk further toward persistence
    pred[:, 0] = 0.05 * actual + rng.normal(0, 0.05, 4000)  # a clear gain passes at two SE
    assert history._shrink_weights(actual, pred, np.ones(4000), h=10)[0] == 1.0


def test_shifted_phases_diagnostic_reuses_the_model_and_moves_the_windows():
    s = series.from_frame(synthetic(days=14, seed=6), "occupancy", name="vcS")
    r = backtest.run(s, "1h", phases=3)
    shifts = [p["shift_steps"] for p in r["phases"]]
    assert shifts == [0, 20, 40]
    first = r["phases"][0]
    # The unshifted window is the backtest itself: the same WAPEs.
    assert first["wape"]["hybrid"] == pytest.approx(r["wape"])
    for name, m in r["baselines"].items():
        assert first["wape"][name] == pytest.approx(m["wape"])
    assert first["lowest_wape"] == r["lowest_wape"]
    assert len({p["wape"]["persistence"] for p in r["phases"]}) == 3  # other windows
    # The blend's direct member is measured beside it, never counted as a baseline.
    assert r["blend_horizons"] == [60, 10] and "direct" not in r["baselines"]
    for p in r["phases"]:
        best = min(v for k, v in p["wape"].items() if k not in ("hybrid", "direct"))
        assert "direct" in p["wape"] and p["lowest_wape"] == (p["wape"]["hybrid"] < best)
    assert first["wape"]["direct"] == pytest.approx(r["direct_model"]["wape"])


def test_an_exact_baseline_or_no_demand_gives_no_absurd_ratio():
    """A cluster idle through the test window, or one a baseline predicts exactly (demand
    switching 0/50 every 12 h: last week's window is right), made ratios of 1e10 and more
    when errors over nothing were floored at 1e-12."""
    from xdscheduler.forecast.cli import ratio_text

    assert list(backtest.error_ratio([0.5, 0.0, 0.2], [0.0, 0.0, 0.4])) == [np.inf, 1.0, 0.5]
    index = pd.date_range("2020-05-01", periods=21 * 144, freq="10min")
    square = np.where((np.arange(len(index)) // 72) % 2 == 0, 50.0, 0.0)
    out = backtest.run(series.Series("vcSquare", "occupancy", square, index, 10), "1h")
    assert out["baselines"]["seasonal_naive"]["wape"] == 0.0
    assert out["vs_best_baseline"]["wape_ratio"] is None
    assert ratio_text(out) == (
        "undefined: seasonal_naive is exact on every origin of the test window"
    )
    idle = square * (np.arange(len(index)) < 0.6 * len(index))
    with pytest.raises(UserError, match=r"vcIdle: no demand at all in the test window"):
        backtest.run(series.Series("vcIdle", "occupancy", idle, index, 10), "1h")


def test_a_series_with_missing_rows_says_it_filled_them(xds_log):
    """Gaps are filled (occupancy holds its last value) and then forecast and scored as if
    observed: where more than a few steps are missing, the reader says how many."""
    frame = synthetic(days=3)
    with xds_log.at_level("WARNING"):
        series.from_frame(frame, "occupancy", "vcWhole")
        assert "have no row" not in xds_log.text
        series.from_frame(frame.drop(index=range(1000, 1500)), "occupancy", "vcGap")
    assert "vcGap: 11.6% of the 1-min steps have no row (the longest gap 0 days 08:20" in (
        xds_log.text
    )


def test_the_backtest_benchmark_skips_what_it_cannot_score_and_says_why(tmp_path):
    """A sibling with an empty cell, a cut with no week before its test window, a published
    prediction of another month: each a skipped row with its reason, never a traceback.
    Files saved under another case (vcA.CSV, Lucid_...) are found."""
    from benchmarks import bench_forecast_backtest as bench
    from xdscheduler.forecast.cli import _lucid

    (tmp_path / "helios_earth").mkdir()
    synthetic(days=12, seed=1, step_min=10).to_csv(tmp_path / "helios_earth/vcA.CSV", index=False)
    broken = synthetic(days=12, seed=2, step_min=10).astype({"running_gpu_num": object})
    broken.loc[40, "running_gpu_num"] = ""
    broken.to_csv(tmp_path / "helios_earth/vcBroken.csv", index=False)
    skipped: list[list] = []
    occupancy = bench.occupancy_series(tmp_path, skipped)
    assert [s.name for s, _ in occupancy] == ["vcA"]
    assert skipped[0][:2] == ["vcBroken", "read"] and "row 41" in skipped[0][2]

    # 12 days: the 70% cut leaves 5.9 days before its test window, the 85% cut over a week
    early = bench.earlier(occupancy, skipped)
    assert [(share, r["horizon"]) for share, r in early] == [(0.85, "1h"), (0.85, "6h")]
    assert [row[1] for row in skipped[1:]] == ["1h, first 70% kept", "6h, first 70% kept"]
    assert "needs a week of history" in skipped[1][2]

    (tmp_path / "venus").mkdir()
    t = pd.date_range("2020-04-01", periods=12 * 144, freq="10min")
    arrivals = pd.DataFrame({"time": t, "submit_gpu_num": np.arange(len(t)) % 7})
    arrivals.to_csv(tmp_path / bench.VENUS, index=False)
    sept = pd.date_range("2020-09-01", periods=144, freq="10min")
    lucid = tmp_path / bench.LUCID.replace("lucid_venus", "Lucid_Venus")
    pd.DataFrame({"time": sept, "pred_gpu_num": 3.0}).to_csv(lucid, index=False)
    args = argparse.Namespace(target="arrivals", lucid=None, csv=tmp_path / bench.VENUS)
    assert len(_lucid(args)) == 144  # the CLI's default prediction beside the CSV
    assert bench.arrival_backtests(tmp_path, skipped) == []
    assert [row[1] for row in skipped[3:]] == ["10m", "1h"]
    assert "the published prediction covers none of" in skipped[3][2]
    assert bench.interval_summary([]) == []  # nothing scored at a horizon: no row, no crash


def test_the_backtest_benchmark_refuses_a_folder_with_nothing_to_score(
    tmp_path, monkeypatch, capsys
):
    """The trace in a folder the benchmark does not read: exit 2, saying what it found and
    what it needs."""
    from benchmarks import bench_forecast_backtest as bench

    (tmp_path / "demand/saturn").mkdir(parents=True)
    synthetic(days=3, step_min=10).to_csv(tmp_path / "demand/saturn/vcS.csv", index=False)
    monkeypatch.setenv("XDS_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["bench_forecast_backtest"])
    with pytest.raises(SystemExit) as done:
        bench.main()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "no demand backtest could be scored" in err and "found: saturn/vcS.csv" in err
    assert "helios_earth/vc*.csv" in err
