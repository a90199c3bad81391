"""The one placement type: where a job runs, how it is split, and what the model predicts for it.

The search returns placements, policies hand them to the engine, the agents choose among them
and the endpoints send them as JSON. A placement from the search carries its estimate, so the
engine starts a job at the speed the search predicted without estimating it again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from xdscheduler.costmodel.plan import Plan
from xdscheduler.planner.objective import Objective
from xdscheduler.planner.space import DATA, PIPELINE, SINGLE

COMMUNICATION = ("dp_comm", "pp_comm", "sync")  # the parts of a step that use the NICs


@dataclass(frozen=True)
class Estimate:
    """What the cost model predicts for one placement under the links it was estimated on."""

    step_time_s: float
    breakdown_s: dict[str, float]  # exposed seconds per part of the step
    overlapped_s: dict[str, float]  # communication hidden behind compute
    memory_gib_per_gpu: float
    cross_domain_bytes_per_step: float  # all WAN links, both directions
    wan_price_per_gb: float  # mean price over the links its traffic uses
    tokens_per_step: float
    objective: Objective | None = None  # scored by the search; None where only estimated

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def cross_domain_gb_per_step(self) -> float:
        return self.cross_domain_bytes_per_step / 1e9

    @property
    def stream_window_s(self) -> float:
        """Seconds of a step in which the NICs carry none of the step's own traffic and the
        optimizer step has not begun: when optimizer state moved by a re-plan can stream."""
        busy = sum(self.breakdown_s[k] + self.overlapped_s.get(k, 0.0) for k in COMMUNICATION)
        return max(0.0, self.step_time_s - self.breakdown_s["optimizer"] - busy)


@dataclass(frozen=True)
class Placement:
    """A job's domains (indices into the view, in stage order for a pipeline, in the order its
    replicas ring in for data), the accelerators it takes in each, and its parallel plan."""

    job: str
    kind: str  # SINGLE, PIPELINE or DATA
    domains: tuple[int, ...]
    gpus: tuple[int, ...]  # accelerators taken in each of those domains
    plan: Plan
    names: tuple[str, ...] = ()  # the domains' names, in the same order
    estimate: Estimate | None = field(default=None, compare=False)
    keep_off: tuple[int, ...] = ()  # domains the job stays off, now and when re-planned
    # on what others may reclaim: a placement that needs its accelerators preempts it (the job
    # saves a checkpoint and waits in the queue again)
    preemptible: bool = False
    explanation: str = field(default="", compare=False)  # why; not what
    decision_ms: float = field(default=0.0, compare=False)
    # across domains of different speeds: layers a stage (pipeline) or micro-batches a replica
    # (replicas) in each domain, in proportion to speed; () where every one takes as many
    split: tuple[int, ...] = ()

    @property
    def objective(self) -> Objective | None:
        return self.estimate.objective if self.estimate is not None else None

    @property
    def estimated(self) -> Estimate:
        """The estimate of a placement the search made (the search's always carry one)."""
        if self.estimate is None:
            raise ValueError(f"the placement of {self.job} carries no estimate")
        return self.estimate

    @property
    def scored(self) -> Objective:
        """The objective of a placement the search scored (the search's always carry one)."""
        objective = self.estimated.objective
        if objective is None:
            raise ValueError(f"the placement of {self.job} carries no objective")
        return objective

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus)

    @property
    def taken(self) -> dict[int, int]:
        """Accelerators held, by domain index."""
        return dict(zip(self.domains, self.gpus, strict=True))

    @property
    def gpus_per_domain(self) -> dict[str, int]:
        return dict(zip(self.names, self.gpus, strict=True))

    @property
    def stages_per_domain(self) -> tuple[int, ...]:
        """The pipeline stages each domain holds (a pipeline's; zeros for other kinds)."""
        if self.kind != PIPELINE:
            return (0,) * len(self.domains)
        per_stage = self.plan.dp * self.plan.tp * self.plan.cp
        return tuple(g // per_stage for g in self.gpus)

    @property
    def stage_to_domain(self) -> list[str]:
        """The domain of each pipeline stage (a replicated job's domains joined by '+')."""
        p = self.plan
        if self.kind == PIPELINE:
            return [
                n for n, k in zip(self.names, self.stages_per_domain, strict=True) for _ in range(k)
            ]
        return [self.names[0] if self.kind == SINGLE else "+".join(self.names)] * p.pp

    @property
    def links(self) -> list[tuple[int, int]]:
        """The links between domains its traffic crosses (domain indices): between consecutive
        stages of a pipeline, round the ring of a replicated job's domains (in their order, the
        last to the first); none inside one domain. Each is timed; those of the WAN, without
        a mixed domain's own network between its pools, are `ClusterView.wan_links`."""
        d = self.domains
        if self.ring:
            return list(itertools.pairwise((*d, d[0])))
        if self.kind in (PIPELINE, DATA):
            return list(itertools.pairwise(d))
        return []

    @property
    def ring(self) -> bool:
        """Replicas in three or more domains, all-reducing round a ring: each of its links
        carries traffic one way (a pipeline's and a pair's carry it both ways)."""
        return self.kind == DATA and len(self.domains) > 2

    @property
    def shape(self) -> tuple:
        """Where and how it is split, without the finer plan choices."""
        return (self.kind, tuple(self.stage_to_domain), self.plan.dp, self.plan.tp, self.plan.pp)

    def same_as(self, other: Placement | None) -> bool:
        """The same domains, accelerators and plan (what a re-plan would change)."""
        return other is not None and (self.domains, self.gpus, self.plan) == (
            other.domains,
            other.gpus,
            other.plan,
        )

    def to_json(self) -> dict:
        """The plan, the predicted step and the objective terms, for people and endpoints."""
        plan = self.plan.as_dict()
        vp = plan.pop("vp")
        out: dict = {
            "plan": {
                **plan,
                "vp": vp,
                "placement": self.kind,
                "stage_to_domain": self.stage_to_domain,
                "gpus_per_domain": self.gpus_per_domain,
            }
        }
        if self.split:
            key = "layers_per_stage" if self.kind == PIPELINE else "micro_batches_per_replica"
            out["plan"][key] = dict(zip(self.names, self.split, strict=True))
        est = self.estimate
        if est is not None:
            out.update(
                {
                    "predicted_step_time_s": est.step_time_s,
                    "tokens_per_s": est.tokens_per_s,
                    "breakdown_s": est.breakdown_s,
                    "overlapped_s": est.overlapped_s,
                    "memory_gib_per_gpu": est.memory_gib_per_gpu,
                    "cross_domain_gb_per_step": est.cross_domain_gb_per_step,
                }
            )
            if est.objective is not None:
                out["objective"] = est.objective.as_dict()
        return out
