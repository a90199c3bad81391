"""What the search takes and gives: a job as the planner sees it, the candidates of its space
estimated and scored, and the answer for one job. Apart from the search so that the modules it
calls (balance, limits) name these types without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.plan import PlanBatch, Precision
from xdscheduler.costmodel.steptime import StepEstimate, model_flops_per_step
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.space import Placements


@dataclass(frozen=True)
class JobSpec:
    """What the planner needs of a job."""

    name: str
    arch: ModelArch
    global_batch: int
    seq: int
    gpus_min: int
    gpus_max: int
    tokens: float = 0.0  # to train in all; 0 where unknown
    arrival_s: float = 0.0  # when it was submitted
    priority: int = 0  # higher goes first
    dtype: Precision | None = None  # its precision; None: the search options' (BF16 by default)

    @classmethod
    def of(cls, job) -> JobSpec:
        arch = job.arch
        return cls(
            job.name,
            arch,
            job.global_batch,
            arch.seq_len,
            job.gpus.min,
            job.gpus.max,
            float(job.tokens),
            float(job.arrival_s),
            job.priority,
            job.dtype,
        )

    @cached_property
    def flops_per_token(self) -> float:
        """Model FLOPs per token trained (forward and backward, without recompute)."""
        return model_flops_per_step(self.arch, 1, self.seq) / self.seq

    @property
    def work_flops(self) -> float:
        """Model FLOPs to train in all (0 where its tokens are unknown)."""
        return self.tokens * self.flops_per_token

    @property
    def shape_key(self) -> tuple:
        """What plans depend on: jobs equal here have the same plan space."""
        return (self.arch, self.global_batch, self.seq, self.gpus_min, self.gpus_max, self.dtype)


@dataclass(frozen=True)
class SearchResult:
    """The search's answer for one job: the best placement, the next best distinct ones, the
    Pareto front, and why the best wins."""

    job: str
    best: Placement
    alternatives: list[Placement]
    pareto: list[Placement]
    explanation: dict
    decision_ms: float
    evaluated: int


@dataclass(frozen=True)
class Evaluated:
    """Every feasible (placement, plan) pair of one job's space, estimated and scored."""

    placements: Placements  # the space's placements; `place` indexes them
    plans: PlanBatch
    place: np.ndarray  # placement index per candidate
    gpus: np.ndarray  # (N, k_max) GPUs per placement slot
    est: StepEstimate
    terms: dict[str, np.ndarray]
    wan_price_per_gb: np.ndarray  # per candidate
    # layers a stage, or micro-batches a replica, in each slot where split by speed (0: evenly)
    shares: np.ndarray
