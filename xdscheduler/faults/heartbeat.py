"""Phi-accrual failure detection (Hayashibara et al., SRDS 2004), one estimator per sender.

phi(t) = -log10 P(next heartbeat later than t - last), with inter-arrival times modelled as
normal with each sender's own mean and variance over a sliding window: a sender with jittery
heartbeats needs a longer silence before it is suspected, a regular one is suspected sooner.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr

LN10 = np.log(10.0)
PHI_THRESHOLD = 8.0  # P(benign gap this long) ≈ 1e-8 under the sender's own model
WINDOW = 100  # intervals kept per sender
MIN_STD_FRACTION = 0.1  # std floor, a fraction of the mean: a few samples never look exact
PRIOR_SAMPLES = 4  # the declared period seeds the window until real intervals arrive


def phi_from(elapsed, mean, std):
    """-log10 of the normal tail beyond `elapsed`; arrays broadcast, never inf."""
    std = np.maximum(std, MIN_STD_FRACTION * mean)
    z = (np.asarray(elapsed, float) - mean) / std
    return -log_ndtr(-z) / LN10


class PhiAccrual:
    """Heartbeat arrival windows for a fixed list of senders, phi for all of them at once."""

    def __init__(
        self,
        senders: list[str],
        period_s: float,
        window: int = WINDOW,
        threshold: float = PHI_THRESHOLD,
    ):
        self.senders = list(senders)
        self.index = {s: i for i, s in enumerate(self.senders)}
        self.threshold = threshold
        n = len(self.senders)
        self._buf = np.zeros((n, window))  # ring buffers of intervals
        self._buf[:, :PRIOR_SAMPLES] = period_s
        self._count = np.full(n, PRIOR_SAMPLES)  # valid entries (the prior counts as a few)
        self._pos = np.full(n, PRIOR_SAMPLES % window)
        self._sum = self._buf.sum(axis=1)  # running sums: O(1) per heartbeat, no window scan
        self._sq = (self._buf**2).sum(axis=1)
        self.last = np.full(n, np.nan)  # last arrival; nan before the first one

    def heartbeat(self, sender: str, t: float) -> None:
        i = self.index[sender]
        if not np.isnan(self.last[i]) and t > self.last[i]:
            w, pos, x = self._buf.shape[1], self._pos[i], t - self.last[i]
            old = self._buf[i, pos]
            self._sum[i] += x - old
            self._sq[i] += x * x - old * old
            self._buf[i, pos] = x
            self._pos[i] = (pos + 1) % w
            self._count[i] = min(self._count[i] + 1, w)
        if np.isnan(self.last[i]) or t > self.last[i]:
            self.last[i] = t

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        mean = self._sum / self._count
        return mean, np.sqrt(np.maximum(self._sq / self._count - mean**2, 0.0))

    def phi(self, now: float) -> np.ndarray:
        """phi per sender at `now`; 0 for a sender never heard from."""
        mean, std = self.stats()
        out = phi_from(now - self.last, mean, std)
        return np.where(np.isnan(self.last), 0.0, out)

    def suspected(self, now: float) -> list[str]:
        return [self.senders[i] for i in np.nonzero(self.phi(now) >= self.threshold)[0]]
