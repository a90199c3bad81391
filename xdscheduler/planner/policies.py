"""The rule-based policies: the planner's search, across domains or confined to one, and the
baselines a user would run instead (`baselines`).

Each sees the queue (in decision order) and the free accelerators and links now, and returns
placements: which domains, how many accelerators in each, and the parallel plan. They are
registered by name in `POLICIES`, which the policy registry (`xdscheduler.registry`) reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from xdscheduler.cache import BoundedCache
from xdscheduler.planner.baselines import (
    ONLINE,
    BackfillSingleDomain,
    FifoSingleDomain,
    GangSingleDomain,
    GreedyCrossDomain,
)
from xdscheduler.planner.objective import TypicalWork, study_weights
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import (
    MEMO_SIZE,
    Evaluated,
    JobSpec,
    candidate_key,
    evaluate_space,
    explain,
    ideal_tokens_per_s,
    placement_at,
    uneven_if_needed,
)
from xdscheduler.planner.space import SINGLE, SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights

# A giant crosses domains only on a placement that keeps this share of the model FLOPs per
# accelerator-second the job reaches inside one empty domain: it must not spend accelerators the
# jobs behind it would use better (slow links, slower accelerators).
KEEP_MFU = 0.8
_BEST_MFU: BoundedCache[float] = BoundedCache(MEMO_SIZE)  # job shape, cluster -> best MFU in one


@dataclass
class DecisionQueue:
    """Which queued jobs get a decision now: the first few, skipping those that did not fit
    (or were held back) and have seen nothing freed since (nor, for a giant, its response
    ratio doubled: its efficiency floor halves with it): the planner's backfill rule."""

    lookahead: int = 8  # queued jobs considered per decision; the rest wait their turn
    no_fit: dict = field(default_factory=dict)  # job -> what it did not fit (`_tried`)

    def worth_trying(self, job: JobSpec, view: ClusterView, now_s: float) -> bool:
        return self.no_fit.get(job.name) != _tried(job, view, now_s)

    def did_not_fit(self, job: JobSpec, view: ClusterView, now_s: float) -> None:
        self.no_fit[job.name] = _tried(job, view, now_s)

    def forget_all_but(self, queue: list[JobSpec]) -> None:
        """Forget the jobs not in `queue`: one that started and was queued again is tried
        afresh, and a long-lived controller keeps nothing of the jobs it no longer has."""
        names = {job.name for job in queue}
        self.no_fit = {name: t for name, t in self.no_fit.items() if name in names}


def _tried(job: JobSpec, view: ClusterView, now_s: float) -> tuple:
    """What a decision on `job` depends on that changes while it waits: the free accelerators,
    and for a giant how many times its response ratio has doubled."""
    giant = is_giant(job, view)
    doublings = int(np.log2(response_ratio(job, view, now_s))) if giant else 0
    return tuple(d.available for d in view.domains), doublings


@dataclass
class PlannerPolicy:
    """The network-aware plan search, with backfill and re-planning on triggers.

    Queued jobs are decided by priority, then by response ratio (time waited plus ideal run
    time, over ideal run time), so short jobs go first and no job waits for ever. A job that one
    domain can hold gets the best placement by the objective inside one domain, or waits for
    one: measured over loads and seeds (docs/policies.md), spreading such a job
    over domains never paid for the room it took from the jobs behind it. A job larger than
    any domain can hold (a giant) crosses domains on what the others leave, at its minimum
    size while others wait, its work split by its domains' speeds, keeping KEEP_MFU of its
    efficiency inside one domain (a floor that falls as it waits), and preemptibly: a job
    that one domain can hold takes those accelerators back when it needs them (the giant
    saves a checkpoint and queues again). With `max_domains=1` it is the planner confined to
    one domain (its giants never run).
    """

    weights: Weights
    name: str = "planner"
    # Online decisions search a leaner grid than `xds plan`: micro-batches of 1-2 cover
    # nearly all of the best plans and halve the candidates.
    options: SearchOptions = ONLINE
    queue: DecisionQueue = field(default_factory=DecisionQueue)
    seen: TypicalWork = field(default_factory=TypicalWork)  # weighs a job's WAN bill in R

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        self.seen.record(queue)
        return queue_pass(queue, view, now_s, self._best, self.queue, giants=not self.single_domain)

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

    def yielded(
        self,
        job: JobSpec,
        current: Placement,
        view: ClusterView,
        queue: list[JobSpec],
        now_s: float,
    ) -> Placement | None:
        """A placement on all but one of the domains a spread job holds, when giving that one
        back lets the first queued job that fits no single domain now start there (a spread
        soaks up what the queue cannot use, and yields it when the queue can)."""
        free = [d.available for d in view.domains]
        waiting = next(
            (
                q
                for q in by_response_ratio(queue, view, now_s)[: self.queue.lookahead]
                if q.gpus_min > max(free)
            ),
            None,
        )
        if waiting is None:
            return None
        mine = current.taken
        room = [d for d in current.domains if free[d] + mine[d] >= waiting.gpus_min]
        if not room:
            return None
        drop = min(room, key=lambda d: mine[d])
        keep = {
            view.names[i]: (
                view.domains[i].free_gpus + mine.get(i, 0) if i in mine and i != drop else 0
            )
            for i in range(len(view.domains))
        }
        best = self._best(job, view.with_free(keep))
        return replace(best, keep_off=current.keep_off) if best is not None else None

    def job_weights(self, job: JobSpec) -> Weights:
        """R's weights for deciding `job`: its WAN bill weighed as the study counts it."""
        return study_weights(self.weights, job, self.seen)

    def space(self, job: JobSpec, view: ClusterView) -> SearchOptions:
        """The plans searched for `job`: the planner's rule (`search_options`)."""
        return search_options(job, view, self.options)

    def pick(self, ev, job, view, weights, options, modest=False, now_s=None) -> int | None:
        """The candidate placed (None: none, or better to wait): the planner's rule
        (`planner_pick`); a variant of the planner overrides it with `space`."""
        return planner_pick(ev, job, view, weights, options, modest, now_s)

    def _best(
        self, job: JobSpec, view: ClusterView, modest: bool = False, now_s: float | None = None
    ) -> Placement | None:
        if sum(d.available for d in view.domains) < job.gpus_min:
            return None
        start = time.perf_counter()
        options = self.space(job, view)
        weights = self.job_weights(job)
        ev = evaluate_space(job, view, weights, options)
        i = self.pick(ev, job, view, weights, options, modest, now_s)
        if ev is None or i is None:  # nothing fits, or better to wait
            return None
        p = placement_at(ev, i, view, job)
        runner = runner_up(ev, i, view, job)
        why = explain(job, p, runner, weights, view)["summary"]
        # a giant stays preemptible when re-planned or grown
        return replace(
            p,
            explanation=why,
            decision_ms=(time.perf_counter() - start) * 1000,
            preemptible=is_giant(job, view),
        )


PlaceOne = Callable[[JobSpec, ClusterView, bool, float], Placement | None]


def queue_pass(
    queue: list[JobSpec],
    view: ClusterView,
    now_s: float,
    place: PlaceOne,
    decisions: DecisionQueue,
    giants: bool = True,
) -> list[Placement]:
    """The planner's pass over the queue, with `place(job, view, modest, now_s)` deciding each job:
    by response ratio, the first `lookahead` jobs one domain can hold, on a view where what
    the giants hold is free (they are preempted for it), then the giants (unless not
    `giants`), preemptibly (as is any placement `place` made so), on what is really free;
    `modest` when more jobs wait behind. A job is skipped while nothing has changed since it
    last did not fit (`decisions`, which keeps only the jobs in `queue`)."""
    decisions.forget_all_but(queue)
    out, most = [], largest_domain(view)
    ordered = by_response_ratio(queue, view, now_s)
    fitting = [j for j in ordered if j.gpus_min <= most][: decisions.lookahead]
    todo = fitting + ([j for j in ordered if j.gpus_min > most] if giants else [])
    reclaim = view.reclaiming()
    for k, job in enumerate(todo):
        giant = job.gpus_min > most
        seen = view if giant else reclaim
        if not decisions.worth_trying(job, seen, now_s):
            continue  # nothing changed since it last did not fit
        placement = place(job, seen, k + 1 < len(todo), now_s)
        if placement is None:
            decisions.did_not_fit(job, seen, now_s)
            continue  # backfill: a later job may fit where this one does not
        out.append(replace(placement, preemptible=placement.preemptible or giant))
        taken = {i: -n for i, n in placement.taken.items()}
        view, reclaim = view.adjust_free(taken), reclaim.adjust_free(taken)
    return out


def is_giant(job: JobSpec, view: ClusterView) -> bool:
    """More than any domain can hold: only ever run across domains."""
    return job.gpus_min > largest_domain(view)


def search_options(job: JobSpec, view: ClusterView, options: SearchOptions) -> SearchOptions:
    """The plan space the planner's rule leaves `job`: a job one domain can hold is only ever
    placed inside one, so no spreads are searched for it, and one a data centre can hold (a
    mixed domain's pools together) only inside one (uneven plans where it needs them). A
    giant's spread splits its layers or micro-batches by its domains' speeds (`balance`): on
    even plans its slowest domain would pace every other."""
    options = uneven_if_needed(job, view, options)
    if not is_giant(job, view):
        return replace(options, max_domains=1)
    options = replace(options, balance=True)
    return replace(options, one_site=True) if job.gpus_min <= largest_site(view) else options


def largest_domain(view: ClusterView) -> int:
    """The most accelerators one domain could give this scheduler's jobs (its own jobs all
    finished): a job asking for more is a giant, only ever run across domains."""
    return max((d.schedulable for d in view.domains if d.up), default=0)


def largest_site(view: ClusterView) -> int:
    """The most accelerators one data centre could give this scheduler's jobs: a domain's, or
    the pools' of a mixed domain together."""
    return int(view.largest_site([d.schedulable if d.up else 0 for d in view.domains]))


def by_response_ratio(queue: list[JobSpec], view: ClusterView, now_s: float) -> list[JobSpec]:
    """Highest priority first, then the highest response ratio: (waited + ideal time) / ideal
    time. Short jobs go first, and a long one's ratio grows while it waits."""

    return sorted(queue, key=lambda job: (-job.priority, -response_ratio(job, view, now_s)))


def response_ratio(job: JobSpec, view: ClusterView, now_s: float) -> float:
    """(waited + ideal run time) / ideal run time: 1 on arrival, 2 once it waited its run."""
    ideal_s = max(job.tokens / ideal_tokens_per_s(job, view), 1.0)
    return (max(now_s - job.arrival_s, 0.0) + ideal_s) / ideal_s


def planner_pick(
    ev: Evaluated | None,
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    options: SearchOptions,
    modest: bool = False,
    now_s: float | None = None,
) -> int | None:
    """The planner's candidate of an evaluated space (None: nothing fits, or better to wait):
    the best inside one domain for a job one domain can hold; for a giant (see PlannerPolicy)
    the best across domains among those keeping KEEP_MFU of its efficiency inside one (the
    best by the objective alone may not, and waiting for it can last hours), a floor divided
    by its response ratio at `now_s` (`response_ratio`; None: the full floor), so that no giant
    waits for ever behind slow links; `modest`: a giant takes no more than its minimum (others
    wait)."""
    if ev is None:
        return None
    kind = np.asarray(ev.placements.kind)[ev.place]
    objective, mfu = ev.terms["objective"], ev.terms["utilization"]
    if not is_giant(job, view):
        single = np.flatnonzero(kind == SINGLE)
        return int(single[np.argmax(objective[single])]) if len(single) else None
    ratio = 1.0 if now_s is None else response_ratio(job, view, now_s)
    floor = KEEP_MFU * best_single_mfu(job, view, weights, options) / ratio
    modest_ok = ~modest | (ev.gpus.sum(axis=1) <= job.gpus_min)
    multi = np.flatnonzero((kind != SINGLE) & modest_ok & (mfu >= floor))
    return int(multi[np.argmax(objective[multi])]) if len(multi) else None


def best_single_mfu(
    job: JobSpec, view: ClusterView, weights: Weights, options: SearchOptions
) -> float:
    """The job's best model FLOP utilisation inside one empty domain of the cluster."""
    key = (job.shape_key, tuple((d.name, d.accelerator.name, d.total_gpus) for d in view.domains))
    if key not in _BEST_MFU:
        ev = evaluate_space(job, view.empty(), weights, replace(options, max_domains=1))
        _BEST_MFU[key] = float(ev.terms["utilization"].max()) if ev is not None else 0.0
    return _BEST_MFU[key]


def runner_up(ev: Evaluated, chosen: int, view: ClusterView, job: JobSpec) -> Placement | None:
    """The best candidate of another placement or shape than the chosen one (the explanation's
    runner-up)."""
    mine = candidate_key(ev, chosen)
    other = next(
        (
            int(i)
            for i in np.argsort(-ev.terms["objective"], kind="stable")
            if candidate_key(ev, int(i)) != mine
        ),
        None,
    )
    return None if other is None else placement_at(ev, other, view, job)


PolicyFactory = Callable[[Weights, dict], Policy]
# The registry's entries from this layer: name -> factory(weights, options).
POLICIES: dict[str, PolicyFactory] = {
    "fifo-single-domain": lambda weights, options: FifoSingleDomain(),
    "backfill-single-domain": lambda weights, options: BackfillSingleDomain(),
    "gang-single-domain": lambda weights, options: GangSingleDomain(),
    "planner-single-domain": lambda weights, options: PlannerPolicy(
        weights, "planner-single-domain", replace(ONLINE, max_domains=1)
    ),
    "greedy-cross-domain": lambda weights, options: GreedyCrossDomain(),
    "planner": lambda weights, options: PlannerPolicy(weights),
}
