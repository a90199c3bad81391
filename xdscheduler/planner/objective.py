"""The objective R = w1·efficiency + w2·utilisation − w3·cost, and its Pareto front.

efficiency:  the job's throughput over the best throughput any candidate reaches now (0-1);
utilisation: model FLOP/s over the rated peak of the accelerators the plan holds (MFU, 0-1);
cost:        WAN traffic cost per hour over the hourly price of those accelerators.

In a study R's cost term is the whole WAN bill over the whole accelerator bill, and its
efficiency a mean over jobs: a job's traffic weighs there against a typical job's accelerator
bill, not its own. `study_weights` scales a job's cost weight by its work over a typical job's
(`TypicalWork`), so a long job spread over domains pays for its traffic as the study counts it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from xdscheduler.cache import BoundedCache
from xdscheduler.scenario import Weights

__all__ = [
    "Objective",
    "TypicalWork",
    "Weights",
    "pareto_mask",
    "score",
    "study_weights",
    "weighed",
]


@dataclass(frozen=True)
class Objective:
    tokens_per_s: float
    efficiency: float
    utilization: float
    cost: float
    wan_cost_per_hour: float
    objective: float

    def as_dict(self) -> dict:
        return asdict(self)


def score(
    job,
    est,
    held_flops: np.ndarray,
    gpu_cost: np.ndarray,
    wan_price_per_gb: np.ndarray,
    weights: Weights,
) -> dict[str, np.ndarray]:
    """Objective terms for every candidate, from the rated FLOP/s and the $/h of the
    accelerators each holds."""
    step = est.step_time_s
    tokens_per_s = job.global_batch * job.seq / step
    utilization = est.model_flops / step / held_flops
    wan_cost = est.cross_domain_bytes / 1e9 * wan_price_per_gb * 3600 / step
    cost = wan_cost / np.maximum(gpu_cost, 1e-9)
    efficiency, objective = weighed(tokens_per_s, utilization, cost, weights)
    return {
        "tokens_per_s": tokens_per_s,
        "efficiency": efficiency,
        "utilization": utilization,
        "cost": cost,
        "wan_cost_per_hour": wan_cost,
        "objective": objective,
    }


def weighed(
    tokens_per_s: np.ndarray, utilization: np.ndarray, cost: np.ndarray, weights: Weights
) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's efficiency, against the fastest of those given, and its R."""
    efficiency = tokens_per_s / tokens_per_s.max()
    objective = (
        weights.efficiency * efficiency + weights.utilization * utilization - weights.cost * cost
    )
    return efficiency, objective


def pareto_mask(throughput: np.ndarray, utilization: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good on all three and better on one."""
    t, u, c = (np.asarray(x, dtype=float)[:, None] for x in (throughput, utilization, cost))
    ge = (t <= t.T) & (u <= u.T) & (c >= c.T)
    gt = (t < t.T) | (u < u.T) | (c > c.T)
    return ~np.any(ge & gt, axis=1)


# The names of the jobs a policy has seen, the most recent kept: a long-lived controller
# keeps no more. A queued job is seen at every decision and stays among them; one queued
# again after this many others came would count twice in a mean over thousands.
SEEN_NAMES = 4096


@dataclass
class TypicalWork:
    """The mean work (model FLOPs to train) of the jobs a policy has seen."""

    seen: BoundedCache[None] = field(default_factory=lambda: BoundedCache(SEEN_NAMES))
    count: int = 0
    total: float = 0.0  # their FLOPs together: the mean is asked for at every decision

    def record(self, jobs) -> None:
        for job in (j for j in jobs if j.tokens > 0):
            if job.name not in self.seen:
                self.count += 1
                self.total += job.work_flops
            self.seen[job.name] = None  # seen now: the most recent

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def study_weights(weights: Weights, job, typical: TypicalWork) -> Weights:
    """R's weights for deciding `job` as the study's R counts it. Its cost term there is the
    job's WAN bill over the cluster's accelerator bill, that is, per job, over a typical job's:
    the job's own ratio times its work over a typical job's. Never below its own ratio (a plan
    pays for its traffic at least as the job alone would), so only jobs with more work than
    the typical one weigh their traffic more."""
    mean = typical.mean
    if not mean or job.tokens <= 0:
        return weights
    scale = job.work_flops / mean
    return weights.model_copy(update={"cost": weights.cost * scale}) if scale > 1 else weights
