"""History-driven demand: a LightGBM model of the change from the last value.

Occupancy is persistent, so a direct model of the level loses to "the last value". This one
predicts the change over the horizon (scaled by the trailing day's level), and its output is
shrunk toward persistence by a weight chosen on two later folds of the training data only
(a two-standard-error rule: no clear gain, no change). Sibling series of the same trace can be
pooled into training, each cut at the same moment.

Prediction intervals are conformal: quantiles of the validation residuals, each divided by
the series' recent swing (the trailing day's typical change over the horizon) so that a calm
day gets a narrow interval and a lively one a wide one; pooled residuals from siblings of
other temperament are then comparable.

For occupancy a second corrector adds the median of a predicted distribution of the change:
under absolute error (WAPE) the best forecast is a median, and at 1 h most windows see no
change at all, so the last value is that median except where one direction is clearly more
likely. How much of the distribution to move onto "no change" first (its doubt) is chosen on
the same validation folds.

An occupancy forecast over a long horizon averages the direct model of that horizon with those
of the shorter ones (`blend_horizons`): demand persists, so they forecast it too, and they
learn short-lived moves from many more windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import lightgbm as lgb
import numpy as np
import pandas as pd

from xdscheduler.errors import UserError

WINDOWS_MIN = (10, 30, 60, 180, 360, 1440)  # trailing means, minutes
LAGS_MIN = (1, 10, 60, 360)  # differences, minutes
SHRINK_GRID = np.linspace(0.0, 1.0, 11)
# Doubt levels for the change distribution's median; 1.0 puts all mass on "no change"
# (persistence), so a series where the distribution does not validate keeps the last value.
DOUBT_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 1.0)
# A weight on the regression must beat the persistence-leaning choice by this many standard
# errors on validation: with one, the best of 121 candidates (weight x doubt) got through on
# noise. Over the 90 shifted 6 h test windows of benchmarks/bench_forecast_backtest.py (the
# full series and two earlier cuts), two give a geometric-mean WAPE ratio to the best baseline
# of 1.001 against 1.007 and win 51 against 48, the same at 1 h; Philly's clear 1 h gain passes.
EVIDENCE_SE = 2.0
# Occupancy persists, so a forecast of the next 10 minutes or hour is also one of the next
# 6 hours; and a short horizon has many more independent windows to learn the short-lived
# moves from (a job that fails within minutes, a flapping queue). An occupancy forecast is the
# equal-weight mean of the direct model for its horizon and those for each shorter horizon
# here (no weight to fit: equal weights are the combination that rarely loses). Over the 90
# shifted test windows of benchmarks/bench_forecast_backtest.py, against the direct model
# alone: 6 h wins 66 against 51 (geometric-mean WAPE ratio to the best baseline 0.989 against
# 1.001), 1 h 64 against 56 (0.965 against 0.970). Arrivals do not persist, and there the
# blend lost (Venus 1 h WAPE 0.870 against 0.863): none there.
BLEND_MIN = (10, 60, 360)
QUANTILES = (0.025, 0.1, 0.9, 0.975)  # of validation residuals: 80% and 95% intervals
# Small, heavily regularised trees: three weeks of one cluster is little data, and a model
# that overfits the training weeks loses to persistence (seen on Helios at 1 h and 6 h).
LGB_PARAMS = dict(
    objective="l1",
    learning_rate=0.05,
    num_leaves=7,
    min_data_in_leaf=200,
    bagging_fraction=0.8,
    bagging_freq=1,
    feature_fraction=0.8,
    lambda_l2=1.0,
    num_threads=1,
    verbosity=-1,
    deterministic=True,
)
ROUNDS = 100
MIN_ORIGINS = 50  # training windows the first validation fold needs at the least


def min_history(h: int, step_min: int) -> int:
    """Steps a model `h` steps ahead trains on at the least: its first validation fold trains
    on the first 60% of the windows that end in the history, each with a full day behind it,
    and needs MIN_ORIGINS of those."""
    return math.ceil((1440 // step_min + h + MIN_ORIGINS) / 0.6) + h + 1


def too_short(steps: int, h: int, step_min: int) -> str:
    need = min_history(h, step_min)
    return (
        f"too little history to forecast {h * step_min} min ahead: {steps} steps of {step_min} "
        f"min; it needs at least {need} ({need * step_min / 1440:.1f} days)"
    )


def future_mean(y: np.ndarray, h: int) -> np.ndarray:
    """out[t] = mean(y[t+1 .. t+h]); NaN where the window runs past the end."""
    c = np.concatenate([[0.0], np.cumsum(y)])
    out = np.full(len(y), np.nan)
    t = np.arange(len(y) - h)
    out[t] = (c[t + h + 1] - c[t + 1]) / h
    return out


def trailing_mean(y: np.ndarray, w: int) -> np.ndarray:
    return pd.Series(y).rolling(w, min_periods=1).mean().to_numpy()


def scale_of(y: np.ndarray, per_day: int) -> np.ndarray:
    """The trailing day's level (+1 so idle series do not divide by zero)."""
    return trailing_mean(y, per_day) + 1.0


def features(y: np.ndarray, index: pd.DatetimeIndex, step_min: int, h: int) -> pd.DataFrame:
    """Features at every origin t, using y[: t + 1] only, relative to the last value."""
    per_day = 1440 // step_min
    last, scale = y, scale_of(y, per_day)
    cols = {}  # no level or weekday features: they let the trees memorise the training weeks
    for w in sorted({max(m // step_min, 1) for m in WINDOWS_MIN}):
        cols[f"d_mean{w}"] = (last - trailing_mean(y, w)) / scale
    for k in sorted({max(m // step_min, 1) for m in LAGS_MIN}):
        cols[f"d_lag{k}"] = (last - _shift(y, k)) / scale
    for w in sorted({max(m // step_min, 2) for m in (60, 360)}):
        cols[f"std{w}"] = pd.Series(y).rolling(w, min_periods=2).std().to_numpy() / scale
    fut = future_mean(y, h)
    for name, lag in (("day", per_day), ("week", 7 * per_day)):
        # The same window one day / week earlier, relative to now: seasonality as a change.
        # (only when that window ended by now: no peeking past the origin)
        cols[f"{name}_ahead"] = (_shift(fut, lag) - last) / scale if lag >= h else np.nan
        cols[f"{name}_now"] = (_shift(y, lag) - last) / scale
    hours = index.hour + index.minute / 60.0
    angle = hours / 24 * 2 * np.pi
    cols["hour_sin"], cols["hour_cos"] = np.sin(angle), np.cos(angle)
    cols.update(_activity(y, per_day))
    return pd.DataFrame(cols)


def features_last(y: np.ndarray, end: pd.Timestamp, step_min: int, h: int) -> pd.DataFrame:
    """`features(...)` at the last origin only, in plain numpy: the online service's path."""
    per_day, n, last = 1440 // step_min, len(y), float(y[-1])
    scale = float(y[-per_day:].mean()) + 1.0
    cols = {}
    for w in sorted({max(m // step_min, 1) for m in WINDOWS_MIN}):
        cols[f"d_mean{w}"] = (last - y[-w:].mean()) / scale
    for k in sorted({max(m // step_min, 1) for m in LAGS_MIN}):
        cols[f"d_lag{k}"] = (last - y[-1 - k]) / scale if n > k else np.nan
    for w in sorted({max(m // step_min, 2) for m in (60, 360)}):
        cols[f"std{w}"] = y[-w:].std(ddof=1) / scale if n >= 2 else np.nan
    for name, lag in (("day", per_day), ("week", 7 * per_day)):
        o = n - 1 - lag  # the origin one day / week ago; its window must be observed
        ok = o >= 0 and lag >= h
        cols[f"{name}_ahead"] = (y[o + 1 : o + h + 1].mean() - last) / scale if ok else np.nan
        cols[f"{name}_now"] = (y[o] - last) / scale if o >= 0 else np.nan
    hours = end.hour + end.minute / 60.0
    angle = hours / 24 * 2 * np.pi
    cols["hour_sin"], cols["hour_cos"] = np.sin(angle), np.cos(angle)
    tail = y[-(per_day + 1) :]  # enough for the activity features at the last step
    cols.update({k: v[-1] for k, v in _activity(tail, per_day).items()})
    return pd.DataFrame({k: [float(v)] for k, v in cols.items()})


def recent_swing(y: np.ndarray, h: int, per_day: int, scale: np.ndarray | None = None):
    """The trailing day's mean |change over h steps|, in units of the day's level (`scale`:
    scale_of(y, per_day), passed where the caller has it already)."""
    change = np.abs(y - _shift(y, h))
    change[:h] = 0.0
    return trailing_mean(change, per_day) / (scale_of(y, per_day) if scale is None else scale)


def recent_swing_last(y: np.ndarray, h: int, per_day: int) -> float:
    """`recent_swing(...)` at the last step only, in plain numpy: the online service's path."""
    change = np.abs(y[h:] - y[:-h])[-per_day:] if len(y) > h else np.zeros(0)
    return float(change.sum()) / min(len(y), per_day) / (float(y[-per_day:].mean()) + 1.0)


def _activity(y: np.ndarray, per_day: int) -> dict[str, np.ndarray]:
    """How lively the series is: steps since it last changed, changes over 6 h and a day.
    Occupancy moves when jobs start or end; a quiet cluster tends to stay quiet."""
    step = np.r_[0.0, np.diff(y)]
    idx = np.arange(len(y))
    count = pd.Series((step != 0).astype(float))
    out = {
        "changes_6h": count.rolling(max(per_day // 4, 1), min_periods=1).sum().to_numpy(),
        "changes_day": count.rolling(per_day, min_periods=1).sum().to_numpy(),
    }
    scale = scale_of(y, per_day)
    # A job that just started often ends within the hour (failed or debug runs): the size
    # and age of the last rise and fall let the trees expect part of it to revert.
    for name, hit in (("change", step != 0), ("up", step > 0), ("down", step < 0)):
        last = np.maximum.accumulate(np.where(hit, idx, 0))
        age = np.minimum(idx - last, per_day)
        out[f"since_{name}"] = np.log1p(age)
        if name != "change":
            out[f"size_{name}"] = np.where(age < per_day, step[last], 0.0) / scale
    return out


def _shift(x: np.ndarray, k: int) -> np.ndarray:
    out = np.full(len(x), np.nan)
    out[k:] = x[:-k]
    return out


@dataclass
class HistoryModel:
    """Mean demand over the next `h` steps = last value + w · (predicted change)."""

    h: int
    step_min: int
    anchor: int = 1  # steps averaged for the value the change is predicted from (1: last)
    seed: int = 0
    max_samples: int = 20_000
    weight: float = 1.0  # on the regression's change
    doubt: float = 1.0  # share moved onto "no change" before the median is read (1: none)
    use_median: bool = False  # fit the change distribution as a second corrector
    val_wape: float = float("nan")  # on the validation folds (60% → 100% of training)
    # Interval quantiles in units of scale × (recent swing + swing_floor); the floor (the
    # validation swings' median) keeps a quiet day's interval from collapsing to a point.
    rel_quantiles: dict[float, float] = field(default_factory=dict)
    swing_floor: float = 0.0
    # The same residuals' quantiles in units of scale alone (one width for every day): the
    # earlier, constant interval, kept so that backtests measure what the swing buys.
    flat_quantiles: dict[float, float] = field(default_factory=dict)
    model: lgb.Booster | None = None
    dist: ChangeDistribution | None = None

    @property
    def per_day(self) -> int:
        return 1440 // self.step_min

    @property
    def horizons(self) -> list[int]:
        return [self.h]

    def fit(
        self, y: np.ndarray, index: pd.DatetimeIndex, end: int | None = None, others=()
    ) -> HistoryModel:
        """Train on origins whose whole target window lies before `end` (nothing after it),
        pooled with `others` ((y, index, end) of sibling series, each cut the same way);
        choose the shrink weight and the median's doubt on two later folds of that training
        data."""
        parts = [(y, index, len(y) if end is None else end), *others]
        per_part = max(self.max_samples // len(parts), 2000)
        tables = [
            (*self._table(py, pi), future_mean(py, self.h), pe - self.h - 1) for py, pi, pe in parts
        ]

        def rows(lo: float, hi: float, shift: int = 0):
            out = [
                (tab, self._origins(int(lo * tab[5]), int(hi * tab[5]) - shift, per_part))
                for tab in tables
            ]
            return [(tab, o) for tab, o in out if len(o)]

        if sum(len(o) for _, o in rows(0.0, 0.6, shift=self.h)) < MIN_ORIGINS:
            raise UserError(too_short(parts[0][2], self.h, self.step_min))
        folds: list[tuple[np.ndarray, ...]] = []  # (actual, pred, unit, swing, level) each
        for lo, hi in ((0.6, 0.8), (0.8, 1.0)):  # train before each fold, validate on it
            model, dist = self._train_on(rows(0.0, lo, shift=self.h))
            for (X, target, scale, swings, fut, _), fold in rows(lo, hi):
                folds.append(
                    (
                        target[fold],
                        self._changes(model, dist, X.iloc[fold]),
                        scale[fold],
                        swings[fold],
                        fut[fold],
                    )
                )
        actual, pred, unit, swing, level = (np.concatenate(c) for c in zip(*folds, strict=True))
        self.weight, self.doubt = _shrink_weights(actual, pred, unit, self.h)
        self.doubt = self.doubt if self.use_median else 1.0  # no distribution: no median moves
        resid = actual - self.weight * pred[:, 0] - pred[:, 1 + DOUBT_GRID.index(self.doubt)]
        self.val_wape = float((np.abs(resid) * unit).sum() / max(np.abs(level).sum(), 1e-9))
        self.swing_floor = float(np.median(swing)) or 1e-3
        spread = resid / (swing + self.swing_floor)
        self.rel_quantiles = {q: float(np.quantile(spread, q)) for q in QUANTILES}
        self.flat_quantiles = {q: float(np.quantile(resid, q)) for q in QUANTILES}
        self.model, self.dist = self._train_on(rows(0.0, 1.0))
        return self

    def _changes(self, model, dist, X) -> np.ndarray:
        """(n, 1 + len(DOUBT_GRID)): the regression's change, then the change distribution's
        median at each level of doubt (zeros without a distribution)."""
        X = np.asarray(X, float)
        meds = [dist.median(X, d) if dist is not None else np.zeros(len(X)) for d in DOUBT_GRID]
        return np.column_stack([model.predict(X), *meds])

    @property
    def _median_moves(self) -> bool:
        """Whether the change distribution's median can leave zero (from one half of doubt on,
        no median moves)."""
        return self.doubt < 0.5 and self.dist is not None

    def _delta(self, X) -> np.ndarray:
        """The weighted change; nothing to compute where both weights shrank to zero."""
        out, X = np.zeros(len(X)), np.asarray(X, float)
        if self.weight > 0:
            out += self.weight * _predict(self.model, X)
        if self.dist is not None and self._median_moves:
            out += self.dist.median(X, self.doubt)
        return out

    def _train_on(self, parts) -> tuple[lgb.Booster, ChangeDistribution | None]:
        if not parts:
            raise UserError("too little history to train a forecaster (no origins)")
        X = pd.concat([tab[0].iloc[o] for tab, o in parts])
        target = np.concatenate([tab[1][o] for tab, o in parts])
        dist = ChangeDistribution(seed=self.seed).fit(X, target) if self.use_median else None
        return self._train(X, target), dist

    def predict(
        self, y: np.ndarray, index: pd.DatetimeIndex, origins: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(point, unit) at each origin: the mean over the next h steps, and the unit of
        `rel_quantiles` (point + q · unit is the interval's q bound)."""
        X = features(y, index, self.step_min, self.h).iloc[origins]
        scales = scale_of(y, self.per_day)
        scale = scales[origins]
        point = np.maximum(self.base(y)[origins] + self._delta(X) * scale, 0.0)
        swing = recent_swing(y, self.h, self.per_day, scales)[origins]
        return point, scale * (swing + self.swing_floor)

    def predict_last(self, y: np.ndarray, end: pd.Timestamp) -> tuple[float, float]:
        """(point, unit) from the end of `y` (its last value observed at `end`)."""
        scale = float(y[-self.per_day :].mean()) + 1.0
        unit = scale * (recent_swing_last(y, self.h, self.per_day) + self.swing_floor)
        base = float(y[-self.anchor :].mean())
        if self.weight <= 0 and not self._median_moves:  # persistence: no features needed
            return max(base, 0.0), unit
        delta = float(self._delta(features_last(y, end, self.step_min, self.h))[0])
        return max(base + delta * scale, 0.0), unit

    def base(self, y: np.ndarray) -> np.ndarray:
        """What the model corrects: the last value (persistence) or a short trailing mean."""
        return trailing_mean(y, self.anchor) if self.anchor > 1 else y

    def _table(self, y, index):
        X = features(y, index, self.step_min, self.h)
        scale = scale_of(y, self.per_day)
        swing = recent_swing(y, self.h, self.per_day, scale)
        return X, (future_mean(y, self.h) - self.base(y)) / scale, scale, swing

    def _origins(self, lo: int, hi: int, max_samples: int | None = None) -> np.ndarray:
        lo = max(lo, self.per_day)  # a full day of history behind every training origin
        stride = max(1, (hi - lo) // (max_samples or self.max_samples))
        return np.arange(lo, max(hi, lo), stride)

    def _train(self, X: pd.DataFrame, target: np.ndarray) -> lgb.Booster:
        if len(X) < MIN_ORIGINS:
            raise UserError(f"too little history to train a forecaster ({len(X)} origins)")
        data = lgb.Dataset(X, target, free_raw_data=True)
        return lgb.train({**LGB_PARAMS, "seed": self.seed}, data, num_boost_round=ROUNDS)


@dataclass
class ChangeDistribution:
    """The change over the horizon as a distribution: LightGBM classes over bins of the
    (level-scaled) change, with "no change" a class of its own, since most hours of a cluster
    see no job start or end. The forecast is the distribution's median, the point that
    minimises absolute error: it leaves the last value only where the trees find one
    direction more likely than no change plus the other (L1 regression from zero rarely does,
    since its leaf medians sit on the zero mass)."""

    bins: int = 3  # per direction, at quantiles of the training changes' sizes
    seed: int = 0
    model: lgb.Booster | None = None
    values: list[np.ndarray] = field(default_factory=list)  # sorted changes in each class
    edges: tuple[np.ndarray, ...] = ()  # inner bin edges: falls, rises (after fit)

    def fit(self, X: pd.DataFrame, change: np.ndarray) -> ChangeDistribution:
        q = np.linspace(0, 1, self.bins + 1)[1:-1]
        up, down = change[change > 0], -change[change < 0]
        self.edges = (
            -np.quantile(down, q)[::-1] if len(down) else np.zeros(len(q)),
            np.quantile(up, q) if len(up) else np.zeros(len(q)),
        )
        label = self._label(change)
        self.values = [np.sort(change[label == k]) for k in range(2 * self.bins + 1)]
        params = {**LGB_PARAMS, "objective": "multiclass", "num_class": 2 * self.bins + 1}
        data = lgb.Dataset(X, label, free_raw_data=True)
        self.model = lgb.train({**params, "seed": self.seed}, data, num_boost_round=ROUNDS)
        return self

    def _label(self, change: np.ndarray) -> np.ndarray:
        """Classes from the largest fall (0) through no change (bins) to the largest rise."""
        down_edges, up_edges = self.edges
        label = np.full(len(change), self.bins)
        neg, pos = change < 0, change > 0
        label[neg] = np.searchsorted(down_edges, change[neg], side="right")
        label[pos] = self.bins + 1 + np.searchsorted(up_edges, change[pos], side="left")
        return label

    def median(self, X, doubt: float = 0.0) -> np.ndarray:
        """The median of each predicted distribution, read inside the class where the
        cumulative probability crosses one half from that class's training changes. `doubt`
        moves that share of every distribution onto "no change" first: a move then needs a
        clearer majority than one the trees found on their own training data."""
        p = (1.0 - doubt) * _predict(self.model, X)
        p[:, self.bins] += doubt
        cum = np.cumsum(p, axis=1)
        k = np.minimum((cum < 0.5).sum(axis=1), p.shape[1] - 1)
        rows = np.arange(len(k))
        before = np.where(k > 0, cum[rows, np.maximum(k - 1, 0)], 0.0)
        frac = np.clip((0.5 - before) / np.maximum(p[rows, k], 1e-12), 0.0, 1.0)
        out = np.zeros(len(k))
        for c in np.unique(k):  # one quantile call per class (at most 2 * bins + 1)
            hit, vals = k == c, self.values[c]
            out[hit] = np.quantile(vals, frac[hit]) if len(vals) else 0.0
        return out


def _predict(model: lgb.Booster | None, X) -> np.ndarray:
    """A fitted booster's predictions as an array."""
    if model is None:
        raise RuntimeError("predict before fit")
    return np.asarray(model.predict(X), dtype=float)


def _shrink_weights(actual, pred, unit, h: int) -> tuple[float, float]:
    """(regression weight, doubt): each candidate is the last value + a · the regression's
    change (column 0 of `pred`) + the change distribution's median at one level of doubt
    (columns 1..). Among those within EVIDENCE_SE standard errors of the best on validation, the
    smallest a (shrink toward persistence unless its gain is clear), then the lowest error:
    the doubt is the distribution's calibration, chosen by error alone."""
    grid = [(a, j) for a in SHRINK_GRID for j in range(len(DOUBT_GRID))]
    fc = np.stack([a * pred[:, 0] + pred[:, 1 + j] for a, j in grid])
    errs = np.abs(actual[None, :] - fc) * unit[None, :]
    best = int(np.argmin(errs.sum(axis=1)))
    # Standard error of the difference from the best, over blocks of h origins (overlapping
    # windows are correlated, so single origins would overstate the evidence).
    n_blocks = max(errs.shape[1] // h, 2)
    blocks = np.array_split(errs - errs[best], n_blocks, axis=1)
    per_block = np.stack([b.sum(axis=1) for b in blocks], axis=1)
    se = per_block.std(axis=1, ddof=1) * np.sqrt(n_blocks)
    total = errs.sum(axis=1)
    within = np.flatnonzero(total - total[best] <= EVIDENCE_SE * se)
    a, j = grid[within[np.lexsort((total[within], [grid[k][0] for k in within]))[0]]]
    return float(a), DOUBT_GRID[j]


@dataclass
class Ensemble:
    """The mean of history models' forecasts (forecast combination): for arrivals, models
    correcting different anchors; for occupancy, direct models of this horizon and shorter ones
    (`blend_horizons`). Intervals come from the members of the ensemble's own horizon, the
    first member's: a shorter member's residuals describe its own horizon."""

    members: list[HistoryModel]

    @property
    def h(self) -> int:
        return self.members[0].h

    @property
    def own(self) -> list[HistoryModel]:
        return [m for m in self.members if m.h == self.h]

    @property
    def weight(self) -> float:
        return float(np.mean([m.weight for m in self.own]))

    @property
    def doubt(self) -> float:
        return float(np.mean([m.doubt for m in self.own]))

    @property
    def anchor(self) -> list[int]:
        return [m.anchor for m in self.own]

    @property
    def horizons(self) -> list[int]:  # the members' (the ensemble's own first)
        return [m.h for m in self.members]

    @property
    def rel_quantiles(self) -> dict[float, float]:
        return self._mean_quantiles("rel_quantiles")

    @property
    def flat_quantiles(self) -> dict[float, float]:
        return self._mean_quantiles("flat_quantiles")

    def _mean_quantiles(self, kind: str) -> dict[float, float]:
        return {q: float(np.mean([getattr(m, kind)[q] for m in self.own])) for q in QUANTILES}

    def predict(self, y, index, origins):
        return self.mean_of(self.predict_each(y, index, origins))

    def predict_each(self, y, index, origins) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every member's (point, unit), the ensemble's own horizon first."""
        return [m.predict(y, index, origins) for m in self.members]

    @staticmethod
    def mean_of(out: list[tuple]) -> tuple:
        """The ensemble's (point, unit) from its members': their mean, the first's unit."""
        return np.mean([p for p, _ in out], axis=0), out[0][1]

    def predict_last(self, y, end):
        point, unit = self.mean_of([m.predict_last(y, end) for m in self.members])
        return float(point), unit


def blend_horizons(h: int, step_min: int) -> list[int]:
    """The horizons (steps) whose direct models an occupancy forecast over `h` steps averages:
    `h` itself, then each shorter one of BLEND_MIN (`h` first)."""
    shorter = [m // step_min for m in BLEND_MIN if m % step_min == 0 and m // step_min < h]
    return [h, *sorted(shorter, reverse=True)]


def fit_history(
    y: np.ndarray,
    index: pd.DatetimeIndex,
    step_min: int,
    h: int,
    target: str,
    end: int | None = None,
    seed: int = 0,
    others=(),
    fitted: dict | None = None,
) -> HistoryModel | Ensemble:
    """Occupancy: corrections to persistence, direct models of `h` and of the shorter
    BLEND_MIN horizons averaged. Arrivals (bursty: the last value is a poor anchor, and which
    anchor validates best shifts from month to month): the mean of models anchored on the
    last value, the horizon's mean and the day's mean. `others`: sibling series to pool into
    training, as (y, index, end) cut before the test window. `fitted`: direct occupancy models
    by (horizon, end), filled and reused, so that several horizons fitted on the same data
    fit each model once."""
    if target == "occupancy":
        fitted = {} if fitted is None else fitted

        def direct(k: int) -> HistoryModel:
            if (k, end) not in fitted:
                model = HistoryModel(h=k, step_min=step_min, seed=seed, use_median=True)
                fitted[k, end] = model.fit(y, index, end, others)
            return fitted[k, end]

        members = [direct(k) for k in blend_horizons(h, step_min)]
        return members[0] if len(members) == 1 else Ensemble(members)
    per_day = 1440 // step_min
    return Ensemble(
        [
            HistoryModel(h=h, step_min=step_min, anchor=a, seed=seed).fit(y, index, end, others)
            for a in sorted({1, h, per_day})
        ]
    )
