"""Structured logs of domains and nodes, a seeded generator of benign and fault logs, and two
statistical detectors over them.

- Template surprise: each record maps to a template (event, level, code). A model fitted on a
  benign trace learns each template's count per source and window, as a negative binomial when
  the counts are overdispersed (benign warnings come in bursts) and Poisson otherwise; a window's
  surprise is the sum over its templates of -log10 P(count ≥ observed). Templates never seen in
  training get a pseudo-count rate, so a burst of Xid/ECC/OOM errors is very surprising while a
  burst of benign retries, which training saw, is not.
- Step-time stalls: a node's step time against its own history by robust z-score
  (median/MAD); a straggler is a run of slow steps, the step in progress counting once it is
  already longer than the slow bound.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

STEP_EVENT = "step"
WINDOW_S = 10.0  # template counts are judged per source over this sliding window
UNSEEN_PSEUDO = 0.5  # pseudo-count of a template never seen in training
RARE_MEAN = 0.01  # templates rarer than this per window count as independent evidence

# Benign noise: warnings that recover on their own (template, weight in background and bursts).
BENIGN = (
    ("nccl_retry", "WARNING", None),
    ("collective_timeout", "WARNING", None),
    ("ecc_corrected", "WARNING", None),
    ("dataloader_slow", "WARNING", None),
    ("storage_retry", "WARNING", None),
    ("checkpoint_saved", "INFO", None),
)
BENIGN_PER_S = 0.02  # background rate per source and template
BURST_PER_S = 1 / 30  # a benign burst per source about every 30 s (stress level)
BURST_SIZE = (5, 40)
BURST_SPAN_S = (0.5, 5.0)
# Fault signatures: Xid 79 (GPU fallen off the bus), 48 (double-bit ECC), 94/95 (contained /
# uncontained ECC), 63 (row remapping), CUDA OOM, NCCL watchdog abort.
FAULT = (
    ("xid", "ERROR", 79),
    ("xid", "ERROR", 48),
    ("xid", "ERROR", 94),
    ("xid", "ERROR", 95),
    ("xid", "ERROR", 63),
    ("cuda_oom", "ERROR", None),
    ("ecc_uncorrectable", "ERROR", None),
    ("nccl_watchdog_timeout", "ERROR", None),
)
FAULT_BURST = (2, 6)
FAULT_GAP_S = 0.3  # mean gap between a fault's error lines

STEP_S = 0.4  # per-micro-batch timing lines
STEP_SIGMA = 0.03  # log-normal step-time noise
SPIKE_P = 0.002  # benign single slow steps (GC, page faults)
SPIKE = (1.2, 1.6)
HISTORY = 50  # step times kept per source
Z_SLOW = 6.0  # robust z above which a step is slow
MIN_REL_SLOW = 0.15  # and at least 15% above the median
MIN_HISTORY = 10
REFRESH = 5  # recompute a source's median and MAD every few steps
SLOW_RUN = 3  # slow steps in a row, the one in progress included


@dataclass(frozen=True)
class LogRecord:
    time_s: float
    source: str
    level: str
    event: str
    fields: dict = field(default_factory=dict)

    @property
    def template(self) -> str:
        code = self.fields.get("code")
        return f"{self.event}:{self.level}" + (f":{code}" if code is not None else "")

    def to_json(self) -> dict:
        return {
            "time_s": self.time_s,
            "source": self.source,
            "level": self.level,
            "event": self.event,
            **self.fields,
        }


# ---------------------------------------------------------------- generators


def _record(t, source, spec, **extra) -> LogRecord:
    event, level, code = spec
    fields = {"code": code} if code is not None else {}
    return LogRecord(float(t), source, level, event, {**fields, **extra})


def benign_noise(rng: np.random.Generator, source: str, t0: float, t1: float) -> list[LogRecord]:
    """Background warnings plus Poisson-timed bursts of one benign template."""
    span = t1 - t0
    out = []
    for spec in BENIGN:
        for t in rng.uniform(t0, t1, rng.poisson(BENIGN_PER_S * span)):
            out.append(_record(t, source, spec, recovered=True))
    for start in rng.uniform(t0, t1, rng.poisson(BURST_PER_S * span)):
        spec = BENIGN[rng.integers(len(BENIGN))]
        size = rng.integers(BURST_SIZE[0], BURST_SIZE[1] + 1)
        times = start + rng.uniform(0, rng.uniform(*BURST_SPAN_S), size)
        out += [_record(t, source, spec, recovered=True) for t in times[times < t1]]
    return out


def fault_burst(rng: np.random.Generator, source: str, t0: float) -> list[LogRecord]:
    """A GPU/memory/collective fault: 2-6 error lines of one or two signatures."""
    size = rng.integers(FAULT_BURST[0], FAULT_BURST[1] + 1)
    times = t0 + np.concatenate([[0.0], np.cumsum(rng.exponential(FAULT_GAP_S, size - 1))])
    specs = rng.choice(len(FAULT), 2)
    return [_record(t, source, FAULT[specs[k % 2]]) for k, t in enumerate(times)]


def step_times(
    rng: np.random.Generator,
    t0: float,
    t1: float,
    slow_from: float = np.inf,
    slowdown: float = 1.0,
    stop: float = np.inf,
) -> tuple[np.ndarray, np.ndarray]:
    """End times and durations of steps in [t0, min(t1, stop)); slower from `slow_from`."""
    n = int((t1 - t0) / STEP_S * 1.2) + 2
    dur = STEP_S * rng.lognormal(0, STEP_SIGMA, n)
    dur *= np.where(rng.random(n) < SPIKE_P, rng.uniform(*SPIKE, n), 1.0)
    start = t0 + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    # the part of each step after slow_from runs `slowdown` times longer
    dur = dur + np.clip(start + dur - np.maximum(start, slow_from), 0, None) * (slowdown - 1)
    end = t0 + np.cumsum(dur)
    keep = end < min(t1, stop)
    return end[keep], dur[keep]


def step_logs(source: str, ends: np.ndarray, durs: np.ndarray) -> list[LogRecord]:
    return [
        LogRecord(float(t), source, "INFO", STEP_EVENT, {"step_time_s": float(d)})
        for t, d in zip(ends, durs, strict=True)
    ]


# ---------------------------------------------------------------- template model


@dataclass(frozen=True)
class TemplateModel:
    """Per-template count distribution per source and window: (mean, variance)."""

    moments: dict[str, tuple[float, float]]
    windows: int  # source-windows seen in training
    window_s: float = WINDOW_S
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fit(
        cls, records: list[LogRecord], sources: int, span_s: float, window_s: float = WINDOW_S
    ) -> TemplateModel:
        """Moments of windowed counts from a benign trace of `sources` sources over span_s."""
        nwin = max(1, int(span_s // window_s))
        names = sorted({r.source for r in records})
        sidx = {s: i for i, s in enumerate(names)}
        counts: dict[str, np.ndarray] = {}
        for r in records:
            if r.event == STEP_EVENT:
                continue
            arr = counts.setdefault(r.template, np.zeros((sources, nwin)))
            w = int(r.time_s // window_s)
            if w < nwin:
                arr[sidx[r.source], w] += 1
        moments = {k: (float(v.mean()), float(v.var())) for k, v in counts.items()}
        return cls(moments, sources * nwin, window_s)

    def surprise(self, template: str, count: int) -> float:
        """-log10 P(count ≥ observed) in one window of one source."""
        key = (template, count)
        if key not in self._cache:
            self._cache[key] = self._surprise(template, count)
        return self._cache[key]

    def is_rare(self, template: str) -> bool:
        return self.moments.get(template, (0.0, 0.0))[0] < RARE_MEAN

    def _surprise(self, template: str, count: int) -> float:
        mean, var = self.moments.get(template, (UNSEEN_PSEUDO / self.windows, 0.0))
        if var > mean * 1.05:
            r = mean * mean / (var - mean)
            tail = stats.nbinom.logsf(count - 1, r, r / (r + mean))
        else:
            tail = stats.poisson.logsf(count - 1, mean)
        return float(-tail / np.log(10))


class LogAnomalyDetector:
    """Sliding-window template surprise per source, updated as records arrive."""

    def __init__(self, model: TemplateModel):
        self.model = model
        self._recent: dict[str, deque] = {}
        self._score: dict[str, tuple[float, float, dict]] = {}  # source → (time, score, counts)

    def observe(self, rec: LogRecord) -> float:
        q = self._recent.setdefault(rec.source, deque())
        q.append((rec.time_s, rec.template))
        while q and q[0][0] <= rec.time_s - self.model.window_s:
            q.popleft()
        counts: dict[str, int] = {}
        for _, tpl in q:
            counts[tpl] = counts.get(tpl, 0) + 1
        score = _window_score(self.model, counts)
        self._score[rec.source] = (rec.time_s, score, counts)
        return score

    def score(self, source: str, now: float) -> tuple[float, dict]:
        """Latest window score of a source, 0 once its window has passed."""
        t, score, counts = self._score.get(source, (-np.inf, 0.0, {}))
        return (score, counts) if now - t < self.model.window_s else (0.0, {})


def _window_score(model: TemplateModel, counts: dict[str, int]) -> float:
    """Rare templates add up; common ones, bursty and correlated (one storage hiccup sets off
    retries and loader warnings together), contribute only their most surprising one."""
    rare = sum(model.surprise(t, c) for t, c in counts.items() if model.is_rare(t))
    common = [model.surprise(t, c) for t, c in counts.items() if not model.is_rare(t)]
    return rare + max(common, default=0.0)


class StepTimeMonitor:
    """Slow-step runs per source by robust z-score over the source's own step times."""

    def __init__(self) -> None:
        self._hist: dict[str, deque] = {}
        self._ref: dict[str, tuple[float, float, float]] = {}  # median, scale, slow bound
        self._last: dict[str, float] = {}
        self._run: dict[str, int] = {}
        self._z: dict[str, float] = {}
        self._seen: dict[str, int] = {}

    def observe(self, rec: LogRecord) -> None:
        x, src = rec.fields["step_time_s"], rec.source
        h = self._hist.setdefault(src, deque(maxlen=HISTORY))
        if src in self._ref:
            med, scale, bound = self._ref[src]
            z = (x - med) / scale
            self._run[src] = self._run.get(src, 0) + 1 if x > bound else 0
            self._z[src] = z
        h.append(x)
        self._seen[src] = seen = self._seen.get(src, 0) + 1
        if seen >= MIN_HISTORY and (src not in self._ref or seen % REFRESH == 0):
            self._ref[src] = _reference(h)
        self._last[src] = rec.time_s

    def slow_run(self, source: str, now: float) -> int:
        """Slow steps in a row plus the one in progress: 1 once it is past the slow bound,
        2 once past twice the bound (a stall)."""
        if source not in self._ref:
            return 0
        bound = self._ref[source][2]
        elapsed = now - self._last[source]
        return self._run.get(source, 0) + int(elapsed > bound) + int(elapsed > 2 * bound)

    def evidence(self, source: str, now: float) -> tuple[int, dict]:
        """`slow_run`, and what it rests on."""
        if source not in self._ref:
            return 0, {}
        bound = self._ref[source][2]
        return self.slow_run(source, now), {
            "slow_run": self._run.get(source, 0),
            "in_progress_s": round(now - self._last[source], 3),
            "last_z": round(self._z.get(source, 0.0), 2),
            "slow_bound_s": round(bound, 4),
        }


def _reference(h: deque) -> tuple[float, float, float]:
    """Median, robust scale (1.4826·MAD, floored at 1% of the median) and the slow bound."""
    # statistics.median: numpy's per-call cost dominates on 50 values, the result is the same
    med = float(statistics.median(h))
    scale = max(1.4826 * statistics.median([abs(x - med) for x in h]), 0.01 * med)
    return med, scale, max(med + Z_SLOW * scale, med * (1 + MIN_REL_SLOW))
