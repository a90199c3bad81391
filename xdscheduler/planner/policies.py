"""Scheduling policies behind one interface: today's practice, a greedy spread, and the planner.

A policy sees the queue (in arrival order) and the free accelerators and links now, and
returns placements: which domains, how many accelerators in each, and the parallel plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import StepEstimate, estimate, memory_gib
from xdscheduler.errors import UserError
from xdscheduler.planner.search import Candidate, JobSpec, search
from xdscheduler.planner.space import DATA, PIPELINE, SINGLE, SearchOptions, describe_placements
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights


@dataclass(frozen=True)
class Placement:
    """Where a job runs and how it is split."""

    job: str
    kind: str  # SINGLE, PIPELINE or DATA
    domains: tuple[int, ...]  # indices into the view, in stage order for PIPELINE
    gpus: tuple[int, ...]  # accelerators taken in each of those domains
    plan: Plan
    flat_dp: bool = False  # one flat data-parallel ring over the WAN (the greedy baseline)
    held: tuple[int, ...] = ()  # domains the job keeps off, now and when re-planned
    explanation: str = ""
    decision_ms: float = 0.0

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus)

    @property
    def taken(self) -> dict[int, int]:
        """Accelerators held, by domain index."""
        return dict(zip(self.domains, self.gpus, strict=True))


def evaluate(placement: Placement, job: JobSpec, view: ClusterView,
             stack: Stack | None = None) -> tuple[StepEstimate, float]:
    """The step estimate of a placement under the view's links now, and its WAN price per GB."""
    doms = np.array([list(placement.domains)])
    pl = describe_placements(view, np.array([placement.kind], dtype=object), doms)
    wan = pl.wan.with_(dp_flat=np.array([1.0 if placement.flat_dp else 0.0]))
    est = estimate(job.arch, job.global_batch, PlanBatch.of([placement.plan]), pl.hardware, wan,
                   stack, seq=job.seq)
    return est, float(pl.wan_price_per_gb[0])


class Policy(Protocol):
    name: str

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        """Placements for jobs of the queue that should start now."""

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        """A better placement for a running job (its own accelerators counted free), or None."""


def megatron_default(job: JobSpec, gpus: int, hw: Hardware, stack: Stack | None = None
                     ) -> Plan | None:
    """TP 8 inside a node, the least PP that fits memory, the rest DP (Megatron's recipe)."""
    arch = job.arch
    tp = next(t for t in (8, 4, 2, 1) if t <= hw.gpus_per_node and arch.heads % t == 0
              and arch.kv_heads % t == 0)
    for recompute in ("none", "full"):
        for pp in (p for p in range(1, arch.layers + 1) if arch.layers % p == 0):
            dp = gpus // (tp * pp)
            while dp > 0 and job.global_batch % dp:
                dp -= 1
            if dp == 0:
                break
            plan = Plan(dp=dp, tp=tp, pp=pp, recompute=recompute)
            mem = memory_gib(arch, job.global_batch, PlanBatch.of([plan]), stack, job.seq)
            if sum(v[0] for v in mem.values()) <= hw.memory_gib:
                return plan
    return None


def _request(job: JobSpec, capacity: int) -> int:
    """What a job asks for: its maximum, or the most a cluster of this size can ever give."""
    return min(job.gpus_max, capacity)


def _hardware(view: ClusterView, members: list[int]) -> Hardware:
    pl = describe_placements(view, np.array([SINGLE], dtype=object), np.array([members]))
    return Hardware(**{k: float(np.asarray(v)[0]) for k, v in pl.hardware.__dict__.items()})


@dataclass
class SingleDomain:
    """Today's practice: FIFO, first fit, each job inside one domain, Megatron's default plan.

    Strict FIFO: the head of the queue waits until one domain can hold all it asks for.
    """

    name: str = "single-domain"
    stack: Stack | None = None

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = [d.available for d in view.domains]
        largest = max(d.schedulable for d in view.domains)
        out = []
        for job in queue:
            start = time.perf_counter()
            want = _request(job, largest)
            fit = next((i for i, f in enumerate(free) if f >= want), None)
            if fit is None:
                break  # FIFO: nobody overtakes the head of the queue
            plan = megatron_default(job, want, _hardware(view, [fit]), self.stack)
            if plan is None:
                break
            free[fit] -= plan.gpus
            out.append(Placement(job.name, SINGLE, (fit,), (plan.gpus,), plan,
                                 explanation="first domain with room, Megatron default plan",
                                 decision_ms=(time.perf_counter() - start) * 1000))
        return out

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        return None


@dataclass
class GreedyCrossDomain:
    """FIFO; accelerators taken wherever they are free; one flat data-parallel ring."""

    name: str = "greedy-cross-domain"
    stack: Stack | None = None

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = np.array([d.available for d in view.domains])
        capacity = sum(d.schedulable for d in view.domains if d.up)
        out = []
        for job in queue:
            start = time.perf_counter()
            placement = self._place(job, view, free, _request(job, capacity))
            if placement is None:
                break
            free[list(placement.domains)] -= placement.gpus
            out.append(replace(placement, decision_ms=(time.perf_counter() - start) * 1000))
        return out

    def _place(self, job: JobSpec, view: ClusterView, free: np.ndarray,
               want: int) -> Placement | None:
        order = [int(i) for i in np.argsort(-free, kind="stable") if free[i] > 0]
        if not order or free.sum() < job.gpus_min:
            return None
        taken = []
        for i in order:  # the most free first, until the request is met
            taken.append(i)
            if free[taken].sum() >= want:
                break
        hw = _hardware(view, taken)
        plan = megatron_default(job, min(want, int(free[taken].sum())), hw, self.stack)
        if plan is None:
            return None
        replica = plan.tp * plan.pp
        per = [int(free[i]) // replica for i in taken]
        dp = min(plan.dp, sum(per))
        while dp > 0 and job.global_batch % dp:
            dp -= 1
        if dp * replica < job.gpus_min:
            return None
        counts, left = [], dp
        for n in per:
            counts.append(min(n, left))
            left -= counts[-1]
        members = [(i, c) for i, c in zip(taken, counts, strict=True) if c > 0]
        plan = replace(plan, dp=dp)
        kind = SINGLE if len(members) == 1 else DATA
        return Placement(job.name, kind, tuple(i for i, _ in members),
                         tuple(c * replica for _, c in members), plan, flat_dp=kind == DATA,
                         explanation="free accelerators wherever they are, flat DP")

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        return None


@dataclass
class PlannerPolicy:
    """The network-aware plan search, with backfill and re-planning on triggers."""

    weights: Weights
    name: str = "planner"
    # Online decisions search a leaner grid than `xds plan`: micro-batches of 1-2 cover
    # nearly all of the best plans and halve the candidates.
    options: SearchOptions = field(default_factory=lambda: SearchOptions(micro_batch=(1, 2)))
    lookahead: int = 8  # queued jobs considered per decision; the rest wait their turn
    _no_fit: dict = field(default_factory=dict)  # job -> free accelerators it did not fit

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        out = []
        for job in queue[: self.lookahead]:
            free = tuple(d.available for d in view.domains)
            if self._no_fit.get(job.name) == free:
                continue  # nothing freed up since it last did not fit
            placement = self._best(job, view)
            if placement is None:
                self._no_fit[job.name] = free
                continue  # backfill: a later job may fit where this one does not
            out.append(placement)
            view = view.adjust_free({i: -n for i, n in placement.taken.items()})
        return out

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        """The best placement on what is free with the job's own accelerators counted free,
        off the domains it was placed to keep off."""
        view = view.adjust_free(current.taken)
        off = {view.names[i]: 0 for i in current.held}
        best = self._best(job, view.with_free(off) if off else view)
        return replace(best, held=current.held) if best is not None else None

    def state(self) -> dict:
        return dict(self._no_fit)

    def restore(self, state: dict) -> None:
        self._no_fit = dict(state)

    def _best(self, job: JobSpec, view: ClusterView) -> Placement | None:
        if sum(d.available for d in view.domains) < job.gpus_min:
            return None
        try:
            decision = search(job, view, self.weights, self.options, top_k=1, pareto=False)
        except UserError:
            return None
        return placement_of(job.name, decision.best, view, decision.explanation["summary"],
                            decision.decision_ms)


def placement_of(job: str, c: Candidate, view: ClusterView, explanation: str = "",
                 decision_ms: float = 0.0) -> Placement:
    """A searched candidate as a placement on the view's domain indices, stages in order."""
    names = [d.name for d in view.domains]
    order = list(dict.fromkeys(c.stage_to_domain)) if c.kind == PIPELINE else list(
        c.gpus_per_domain)
    return Placement(job, c.kind, tuple(names.index(n) for n in order),
                     tuple(c.gpus_per_domain[n] for n in order), c.plan,
                     explanation=explanation, decision_ms=decision_ms)


POLICIES = ("single-domain", "greedy-cross-domain", "planner", "ppo")
DEFAULT_POLICIES = POLICIES


def make_policy(name: str, weights: Weights, options: dict | None = None) -> Policy:
    """options (ppo only): `policy_path` (trained modules; default: the shipped ones) and
    `serve_url` (decide through that endpoint instead of in this process)."""
    options = options or {}
    if name == "single-domain":
        return SingleDomain()
    if name == "greedy-cross-domain":
        return GreedyCrossDomain()
    if name == "planner":
        return PlannerPolicy(weights)
    if name == "ppo":
        if options.get("serve_url"):
            from xdscheduler.serving.client import served_policy

            return served_policy(weights, options["serve_url"])
        from xdscheduler.rl.agents import local_policy

        return local_policy(weights, options.get("policy_path"))
    raise UserError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
