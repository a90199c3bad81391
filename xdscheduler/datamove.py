"""Input-data movement over a swinging WAN link: fixed shards vs bandwidth-aware adaptation.

A job trains in one domain while its input data sits in another. Every step it needs
`input_gb` of samples (before compute starts) and sends `grad_gb` of gradients over the same
link (the collective phase, after compute). Shards are fetched whole: each costs `setup_s` of
request latency before bytes flow, and is usable only once complete.

FIXED: shard size fixed, prefetch depth 1 (double buffering), transfers eager: they run during the
collective too and share the link with it equally, slowing it.
ADAPTIVE: from a forecast of the link (recent mean and spread), per step it picks the shard size
(about one compute window of transfer), the prefetch depth (a buffer of `buffer_s` seconds of
input, within `buffer_gb`), pauses transfers during the collective (unless fewer than
`low_water` steps of input are ready), and when the forecast cannot
carry the input it moves that share of the samples to accelerators in the data's domain, whose
extra compute time is charged to the step.

Both run on the same seeded bandwidth series. Outputs: idle_wait_fraction (accelerator time
waiting for input / wall time) and blocking_rate (steps whose compute waited for a transfer or
whose collective shared the link with one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from xdscheduler.errors import UserError

SWING = 0.30  # bandwidth within ±30% of nominal
AR_PHI = 0.99  # per-second memory: swings last minutes
GRID_S = 1.0


@dataclass(frozen=True)
class DataJob:
    compute_s: float = 1.0  # forward+backward per step at full speed
    input_gb: float = 1.2  # samples per step (multimodal: images/video)
    grad_gb: float = 0.4  # gradient bytes over the WAN per step (compressed / sharded)
    link_gbps: float = 10.0  # nominal WAN capacity
    setup_s: float = 0.15  # per-shard request latency (a few RTTs)
    steps: int = 3000


@dataclass(frozen=True)
class FixedPolicy:
    shard_gb: float = 4.0
    depth: int = 1


@dataclass(frozen=True)
class AdaptivePolicy:
    window_s: float = 30.0  # forecast window
    shard_s: float = 0.8  # a shard should take about this long to fetch
    shard_gb: tuple[float, float] = (0.25, 8.0)
    buffer_s: float = 20.0  # seconds of input to keep in flight or ready
    buffer_gb: float = 16.0  # host memory for the buffer
    safety: float = 0.9  # use this share of the forecast capacity
    move_max: float = 0.5  # at most half the samples moved to the data's domain
    move_penalty: float = 0.5  # compute time +50% of the moved share (fewer accelerators there)
    low_water: float = 2.0  # steps of input ready below which transfers run during collectives


def bandwidth_trace(job: DataJob, seed: int, horizon_s: float) -> np.ndarray:
    """GB/s per second: AR(1) fluctuation, stationary sd SWING/2, clipped to ±SWING."""
    rng = np.random.default_rng(seed)
    n = int(horizon_s / GRID_S) + 2
    noise = rng.standard_normal(n) * SWING / 2 * math.sqrt(1 - AR_PHI**2)
    noise[0] = rng.standard_normal() * SWING / 2
    eps = lfilter([1.0], [1.0, -AR_PHI], noise)
    return job.link_gbps / 8 * (1 + np.clip(eps, -SWING, SWING))


def forecast(bw: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per grid point: mean and sd of the past window (what was observed up to then)."""
    w = max(2, int(window_s / GRID_S))
    c1, c2 = np.concatenate([[0], np.cumsum(bw)]), np.concatenate([[0], np.cumsum(bw**2)])
    idx = np.arange(1, len(bw) + 1)
    lo = np.maximum(idx - w, 0)
    cnt = idx - lo
    mean = (c1[idx] - c1[lo]) / cnt
    sd = np.sqrt(np.maximum((c2[idx] - c2[lo]) / cnt - mean**2, 0))
    return mean, sd


class _Fetcher:
    """Shards in flight one at a time: setup latency, then bytes; usable when complete."""

    def __init__(self, shard_gb: float, depth: int, setup_s: float):
        self.shard_gb, self.depth, self.setup_s = shard_gb, depth, setup_s
        self.ready = 0.0
        self.phase, self.left, self.size = "idle", 0.0, 0.0
        self.peak = 0.0

    def maybe_start(self) -> None:
        if self.phase == "idle" and self.ready < self.depth * self.shard_gb - 1e-12:
            self.phase, self.left, self.size = "setup", self.setup_s, self.shard_gb

    def flowing(self) -> bool:
        return self.phase == "data"

    def next_event(self, rate: float) -> float:
        self.maybe_start()
        if self.phase == "setup":
            return self.left
        return self.left / rate if self.phase == "data" else math.inf

    def advance(self, dt: float, rate: float) -> None:
        if self.phase == "setup":
            self.left -= dt
            if self.left <= 1e-12:
                self.phase, self.left = "data", self.size
        elif self.phase == "data":
            self.left -= dt * rate
            if self.left <= 1e-9:
                self.ready += self.size
                self.peak = max(self.peak, self.ready)
                self.phase = "idle"


class _Sim:
    def __init__(self, job: DataJob, bw: np.ndarray, fetcher: _Fetcher):
        self.job, self.bw, self.f = job, bw, fetcher
        self.t = 0.0

    def rate(self) -> float:
        return float(self.bw[min(int(self.t / GRID_S), len(self.bw) - 1)])

    def wait_for(self, need: float) -> float:
        """Fetch at full rate until `need` GB is ready; the time waited."""
        start = self.t
        while self.f.ready < need - 1e-9:
            dt = min(self.f.next_event(self.rate()), _to_grid(self.t))
            if math.isinf(dt):
                raise RuntimeError("buffer too small for one step's input")
            self.f.advance(dt, self.rate())
            self.t += dt
        return self.t - start

    def compute(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end - 1e-12:
            dt = min(self.f.next_event(self.rate()), end - self.t, _to_grid(self.t))
            self.f.advance(dt, self.rate())
            self.t += dt

    def collective(self, gb: float, transfers: bool) -> bool:
        """Send gradients; eager transfers share the link. True if they contended."""
        contended = False
        while gb > 1e-12:
            r = self.rate()
            share = transfers and (self.f.next_event(r) < math.inf) and self.f.flowing()
            mine = r / 2 if share else r
            dt = min(gb / mine, _to_grid(self.t))
            if transfers:
                dt = min(dt, self.f.next_event(r))
            if share:
                self.f.advance(dt, r / 2)
                contended = True
            elif transfers or self.f.phase == "setup":
                dt = min(dt, self.f.next_event(r))
                self.f.advance(dt, r)  # setup latency uses no bandwidth: it may overlap
            gb -= dt * mine
            self.t += dt
        return contended


def _to_grid(t: float) -> float:
    """Time to the next bandwidth sample, at least a sliver so loops always move."""
    return max((math.floor(t / GRID_S) + 1) * GRID_S - t, 1e-9)


def run_fixed(job: DataJob, bw: np.ndarray, pol: FixedPolicy = FixedPolicy()) -> dict:
    sim = _Sim(job, bw, _Fetcher(pol.shard_gb, pol.depth, job.setup_s))
    idle, blocked, contended = 0.0, 0, 0
    for _ in range(job.steps):
        wait = sim.wait_for(job.input_gb)
        sim.f.ready -= job.input_gb
        sim.compute(job.compute_s)
        clash = sim.collective(job.grad_gb, transfers=True)
        idle += wait
        contended += clash
        blocked += clash or wait > 1e-9
    return _summary("fixed", job, sim, idle, blocked, contended, 0.0, pol.shard_gb, pol.depth)


@dataclass(frozen=True)
class Adaptation:
    """What the adaptive policy does for the next step."""

    shard_gb: float
    depth: int
    move_share: float  # of the step's samples, trained by accelerators in the data's domain
    wan_input_gb: float  # input still crossing the WAN per step
    compute_s: float  # step compute time with the moved share
    pause_during_collective: bool = True


def adapt(
    job: DataJob,
    mean_gbs: float,
    sd_gbs: float,
    pol: AdaptivePolicy = AdaptivePolicy(),
    ready_gb: float = math.inf,
) -> Adaptation:
    """Shard size, prefetch depth and moved share from a link forecast (mean, sd in GB/s);
    transfers pause during the collective unless the buffer (ready_gb) is nearly dry."""
    low = max(mean_gbs - sd_gbs, 0.5 * mean_gbs) * pol.safety  # conservative forecast
    shard = float(np.clip(low * pol.shard_s, *pol.shard_gb))
    m, need, compute_s = _move_share(job, pol, low, shard)
    step_s = compute_s + job.grad_gb / mean_gbs
    want = pol.buffer_s / step_s * need / shard
    depth = int(np.clip(math.ceil(want), 2, max(2, pol.buffer_gb // shard)))
    return Adaptation(shard, depth, m, need, compute_s, ready_gb >= pol.low_water * need)


def run_adaptive(job: DataJob, bw: np.ndarray, pol: AdaptivePolicy = AdaptivePolicy()) -> dict:
    mean, sd = forecast(bw, pol.window_s)
    sim = _Sim(job, bw, _Fetcher(1.0, 2, job.setup_s))
    idle, blocked, contended, moved, shards, depths = 0.0, 0, 0, 0.0, 0.0, 0.0
    for _ in range(job.steps):
        i = min(int(sim.t / GRID_S), len(bw) - 1)
        a = adapt(job, float(mean[i]), float(sd[i]), pol, sim.f.ready)
        sim.f.shard_gb, sim.f.depth = a.shard_gb, a.depth
        wait = sim.wait_for(a.wan_input_gb)
        sim.f.ready -= a.wan_input_gb
        sim.compute(a.compute_s)
        clash = sim.collective(job.grad_gb, transfers=not a.pause_during_collective)
        idle += wait
        contended += clash
        blocked += clash or wait > 1e-9
        moved, shards, depths = moved + a.move_share, shards + a.shard_gb, depths + a.depth
    n = job.steps
    return _summary(
        "adaptive", job, sim, idle, blocked, contended, moved / n, shards / n, depths / n
    )


def _move_share(
    job: DataJob, pol: AdaptivePolicy, low: float, shard: float
) -> tuple[float, float, float]:
    """Share of samples moved to the data's domain so input fits the compute windows."""
    m = 0.0
    rate = shard / (shard / low + job.setup_s)  # setup latency eats into the window
    for _ in range(3):  # moving work lengthens compute, which widens the window: iterate
        cap = rate * job.compute_s * (1 + pol.move_penalty * m)
        m = float(np.clip(1 - cap / job.input_gb, 0.0, pol.move_max))
    return m, job.input_gb * (1 - m), job.compute_s * (1 + pol.move_penalty * m)


def _summary(name, job, sim, idle, blocked, contended, moved, shard, depth) -> dict:
    return {
        "policy": name,
        "steps": job.steps,
        "wall_s": sim.t,
        "steps_per_s": job.steps / sim.t,
        "idle_wait_s": idle,
        "idle_wait_fraction": idle / sim.t,
        "blocking_rate": blocked / job.steps,
        "contended_steps": int(contended),
        "moved_work_share": moved,
        "mean_shard_gb": shard,
        "mean_depth": depth,
        "peak_buffer_gb": sim.f.peak,
    }


def compare(
    job: DataJob = DataJob(), seed: int = 0, adaptive: AdaptivePolicy = AdaptivePolicy()
) -> dict:
    """Both policies on one seeded trace; ratios adaptive / fixed."""
    if job.steps < 1 or job.input_gb <= 0 or job.link_gbps <= 0:
        raise UserError("a data job needs steps ≥ 1, input_gb > 0 and link_gbps > 0")
    bw = bandwidth_trace(job, seed, horizon_s=job.steps * (job.compute_s + 1) * 6)
    fixed, adapted = run_fixed(job, bw), run_adaptive(job, bw, adaptive)
    ratio = {
        k: adapted[k] / fixed[k] if fixed[k] else math.nan
        for k in ("idle_wait_fraction", "blocking_rate", "steps_per_s")
    }
    return {
        "seed": seed,
        "fixed": fixed,
        "adaptive": adapted,
        "ratio": ratio,
        "bandwidth_gbs": {"mean": float(bw.mean()), "min": float(bw.min()), "max": float(bw.max())},
    }
