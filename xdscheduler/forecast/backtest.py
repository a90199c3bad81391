"""Rolling-origin backtest of the hybrid forecaster against baselines measured in the same run.

Origins step by the horizon over the test window (the last 30% of the series, or the span of a
published prediction); each forecasts the mean (occupancy) or total (arrivals) over the horizon.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.forecast.history import fit_history, future_mean, scale_of
from xdscheduler.forecast.series import Series

log = logging.getLogger(__name__)

TEST_FRACTION = 0.3


@dataclass(frozen=True)
class Window:
    origins: np.ndarray  # index of the last observed step before each forecast window
    actual: np.ndarray  # mean over the next h steps


def metrics(actual: np.ndarray, pred: np.ndarray) -> dict:
    """WAPE (absolute error over demand), its complement and sMAPE; WAPE and accuracy are
    None where the window holds no demand at all (an error over nothing is undefined)."""
    err = np.abs(actual - pred)
    demand = np.abs(actual).sum()
    wape = float(err.sum() / demand) if demand > 0 else None
    denom = np.abs(actual) + np.abs(pred)
    smape = float(np.mean(np.where(denom > 0, 2 * err / np.where(denom > 0, denom, 1), 0.0)))
    accuracy = None if wape is None else 1.0 - wape
    return {"accuracy": accuracy, "wape": wape, "smape": smape, "origins": len(actual)}


def error_ratio(ours, theirs):
    """Our error over theirs (< 1: ours is lower), elementwise: infinite where theirs is
    exactly 0 and ours is not, 1 where both are (a tie). Not floored: a floor turned an exact
    baseline into ratios of 1e10 and more."""
    ours, theirs = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(theirs > 0, ours / theirs, np.where(ours > 0, np.inf, 1.0))


def ratio_interval(
    actual: np.ndarray, pred: np.ndarray, best: np.ndarray, seed: int = 0, draws: int = 2000
) -> tuple[float, float | None]:
    """90% interval of WAPE(pred) / WAPE(best) over origins resampled in moving blocks
    (consecutive windows are correlated): how sure a win or loss over the test window is.
    The upper end is None where the baseline is exact on over 5% of the resamples
    (unbounded)."""
    n = len(actual)
    block = max(1, round(n ** (1 / 3)))
    starts = np.random.default_rng(seed).integers(0, n - block + 1, (draws, -(-n // block)))
    idx = (starts[:, :, None] + np.arange(block)).reshape(draws, -1)[:, :n]
    ours, theirs = np.abs(actual - pred)[idx].sum(1), np.abs(actual - best)[idx].sum(1)
    low, high = np.quantile(error_ratio(ours, theirs), [0.05, 0.95], method="inverted_cdf")
    return float(low), float(high) if np.isfinite(high) else None


def window(
    series: Series, h: int, test_start: int | None = None, test_end: int | None = None
) -> Window:
    """The test window: origins every `h` steps from `test_start` (default: the last
    TEST_FRACTION of the series), each horizon ending before step `test_end` (default: the
    series' end)."""
    n = len(series.values) if test_end is None else test_end
    start = int((1 - TEST_FRACTION) * n) if test_start is None else test_start
    if test_end is not None and start > n - h:
        raise UserError(
            f"{series.name}: the test window covers {n - start} steps; a forecast {h} steps "
            f"ahead needs at least {h}"
        )
    week = 7 * series.per_day + 1  # the seasonal-naive baseline looks a week before an origin
    if test_start is None and start < week:
        need = week / (1 - TEST_FRACTION)
        raise UserError(
            f"{series.name}: too short for a backtest ({n} steps; needs a week of history "
            f"before the test window, the last {TEST_FRACTION:.0%}: over {need:.0f})"
        )
    if start < week:
        raise UserError(
            f"{series.name}: needs a week of history before the test window ({week} steps; "
            f"it starts at step {start})"
        )
    if start > n - h:
        raise UserError(
            f"{series.name}: too short for a backtest at this horizon ({n} steps; needs over "
            f"{start + h + 1})"
        )
    origins = np.arange(start - 1, n - h - 1 + 1, h)
    origins = origins[origins + h < n]
    actual = future_mean(series.values, h)[origins]
    if not np.abs(actual).any():
        raise UserError(
            f"{series.name}: no demand at all in the test window (from "
            f"{series.index[origins[0] + 1]}): an error over demand (WAPE) is undefined there"
        )
    return Window(origins, actual)


def persistence(series: Series, win: Window) -> np.ndarray:
    return series.values[win.origins]


def seasonal_naive(series: Series, win: Window, h: int) -> np.ndarray:
    """The same window one week earlier."""
    week = 7 * series.per_day
    if np.any(win.origins - week < 0):
        raise UserError(f"{series.name}: needs a week of history before the test window")
    return future_mean(series.values, h)[win.origins - week]


def auto_ets(series: Series, win: Window, h: int) -> np.ndarray:
    """statsforecast AutoETS on horizon-long block means, fitted once on the data before the
    test window, then run forward (no refit) to each origin."""
    from statsforecast.models import AutoETS

    y = series.values
    first = win.origins[0] + 1
    offset = first % h
    n_blocks = (len(y) - offset) // h
    blocks = y[offset : offset + n_blocks * h].reshape(n_blocks, h).mean(axis=1)
    k0 = (first - offset) // h  # block index of the first forecast window
    per_day = series.per_day // h if series.per_day % h == 0 else 1
    season = per_day if 1 < per_day <= 24 else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoETS(season_length=season).fit(blocks[:k0])
        out = np.array(
            [model.forward(y=blocks[: k0 + j], h=1)["mean"][0] for j in range(len(win.origins))]
        )
    return np.maximum(out, 0.0)


def history_forecast(
    series: Series, win: Window, h: int, seed: int = 0, pooled=(), fitted: dict | None = None
):
    """The history model trained before the test window: on this series and on each pooled
    sibling up to the same moment in time (`pooled`: `poolable`'s siblings, each with its
    steps before the test window; no sibling data from the test window either). `fitted`:
    direct models already fitted on the same series and pool (`fit_history`). Returns
    (point, unit, direct point, model), as `forecasts` gives them."""
    others = [(sib.values, sib.index, end) for sib, end in pooled]
    model = fit_history(
        series.values,
        series.index,
        series.step_min,
        h,
        series.target,
        end=int(win.origins[0]) + 1,
        seed=seed,
        others=others,
        fitted=fitted,
    )
    return *forecasts(model, series, win.origins), model


def poolable(series: Series, first, pool) -> tuple[list[tuple[Series, int]], dict[str, str]]:
    """The siblings the history model trains on beside `series`, each with the steps of it
    before `first` (the test window's first time), and those left out, by name, with why:
    another step, or at most 3 days before that time."""
    used, left = [], {}
    for sib in pool:
        end = int(sib.index.searchsorted(first))
        if sib.step_min != series.step_min:
            left[sib.name] = f"a {sib.step_min:g}-min step, not {series.step_min:g}"
        elif end <= 3 * sib.per_day:
            left[sib.name] = f"{end * sib.step_min / 1440:.1f} days before {first}, not over 3"
        else:
            used.append((sib, end))
    return used, left


def forecasts(model, series: Series, origins: np.ndarray):
    """(point, unit) at the origins, and the point of the direct model of the horizon alone
    where the model blends in shorter horizons' (None otherwise: the comparison that measures
    what the blend buys); each member predicts once."""
    if len(set(model.horizons)) == 1:
        return *model.predict(series.values, series.index, origins), None
    each = model.predict_each(series.values, series.index, origins)
    return *model.mean_of(each), each[0][0]


def coverage(actual: np.ndarray, point: np.ndarray, unit: np.ndarray, rel_q: dict) -> dict:
    """Per interval (80%, 95%): the share of origins whose actual value fell inside, and the
    interval score (width plus 2/alpha times any miss, Gneiting & Raftery 2007) over the mean
    actual: lower is better, and a wide interval cannot buy coverage for free."""
    out = {}
    for level, (lo, hi) in {80: (0.1, 0.9), 95: (0.025, 0.975)}.items():
        low = np.maximum(point + rel_q[lo] * unit, 0.0)
        high = point + rel_q[hi] * unit
        miss = np.maximum(low - actual, 0.0) + np.maximum(actual - high, 0.0)
        score = (high - low + 2 / (1 - level / 100) * miss).mean()
        out[f"coverage{level}"] = float(np.mean((actual >= low) & (actual <= high)))
        out[f"interval_score{level}"] = float(score / max(np.abs(actual).mean(), 1e-12))
    return out


def lucid_forecast(series: Series, win: Window, h: int, lucid: pd.Series) -> np.ndarray:
    """The published per-bin prediction, summed over each window (as a mean per bin); the
    window lies within `published_span` (outside it, no bin is read)."""
    pred = lucid.reindex(series.index).to_numpy(float)
    return future_mean(np.nan_to_num(pred), h)[win.origins]


def published_span(series: Series, lucid: pd.Series) -> tuple[int, int]:
    """The steps of the series a published prediction covers, [first, last + 1): the test
    window, so that every model is scored where the prediction has a value. A step in that
    span without one is refused: scored as a prediction of nought it would sink the baseline."""
    lucid = lucid.sort_index()
    if lucid.empty:
        raise UserError("the published prediction has no bins")
    first = int(series.index.searchsorted(lucid.index[0]))
    end = int(series.index.searchsorted(lucid.index[-1], side="right"))
    if end <= first:
        raise UserError(
            f"the published prediction covers none of {series.name}: its bins run from "
            f"{lucid.index[0]} to {lucid.index[-1]}, the series from {series.index[0]} to "
            f"{series.index[-1]}"
        )
    steps = series.index[first:end]
    during = lucid.index[(lucid.index >= series.index[0]) & (lucid.index <= series.index[-1])]
    between = during[~during.isin(series.index)]
    if len(between):  # a finer grid: read on the series' steps alone, it would lose its scale
        raise UserError(
            f"the published prediction has a bin at {between[0]}, between the steps of "
            f"{series.name} ({len(between):,} such); its bins must fall on the series' "
            f"{series.step_min:g}-min steps"
        )
    missing = steps[~steps.isin(lucid.index)]
    if len(missing):
        raise UserError(
            f"the published prediction has no value for {missing[0]} ({len(missing):,} of the "
            f"{len(steps):,} steps of {series.name} from its first bin to its last lack one); "
            f"it needs one a {series.step_min:g}-min step of the series, at the same times"
        )
    return first, end


def has_statsforecast() -> bool:
    """Whether the AutoETS baseline can run: statsforecast (and its half-dozen dependencies) is
    the `baselines` extra, needed by nothing else."""
    found = importlib.util.find_spec("statsforecast") is not None
    if not found:
        log.warning(
            "statsforecast is not installed: the auto_ets baseline is left out "
            "(pip install 'xdscheduler[baselines]')"
        )
    return found


def baselines(series: Series, win: Window, h: int, lucid: pd.Series | None = None) -> dict:
    base = {
        "persistence": persistence(series, win),
        "seasonal_naive": seasonal_naive(series, win, h),
    }
    if has_statsforecast():
        base["auto_ets"] = auto_ets(series, win, h)
    if lucid is not None:
        base["lucid"] = lucid_forecast(series, win, h, lucid)
    return base


def shifted_phases(
    series: Series, h: int, win: Window, unshifted: dict, model, n: int
) -> list[dict]:
    """Diagnostic only, nothing is chosen on it: the fitted model and every baseline on test
    windows whose first origin moves on by k·h/n steps (k = 0..n-1), so the origins fall on
    other phases of the horizon. The model was trained before the unshifted start.
    `unshifted`: the forecasts already made on `win` itself, reused where the shift is 0
    ("direct": the blend's direct member alone, where there is one; not a baseline)."""
    out = []
    for k in range(n):
        shift = k * h // n
        w, fc = win, unshifted
        if shift:
            w = window(series, h, int(win.origins[0]) + 1 + shift)
            point, _, direct = forecasts(model, series, w.origins)
            fc = {"hybrid": point, **baselines(series, w, h)}
            if direct is not None:
                fc["direct"] = direct
        wape = {name: metrics(w.actual, v)["wape"] for name, v in fc.items()}
        best = min(v for name, v in wape.items() if name not in ("hybrid", "direct"))
        out.append({"shift_steps": shift, "wape": wape, "lowest_wape": wape["hybrid"] < best})
        # (window() refuses a window without demand: every WAPE here is a number)
    return out


def run(
    series: Series,
    horizon: str,
    lucid: pd.Series | None = None,
    seed: int = 0,
    pool=(),
    phases: int = 0,
    fitted: dict | None = None,
) -> dict:
    """Backtest at one horizon. `pool`: sibling series of the same trace to pool into the
    history model's training (cut at this test window's start time). `phases` > 0 adds the
    shifted-window diagnostic (`shifted_phases`) for occupancy. `fitted`: direct models
    already fitted on this series and pool, shared between horizons (`fit_history`)."""
    h = series.steps(horizon)
    test_start = test_end = None
    if lucid is not None:
        test_start, test_end = published_span(series, lucid)
    win = window(series, h, test_start, test_end)
    total = h if series.target == "arrivals" else 1  # arrivals: totals over the horizon
    used, left = poolable(series, series.index[win.origins[0] + 1], pool)
    point, unit, direct, model = history_forecast(series, win, h, seed, used, fitted)
    base = baselines(series, win, h, lucid)
    actual = win.actual * total
    out = {
        "series": series.name,
        "target": series.target,
        "horizon": horizon,
        "test_start": str(series.index[win.origins[0] + 1]),
        **metrics(actual, point * total),
        **coverage(win.actual, point, unit, model.rel_quantiles),
        # the constant interval (no swing) from the same residuals, for comparison
        "flat_intervals": coverage(
            win.actual,
            point,
            scale_of(series.values, series.per_day)[win.origins],
            model.flat_quantiles,
        ),
        "shrink_weight": model.weight,
        "median_doubt": model.doubt,
        "anchor_steps": model.anchor,
        "blend_horizons": model.horizons,
        "pooled_with": [sib.name for sib, _ in used],
        "not_pooled": left,
        "baselines": {k: metrics(actual, v * total) for k, v in base.items()},
    }
    best = min(out["baselines"], key=lambda k: out["baselines"][k]["wape"])
    lowest = out["baselines"][best]["wape"]
    out["lowest_wape"] = bool(out["wape"] < lowest)  # strictly: a tie is not a win
    ratio = float(error_ratio(out["wape"], lowest))
    out["vs_best_baseline"] = {
        "baseline": best,
        "wape_ratio": ratio if np.isfinite(ratio) else None,  # None: the baseline is exact
        "ratio_ci90": ratio_interval(actual, point * total, base[best] * total, seed),
    }
    if direct is not None:  # the blend's direct member alone (not a baseline)
        out["direct_model"] = metrics(actual, direct * total)
    out["tied_with"] = [k for k, v in out["baselines"].items() if v["wape"] == out["wape"]]
    if phases and series.target == "occupancy":
        unshifted = {"hybrid": point, **{k: v for k, v in base.items() if k != "lucid"}}
        if direct is not None:
            unshifted["direct"] = direct
        out["phases"] = shifted_phases(series, h, win, unshifted, model, phases)
    return out
