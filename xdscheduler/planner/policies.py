"""The rule-based policies: the planner's search, across domains or confined to one, and the
baselines a user would run instead (`baselines`).

Each sees the queue (in decision order) and the free accelerators and links now, and returns
placements: which domains, how many accelerators in each, and the parallel plan. They are
registered by name in `POLICIES`, which the policy registry (`xdscheduler.registry`) reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from xdscheduler.errors import UserError
from xdscheduler.planner.baselines import (
    ONLINE,
    BackfillSingleDomain,
    FifoSingleDomain,
    GangSingleDomain,
    GreedyCrossDomain,
)
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import JobSpec, search
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights


@dataclass
class PlannerPolicy:
    """The network-aware plan search, with backfill and re-planning on triggers."""

    weights: Weights
    name: str = "planner"
    # Online decisions search a leaner grid than `xds plan`: micro-batches of 1-2 cover
    # nearly all of the best plans and halve the candidates.
    options: SearchOptions = ONLINE
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

    @property
    def single_domain(self) -> bool:
        return self.options.max_domains == 1

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
    "fifo-single-domain": lambda weights, options: FifoSingleDomain(),
    "backfill-single-domain": lambda weights, options: BackfillSingleDomain(),
    "gang-single-domain": lambda weights, options: GangSingleDomain(),
    "planner-single-domain": lambda weights, options: PlannerPolicy(
        weights, "planner-single-domain", replace(ONLINE, max_domains=1)),
    "greedy-cross-domain": lambda weights, options: GreedyCrossDomain(),
    "planner": lambda weights, options: PlannerPolicy(weights),
}
