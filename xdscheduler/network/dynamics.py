"""Links and loads over time: seeded fluctuation, latency spikes and load swings, or a replay.

Everything is sampled once on a grid (5 minutes by default) for the whole horizon, so every
policy of a study sees the same realisation and a lookup is an index.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.scenario import Scenario
from xdscheduler.textfile import read_frame

PHI = 0.9  # AR(1) memory per 5-minute step: fluctuations last tens of minutes
SPIKE_EVERY_S = 6 * 3600.0  # a latency spike per link about every six hours
SPIKE_MEAN_S = 600.0  # lasting ten minutes on average
SPIKE_FACTOR = (1.5, 3.0)  # RTT multiplied by this during a spike
BASE_LOAD = 0.10  # other tenants hold a tenth of each domain
LOAD_SWING = 0.20  # and their share swings by up to a fifth either way
REGIME_MEAN_S = 2 * 3600.0  # a load regime lasts two hours on average


def base_matrices(scn: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bandwidth per direction, RTT and the fluctuation bound, K×K (0 where no link)."""
    index = {d.name: i for i, d in enumerate(scn.domains)}
    k = len(index)
    bw, rtt, bound = np.zeros((k, k)), np.zeros((k, k)), np.zeros((k, k))
    for link in scn.links:
        a, b = index[link.a], index[link.b]
        bw[a, b], bw[b, a] = link.bandwidth_gbps, link.bandwidth_gbps_ba or link.bandwidth_gbps
        rtt[a, b] = rtt[b, a] = link.rtt_ms
        bound[a, b] = bound[b, a] = link.fluctuation
    return bw, rtt, bound


@dataclass(frozen=True)
class Dynamics:
    """Arrays on a time grid: times (T,), bandwidth and RTT (T,K,K), background load (T,K)."""

    times_s: np.ndarray
    bandwidth_gbps: np.ndarray
    rtt_ms: np.ndarray
    background_load: np.ndarray
    step_s: float

    @classmethod
    def generate(
        cls, scn: Scenario, seed: int, horizon_s: float, step_s: float = 300.0
    ) -> Dynamics:
        rng = np.random.default_rng(seed)
        bw, rtt, bound = base_matrices(scn)
        k = len(scn.domains)
        steps = int(np.ceil(horizon_s / step_s)) + 1
        upper = np.triu(bw + bw.T > 0, 1)
        a, b = np.nonzero(upper)
        # one swing a line between two sites, shared by the copies of it a mixed domain's
        # pools have; its own network (one site) neither swings nor spikes
        names = [d.name for d in scn.domains]
        line = [scn.line(names[i], names[j]) for i, j in zip(a, b, strict=True)]
        first: dict[frozenset[str], int] = {}  # each line's first copy, in order
        for n, x in enumerate(line):
            first.setdefault(x, n)
        rank = {x: r for r, x in enumerate(first)}
        which = np.array([rank[x] for x in line], dtype=int)
        head = np.array(list(first.values()), dtype=int)
        eps = _ar1(rng, steps, len(head), bound[a[head], b[head]])[:, which]
        spikes = _spikes(rng, steps, len(head), step_s)[:, which]
        spikes[:, [len(x) == 1 for x in line]] = 1.0
        scale = np.ones((steps, k, k))
        scale[:, a, b] = scale[:, b, a] = 1 + eps
        rtt_scale = np.ones((steps, k, k))
        rtt_scale[:, a, b] = rtt_scale[:, b, a] = spikes
        load = BASE_LOAD * (1 + _regimes(rng, steps, k, step_s))
        return cls(np.arange(steps) * step_s, bw[None] * scale, rtt[None] * rtt_scale, load, step_s)

    @classmethod
    def from_trace(cls, scn: Scenario, path: str | Path, step_s: float = 300.0) -> Dynamics:
        """Replay measured links: CSV with time_s,a,b,bandwidth_gbps,rtt_ms; values hold."""
        trace = read_frame(Path(path), "link trace")
        need = {"time_s", "a", "b", "bandwidth_gbps", "rtt_ms"}
        if missing := need - set(trace.columns):
            raise UserError(
                f"{path}: missing columns {', '.join(sorted(missing))}; "
                f"a trace has {', '.join(sorted(need))}"
            )
        # a domain's name, or a mixed domain's as written: the line to each of its pools
        index = {d.name: [i] for i, d in enumerate(scn.domains)}
        for site, pools in scn.sites.items():
            index.setdefault(site, [i for i, d in enumerate(scn.domains) if d.name in pools])
        bad = sorted(set(trace["a"]).union(trace["b"]) - set(index))
        if bad:
            raise UserError(
                f"{path}: unknown domains {', '.join(map(str, bad))}; "
                f"known: {', '.join(sorted(index))}"
            )
        bw, rtt, _ = base_matrices(scn)
        steps = int(trace["time_s"].max() // step_s) + 1
        bws, rtts = np.repeat(bw[None], steps, 0), np.repeat(rtt[None], steps, 0)
        for row in trace.sort_values("time_s").itertuples():
            at = int(row.time_s // step_s)
            for i, j in itertools.product(index[row.a], index[row.b]):
                bws[at:, i, j] = bws[at:, j, i] = row.bandwidth_gbps
                rtts[at:, i, j] = rtts[at:, j, i] = row.rtt_ms
        load = np.full((steps, len(index)), BASE_LOAD)
        return cls(np.arange(steps) * step_s, bws, rtts, load, step_s)

    def at(self, t: float) -> int:
        return int(min(max(t, 0.0) // self.step_s, len(self.times_s) - 1))

    def bandwidth(self, t: float) -> np.ndarray:
        return self.bandwidth_gbps[self.at(t)]

    def rtt(self, t: float) -> np.ndarray:
        return self.rtt_ms[self.at(t)]

    def load(self, t: float) -> np.ndarray:
        return self.background_load[self.at(t)]


def _ar1(rng: np.random.Generator, steps: int, links: int, bound: np.ndarray) -> np.ndarray:
    """Mean-reverting fluctuation with stationary sd bound/2, clipped to ±bound."""
    noise = rng.standard_normal((steps, links)) * (bound / 2) * np.sqrt(1 - PHI**2)
    eps = np.empty((steps, links))
    eps[0] = rng.standard_normal(links) * bound / 2
    for t in range(1, steps):
        eps[t] = PHI * eps[t - 1] + noise[t]
    return np.clip(eps, -bound, bound)


def _spikes(rng: np.random.Generator, steps: int, links: int, step_s: float) -> np.ndarray:
    """RTT multipliers: 1 most of the time, 1.5-3 during Poisson-timed spikes."""
    factor = np.ones((steps, links))
    starts = rng.random((steps, links)) < step_s / SPIKE_EVERY_S
    for t, link in zip(*np.nonzero(starts), strict=True):
        length = max(1, round(rng.exponential(SPIKE_MEAN_S) / step_s))
        factor[t : t + length, link] = rng.uniform(*SPIKE_FACTOR)
    return factor


def _regimes(rng: np.random.Generator, steps: int, domains: int, step_s: float) -> np.ndarray:
    """Piecewise-constant swings in [-LOAD_SWING, LOAD_SWING], regimes ~2 h long."""
    swing = np.empty((steps, domains))
    for d in range(domains):
        t = 0
        while t < steps:
            length = max(1, round(rng.exponential(REGIME_MEAN_S) / step_s))
            swing[t : t + length, d] = rng.uniform(-LOAD_SWING, LOAD_SWING)
            t += length
    return swing
