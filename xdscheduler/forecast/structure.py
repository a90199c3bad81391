"""Structure-driven demand: the accelerators known jobs hold over the horizon, and when they
free them, from each job's plan (GPUs) and predicted step time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.scenario import Job


@dataclass(frozen=True)
class KnownJob:
    """A job the controller knows: it holds `gpus` from `start_s` to `finish_s` (from now)."""

    name: str
    gpus: int
    finish_s: float
    start_s: float = 0.0


def known_job(
    job: Job, gpus: int, step_time_s: float, tokens_done: float = 0.0, start_s: float = 0.0
) -> KnownJob:
    """From a scenario job, its plan's GPU count and predicted step time: it runs the steps
    its remaining tokens need, then frees its GPUs."""
    if gpus <= 0 or step_time_s <= 0:
        raise UserError(f"job {job.name}: gpus and step time must be positive")
    tokens_per_step = job.global_batch * job.arch.seq_len
    steps_left = np.ceil(max(job.tokens - tokens_done, 0.0) / tokens_per_step)
    return KnownJob(job.name, gpus, start_s + float(steps_left) * step_time_s, start_s)


@dataclass(frozen=True)
class StructuralDemand:
    held: np.ndarray  # GPUs held at the start of each future step (index 0 = now)
    step_min: int
    frees: dict[str, float]  # job → minute from now when it frees its GPUs (inf: not within)

    def mean(self, steps: int) -> float:
        """Mean GPUs held over the next `steps` steps (the forecast window after now)."""
        return float(self.held[1 : steps + 1].mean()) if steps else float(self.held[0])


def structural_demand(
    jobs: Sequence[KnownJob], horizon_min: int, step_min: int = 1
) -> StructuralDemand:
    """GPUs the known jobs hold at each step of the horizon (vectorised over jobs × steps)."""
    n = horizon_min // step_min
    t = np.arange(n + 1) * step_min * 60.0  # seconds from now
    if not jobs:
        return StructuralDemand(np.zeros(n + 1), step_min, {})
    start = np.array([j.start_s for j in jobs])[:, None]
    finish = np.array([j.finish_s for j in jobs])[:, None]
    gpus = np.array([j.gpus for j in jobs], float)[:, None]
    held = (gpus * ((t >= start) & (t < finish))).sum(axis=0)
    frees = {
        j.name: (j.finish_s / 60.0 if j.finish_s <= horizon_min * 60 else float("inf"))
        for j in jobs
    }
    return StructuralDemand(held, step_min, frees)
