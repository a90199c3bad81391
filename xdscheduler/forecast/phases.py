"""Training-phase recognition on a loss curve: warm-up, fast convergence, stable convergence.

Shape: with learning-rate warm-up over W steps, training progress is the summed learning rate
τ(t) (t²/2W during warm-up, then t − W/2), and loss follows a power law in it,
L = L∞ + A·(1 + τ/τ0)^−α. Fast convergence ends, by definition here, when the descent rate
has fallen to STABLE_RATE of its value at the end of warm-up.

Recognition: a change point (ruptures, Binseg) on the smoothed descent rate seeds the warm-up
length; a robust least-squares fit of the shape above (spikes removed by a rolling median and
down-weighted by a soft-L1 loss) then places both boundaries. A curve whose end is not below its
start by more than its noise has no such phases: it is labelled flat, or diverging where it
rises by more than its noise.
"""

from __future__ import annotations

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
    trend = _without_descent(np.log(loss))
    if trend is not None:
        return np.full(n, trend)
    log_l = np.log(
        pd.Series(loss).rolling(max(n // 200, 5), center=True, min_periods=1).median().to_numpy()
    )
    t = np.arange(n, dtype=float)
    params = _fit(t, log_l, _warmup_guess(log_l))
    _, _, alpha, tau0, warmup = params
    return labels_from(n, warmup, stable_start(n, warmup, alpha, tau0))


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
    rate = -np.gradient(
        pd.Series(log_l).rolling(max(n // 100, 5), center=True, min_periods=1).mean().to_numpy()
    )
    head = rate[: n // 3]
    bkps = rpt.Binseg(model="l2", min_size=max(n // 200, 5)).fit(head).predict(n_bkps=2)
    return int(bkps[0])


def _fit(t: np.ndarray, log_l: np.ndarray, w0: int) -> np.ndarray:
    lo_l = float(np.exp(log_l.min()))
    best = None
    for w in {w0, max(w0 // 3, 1), 2 * w0, int(0.04 * len(t))}:
        guess = [0.8 * lo_l, float(np.exp(log_l[0])) - 0.8 * lo_l, 0.5, 10.0, float(max(w, 1))]
        bounds = ([0, 1e-3, 0.05, 0.1, 0.0], [lo_l, 100, 3.0, 1e4, len(t) / 2])
        x0 = np.clip(guess, np.add(bounds[0], 1e-6), np.subtract(bounds[1], 1e-6))
        res = least_squares(
            lambda p: np.log(shape(t, *p)) - log_l,
            x0,
            bounds=bounds,
            loss="soft_l1",
            f_scale=0.02,
            max_nfev=400,
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # the set of windows is never empty
    return best.x


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
