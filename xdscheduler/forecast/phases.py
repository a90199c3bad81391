"""Training-phase recognition on a loss curve: warm-up, fast convergence, stable convergence.

Shape: with learning-rate warm-up over W steps, training progress is the summed learning rate
τ(t) (t²/2W during warm-up, then t − W/2), and loss follows a power law in it,
L = L∞ + A·(1 + τ/τ0)^−α. Fast convergence ends, by definition here, when the descent rate
has fallen to STABLE_RATE of its value at the end of warm-up.

Recognition: a change point (ruptures, Binseg) on the smoothed descent rate seeds the warm-up
length; a robust least-squares fit of the shape above (spikes removed by a rolling median and
down-weighted by a soft-L1 loss) then places both boundaries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import ruptures as rpt
from scipy.optimize import least_squares

from xdscheduler.errors import UserError

PHASES = ("warm-up", "fast convergence", "stable convergence")
STABLE_RATE = 0.03


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
    """Phase (0 warm-up, 1 fast, 2 stable) of every step of a loss curve."""
    loss = np.asarray(loss, float)
    if loss.ndim != 1 or len(loss) < 50 or not np.all(np.isfinite(loss)) or np.any(loss <= 0):
        raise UserError("a loss curve needs at least 50 positive, finite values")
    n = len(loss)
    log_l = np.log(
        pd.Series(loss).rolling(max(n // 200, 5), center=True, min_periods=1).median().to_numpy()
    )
    t = np.arange(n, dtype=float)
    params = _fit(t, log_l, _warmup_guess(log_l))
    _, _, alpha, tau0, warmup = params
    return labels_from(n, warmup, stable_start(n, warmup, alpha, tau0))


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
        x0 = [0.8 * lo_l, float(np.exp(log_l[0])) - 0.8 * lo_l, 0.5, 10.0, float(max(w, 1))]
        bounds = ([0, 1e-3, 0.05, 0.1, 0.0], [lo_l, 100, 3.0, 1e4, len(t) / 2])
        x0 = np.clip(x0, np.add(bounds[0], 1e-6), np.subtract(bounds[1], 1e-6))
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
    return best.x


def label_csv(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    df = pd.read_csv(path)
    if "loss" not in df.columns:
        raise UserError(f"{path}: needs a 'loss' column (found {', '.join(df.columns)})")
    loss = pd.to_numeric(df["loss"], errors="coerce").to_numpy(float)
    steps = df["step"].to_numpy() if "step" in df.columns else np.arange(len(loss))
    labels = recognise(loss)
    edges = np.flatnonzero(np.diff(labels)) + 1
    starts, ends = np.r_[0, edges], np.r_[edges, len(labels)] - 1
    return {
        "steps": len(labels),
        "phase": [PHASES[k] for k in labels],
        "segments": [
            {"phase": PHASES[labels[s]], "start": int(steps[s]), "end": int(steps[e])}
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
