"""The rule-based policies: today's practice, a greedy spread, and the planner's search.

Each sees the queue (in decision order) and the free accelerators and links now, and returns
placements: which domains, how many accelerators in each, and the parallel plan. They are
registered by name in `POLICIES`, which the policy registry (`xdscheduler.registry`) reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import memory_gib
from xdscheduler.errors import UserError
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import JobSpec, search
from xdscheduler.planner.space import DATA, SINGLE, SearchOptions, describe_placements
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights


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
                                 (view.domains[fit].name,),
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
                         tuple(c * replica for _, c in members), plan,
                         tuple(view.domains[i].name for i, _ in members), flat_dp=kind == DATA,
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
        off = {view.names[i]: 0 for i in current.keep_off}
        best = self._best(job, view.with_free(off) if off else view)
        return replace(best, keep_off=current.keep_off) if best is not None else None

    def state(self) -> dict:
        return dict(self._no_fit)

    def restore(self, state: dict) -> None:
        self._no_fit = dict(state)

    def _best(self, job: JobSpec, view: ClusterView) -> Placement | None:
        if sum(d.available for d in view.domains) < job.gpus_min:
            return None
        try:
            result = search(job, view, self.weights, self.options, top_k=1, pareto=False)
        except UserError:
            return None
        return replace(result.best, explanation=result.explanation["summary"],
                       decision_ms=result.decision_ms)


PolicyFactory = Callable[[Weights, dict], Policy]
# The registry's entries from this layer: name -> factory(weights, options).
POLICIES: dict[str, PolicyFactory] = {
    "single-domain": lambda weights, options: SingleDomain(),
    "greedy-cross-domain": lambda weights, options: GreedyCrossDomain(),
    "planner": lambda weights, options: PlannerPolicy(weights),
}
