"""Training-phase recognition on a loss curve: warm-up, fast convergence, stable convergence.

Shape: with learning-rate warm-up over W steps, training progress is the summed learning rate
τ(t) (t²/2W during warm-up, then t − W/2), and loss follows a power law in it,
L = L∞ + A·(1 + τ/τ0)^−α. Fast convergence ends, by definition here, when the descent rate
has fallen to STABLE_RATE of its value at the end of warm-up (at the first step, without one).

Recognition: a robust least-squares fit of the shape above (spikes removed by a rolling median
and down-weighted by a soft-L1 loss) places both boundaries, once with W = 0 and once with W free
from a change point (ruptures, Binseg) on the smoothed descent rate. The warm-up is kept only
where BIC prefers it: a curve that falls fastest from its first step (a run without warm-up, or
one logged from after it) has none. A curve whose end is not below its start by more than its
noise has no such phases: it is labelled flat, or diverging where it rises by more than it.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import pandas as pd
import ruptures as rpt
from scipy.optimize import least_squares

from xdscheduler.errors import UserError
from xdscheduler.forecast.csvfile import by_key, numbers, read_csv

PHASES = ("warm-up", "fast convergence", "stable convergence")
FLAT, DIVERGING = 3, 4  # the labels of a curve without those phases, every step the same
NAMES = (*PHASES, "flat: no progress", "diverging: loss rising")
STABLE_RATE = 0.03
# A curve's start and end levels must differ by more than this many robust standard deviations
# of its step-to-step noise to count as a fall or a rise: a change within the noise band is no
# progress. (On generated curves of 300+ steps the fall is 1.8 to 100+ times this band; on
# white noise of 50 steps, 1 in 1000 crosses it.)
TREND_NOISE = 3.0
MIN_STEPS = 50
# recognise's robust fits take about 10 s per 200,000 steps (on 2 cores): a longer curve is
# refused rather than left to run for minutes.
MAX_STEPS = 200_000


def progress(t: np.ndarray, warmup: float) -> np.ndarray:
    w = max(warmup, 1e-6)
    return np.where(t < w, t**2 / (2 * w), t - w / 2)


def shape(t: np.ndarray, l_inf, amp, alpha, tau0, warmup) -> np.ndarray:
    return l_inf + amp * (1 + progress(t, warmup) / tau0) ** (-alpha)


def stable_start(t_max: int, warmup: float, alpha: float, tau0: float) -> int:
    """First step after warm-up where the descent rate is STABLE_RATE of its value at W."""
    # After warm-up dτ/dt = 1, so the rate ∝ (1 + τ/τ0)^(−α−1): solve for the ratio.
    tau_w = progress(np.array([warmup]), warmup)[0]
    tau_s = (1 + tau_w / tau0) * STABLE_RATE ** (-1 / (alpha + 1)) * tau0 - tau0
    return int(min(np.ceil(tau_s + warmup / 2), t_max))


def labels_from(n: int, warmup: float, stable: int) -> np.ndarray:
    t = np.arange(n)
    return np.where(t < warmup, 0, np.where(t < stable, 1, 2))


def generate(seed: int, steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A loss curve from the scaling-law shape with warm-up, multiplicative noise and loss
    spikes, and its true per-step phase (0, 1, 2)."""
    rng = np.random.default_rng(seed)
    n = int(steps or rng.integers(2000, 10_000))
    warmup = float(n * rng.uniform(0.01, 0.08))
    l_inf, amp = rng.uniform(1.6, 3.0), rng.uniform(6.0, 9.0)
    alpha, tau0 = rng.uniform(0.3, 0.9), rng.uniform(2.0, 40.0)
    t = np.arange(n, dtype=float)
    clean = shape(t, l_inf, amp, alpha, tau0, warmup)
    noise = rng.normal(0, rng.uniform(0.005, 0.03), n)
    loss = clean * np.exp(noise + _spikes(rng, n, warmup))
    return loss, labels_from(n, warmup, stable_start(n, warmup, alpha, tau0))


def _spikes(rng, n: int, warmup: float) -> np.ndarray:
    out = np.zeros(n)
    for _ in range(rng.poisson(2)):
        at, decay = int(rng.uniform(warmup, n)), rng.uniform(5, 60)
        tail = np.arange(n - at)
        out[at:] += rng.uniform(0.05, 0.4) * np.exp(-tail / decay)
    return out


def recognise(loss: np.ndarray) -> np.ndarray:
    """Phase (0 warm-up, 1 fast, 2 stable) of every step of a loss curve; FLAT or DIVERGING at
    every step where the curve does not fall beyond its noise."""
    loss = np.asarray(loss, float)
    if (
        loss.ndim != 1
        or len(loss) < MIN_STEPS
        or not np.all(np.isfinite(loss))
        or np.any(loss <= 0)
    ):
        raise UserError(f"a loss curve needs at least {MIN_STEPS} positive, finite values")
    n = len(loss)
    log_loss = np.log(loss)
    trend = _without_descent(log_loss)
    if trend is not None:
        return np.full(n, trend)
    log_l = _smooth(log_loss, max(n // 200, 5), "median")
    t = np.arange(n, dtype=float)
    without = _fit(t, log_l)
    w0 = _warmup_guess(log_l)
    with_warmup = _fit(t, log_l, without, {w0, 2 * w0, int(0.04 * n)})
    # a warm-up shorter than a step is none: no step of the curve lies inside it
    keep = with_warmup[-1] >= 1 and _bic(log_loss, with_warmup, 5) < _bic(log_loss, without, 4)
    _, _, alpha, tau0, warmup = with_warmup if keep else without
    return labels_from(n, warmup, stable_start(n, warmup, alpha, tau0))


def _smooth(x: np.ndarray, window: int, stat: str) -> np.ndarray:
    """Centred rolling `stat` ("median", "mean"). Past the ends the curve is continued by point
    reflection, so a trend keeps its slope there: a window cut short at the start would flatten
    the first steps of a falling curve into what looks like a warm-up."""
    h = window // 2
    padded = np.r_[2 * x[0] - x[h:0:-1], x, 2 * x[-1] - x[-2 : -h - 2 : -1]]
    rolled = pd.Series(padded).rolling(2 * h + 1, center=True)
    return getattr(rolled, stat)().to_numpy()[h : h + len(x)]


def _bic(log_loss: np.ndarray, params: np.ndarray, free: int) -> float:
    """Bayesian information criterion of a fit, on the unsmoothed curve (whose step-to-step noise
    is close to independent, as the criterion assumes): a warm-up is kept only where it explains
    the curve's first steps better than its extra parameter costs."""
    n = len(log_loss)
    rss = float(np.sum((np.log(shape(np.arange(n), *params)) - log_loss) ** 2))
    return n * np.log(rss / n) + free * np.log(n)


def _without_descent(log_loss: np.ndarray) -> int | None:
    """FLAT or DIVERGING where the level of the curve's last steps is not below that of its
    first by more than TREND_NOISE noise deviations (DIVERGING: above by more); None where it
    falls. Levels: medians over the first and last 2% of steps (at least 5). Noise: the robust
    deviation of step-to-step changes over √2 (what a slow trend does not inflate, a spike
    barely moves)."""
    k = max(len(log_loss) // 50, 5)
    drop = float(np.median(log_loss[:k]) - np.median(log_loss[-k:]))
    step = np.diff(log_loss)
    noise = 1.4826 * float(np.median(np.abs(step - np.median(step)))) / np.sqrt(2)
    if drop > TREND_NOISE * noise:
        return None
    return DIVERGING if -drop > TREND_NOISE * noise else FLAT


def _warmup_guess(log_l: np.ndarray) -> int:
    """Change point of the smoothed descent rate: where its fast rise turns into decay."""
    n = len(log_l)
    rate = -np.gradient(_smooth(log_l, max(n // 100, 5), "mean"))
    head = rate[: n // 3]
    bkps = rpt.Binseg(model="l2", min_size=max(n // 200, 5)).fit(head).predict(n_bkps=2)
    return int(bkps[0])


def _fit(
    t: np.ndarray, log_l: np.ndarray, start: np.ndarray | None = None, warmups: Collection[int] = ()
) -> np.ndarray:
    """Robust fit of `shape` to a smoothed log-loss curve: (l_inf, amp, alpha, tau0, warmup).
    Without `warmups`, W is held at 0; with them, W is free and the fit starts from `start` (the
    fit without warm-up, which this model contains) at each of those W, so it fits no worse."""
    lo_l = float(np.exp(log_l.min()))
    # alpha and tau0 may grow large together: an exponential decay is their limit
    lower, upper = [0, 1e-3, 0.05, 0.1, 0.0], [lo_l, 100, 50.0, 1e6, len(t) / 2]
    generic = [0.8 * lo_l, float(np.exp(log_l[0])) - 0.8 * lo_l, 0.5, 10.0]
    guesses = [[*start[:4], w] for w in warmups] if start is not None else [generic]
    best, fixed = None, [0.0] * (5 - len(guesses[0]))
    for guess in guesses:
        bounds = (lower[: len(guess)], upper[: len(guess)])
        x0 = np.clip(guess, np.add(bounds[0], 1e-6), np.subtract(bounds[1], 1e-6))
        res = least_squares(
            lambda p: np.log(shape(t, *p, *fixed)) - log_l,
            x0,
            bounds=bounds,
            loss="soft_l1",
            f_scale=0.02,
            max_nfev=400,
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # there is always a guess
    return np.r_[best.x, fixed]


def label_csv(path: str | Path) -> dict:
    """Phases of the loss curve in a CSV ('loss', optional 'step'): rows sorted by step, rows of
    one step averaged."""
    where = str(path)
    df = read_csv(path, "loss curve", [("loss",)], optional=("step",))
    loss = numbers(df, "loss", where, above=True)
    # steps up to 1e15: whole numbers a float holds exactly
    steps = (
        numbers(df, "step", where, high=1e15, whole=True) if "step" in df else np.arange(len(loss))
    )
    curve = by_key(steps, loss)
    if not MIN_STEPS <= len(curve) <= MAX_STEPS:
        raise UserError(
            f"{where}: {len(curve):,} steps; a loss curve of {MIN_STEPS} to "
            f"{MAX_STEPS:,} steps is read (thin a longer one: every k-th row)"
        )
    labels = recognise(curve.to_numpy())
    steps = curve.index.to_numpy()
    edges = np.flatnonzero(np.diff(labels)) + 1
    starts, ends = np.r_[0, edges], np.r_[edges, len(labels)] - 1
    return {
        "steps": len(labels),
        "phase": [NAMES[k] for k in labels],
        "segments": [
            {"phase": NAMES[labels[s]], "start": int(steps[s]), "end": int(steps[e])}
            for s, e in zip(starts, ends, strict=True)
        ],
    }


def accuracy(seeds) -> float:
    """Mean per-step accuracy of `recognise` on generated curves."""
    scores = []
    for seed in seeds:
        loss, truth = generate(seed)
        scores.append(float(np.mean(recognise(loss) == truth)))
    return float(np.mean(scores))
