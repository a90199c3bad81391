"""Waiting for a faster domain: `planner-waits`, the planner letting a job wait for a domain
that frees soon where it would finish sooner than on the best placement free now.

`planner` starts a job that one domain holds on the best placement free now, however slow. On
clusters of mixed accelerators that start can take several times the job's ideal time while a
fast domain frees minutes later. `planner-waits` lets such a job wait where the running jobs'
expected ends (the view's releases, at their speed now) free a domain on which it would finish
in at most WAIT_GAIN of its time here: the time until then plus its run there, against its run
here now. Nothing is held for the waiting job: when the domain frees, it is decided first only
if its response ratio puts it first, and the smaller jobs decided before it may take what
freed. So a wait is a bet on one release, made once: a job waits at most until the release it
first waited for, and past it takes the best placement free. And one domain is kept out of the bets:
the largest queued job that one domain holds but none has free now keeps the domain expected
to free its minimum first, so the smaller jobs' bets do not take piece by piece what it needs
all at once (the one reservation of EASY backfill, for that job alone). Measured in
docs/policies.md (waiting without the bound, or without the reservation, cost the largest jobs
that one domain holds; `benchmarks.wait_for_faster`).

Looking ahead is one plan search per round of releases (each domain's first, then its second)
over the domains that round frees, not one per domain and release: the same plans, at a
fifth of the time on 64 domains (`benchmarks.bench_planner`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from xdscheduler.planner.objective import weighed
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy, is_giant, largest_domain
from xdscheduler.planner.search import JobSpec, evaluate_space
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights

WAIT_GAIN = 0.9  # wait only to finish in at most 90% of the time it would take here now
RELEASES_LOOKED_AT = 2  # per domain: the first points at which it holds the job's minimum


@dataclass(frozen=True)
class Hold:
    """What a waiting job expects: `need` accelerators of `domain` at `until_s`."""

    domain: int
    until_s: float
    need: int


def soonest_finish_s(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    options: SearchOptions,
    now_s: float,
    limit_s: float,
) -> tuple[float, Hold | None]:
    """The soonest the job could finish (from `now_s`) on one domain freed by the running
    jobs' expected ends, each domain at the first RELEASES_LOOKED_AT points at which it holds
    the job's minimum, and what it would wait for there; `limit_s` where none finishes sooner,
    with nothing to wait for. Each domain's plan is the one the planner would pick there alone
    (`options`: one domain), but the domains of a round of releases are searched together."""
    looked = releases_looked_at(job, view, now_s, limit_s)
    picked: dict[tuple[int, int], tuple[float, int]] = {}
    for r in range(RELEASES_LOOKED_AT):
        at = {d: have for (d, k), (_, have) in looked.items() if k == r}
        for batch in one_of_each_kind(at, view):
            picked |= {(d, r): p for d, p in picks(job, view, batch, weights, options).items()}
    best, hold = limit_s, None
    for (d, r), (t, _) in looked.items():  # by domain, then release: the first of equals wins
        if (d, r) in picked:
            tokens_per_s, need = picked[(d, r)]
            if (finish := t - now_s + job.tokens / tokens_per_s) < best:
                best, hold = finish, Hold(d, t, need)
    return best, hold


def releases_looked_at(
    job: JobSpec, view: ClusterView, now_s: float, limit_s: float
) -> dict[tuple[int, int], tuple[float, int]]:
    """(domain, round) -> (when, accelerators free then): each domain's first
    RELEASES_LOOKED_AT releases that free the job's minimum before `limit_s` (a later one could
    not finish it sooner), by domain."""
    looked = {}
    for d, domain in enumerate(view.domains):
        fits = (
            (t, have)
            for t, have in view.freeing(d, domain.available)
            if have >= job.gpus_min and t - now_s < limit_s
        )
        for r, release in enumerate(itertools.islice(fits, RELEASES_LOOKED_AT)):
            looked[(d, r)] = release
    return looked


def one_of_each_kind(at: dict[int, int], view: ClusterView) -> list[dict[int, int]]:
    """`at` (domain -> accelerators) in groups with at most one domain of an accelerator each:
    a search keeps one of alike domains (`space.placements`), and each here needs its own."""
    groups: list[dict[int, int]] = []
    for d, have in at.items():
        kind = view.domains[d].accelerator.name
        free = (g for g in groups if all(view.domains[e].accelerator.name != kind for e in g))
        group = next(free, None)
        if group is None:
            groups.append(group := {})
        group[d] = have
    return groups


def picks(
    job: JobSpec,
    view: ClusterView,
    have: dict[int, int],
    weights: Weights,
    options: SearchOptions,
) -> dict[int, tuple[float, int]]:
    """Per domain of `have` (domain -> accelerators free, at most what it can hold), the tokens
    per second and accelerators of the plan the planner would pick there with nothing else
    free: one search over those domains (a plan on one domain each, as each would be searched
    alone), each domain's candidates scored among themselves."""
    options = replace(options, max_domains=1)
    free = {
        x.name: min(have[i], x.schedulable) if i in have else 0 for i, x in enumerate(view.domains)
    }
    ev = evaluate_space(job, view.with_free(free), weights, options)
    if ev is None:
        return {}
    domain, terms, out = ev.placements.domains[ev.place, 0], ev.terms, {}
    for d in have:
        mine = np.flatnonzero(domain == d)
        if len(mine):
            tps, util, cost = (terms[k][mine] for k in ("tokens_per_s", "utilization", "cost"))
            i = mine[int(np.argmax(weighed(tps, util, cost, weights)[1]))]
            out[d] = float(terms["tokens_per_s"][i]), int(ev.gpus[i].sum())
    return out


def largest_blocked(queue: list[JobSpec], view: ClusterView) -> tuple[str, int] | None:
    """The largest queued job that one domain holds but none has free now (of equals, the one
    that arrived first), and the domain whose running jobs' expected ends free its minimum
    first (of equals, the first listed); None where there is none."""
    most = largest_domain(view)
    free = max((d.available for d in view.domains), default=0)
    blocked = [j for j in queue if free < j.gpus_min <= most]
    if not blocked:
        return None
    head = max(blocked, key=lambda j: (j.gpus_min, -j.arrival_s))
    firsts = releases_looked_at(head, view, 0.0, math.inf)  # no limit: `now` does not matter
    soonest = min(((t, d) for (d, r), (t, _) in firsts.items() if r == 0), default=None)
    return None if soonest is None else (head.name, soonest[1])


@dataclass
class WaitsForFaster(PlannerPolicy):
    """`planner`, letting a job that one domain holds wait for a domain that frees soon, at
    most until the release it first waited for (`once`; without it, for as long as one
    frees soon), and never for the domain kept for the largest job that nothing free holds
    now (`reserve_largest`). A job that waits is decided again when the free accelerators
    change (the planner's `DecisionQueue`), not when the expected ends move."""

    name: str = "planner-waits"
    once: bool = True
    reserve_largest: bool = True
    waits_until: dict[str, float] = field(default_factory=dict)  # job -> its first release
    reserved: tuple[str, int] | None = None  # (the largest blocked job, the domain kept for it)

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        queued = {job.name for job in queue}  # a job queued again after a start waits afresh
        self.waits_until = {n: t for n, t in self.waits_until.items() if n in queued}
        self.reserved = largest_blocked(queue, view) if self.reserve_largest else None
        return super().decide(queue, view, now_s)

    def pick(self, ev, job, view, weights, options, modest=False, now_s=None) -> int | None:
        i = super().pick(ev, job, view, weights, options, modest, now_s)
        if i is None or ev is None or now_s is None or not view.releases:
            return i
        if is_giant(job, view):  # a giant runs across domains: it has none to wait for
            return i
        if now_s > self.waits_until.get(job.name, math.inf):
            return i  # the release it waited for passed without it: the bet is lost
        here_s = job.tokens / float(ev.terms["tokens_per_s"][i])
        single = replace(options, max_domains=1)
        there_s, hold = soonest_finish_s(job, view, weights, single, now_s, here_s)
        if there_s >= WAIT_GAIN * here_s or hold is None or not self.may_bet(job, hold):
            return i
        if self.once:
            self.waits_until.setdefault(job.name, hold.until_s)
        self.waiting_for(job, hold)
        return None

    def may_bet(self, job: JobSpec, hold: Hold) -> bool:
        """Whether `job` may wait for `hold`, one it would gain by: not on the domain kept for
        the largest blocked job (`largest_blocked`), unless it is that job."""
        if self.reserved is None:
            return True
        name, domain = self.reserved
        return job.name == name or hold.domain != domain

    def waiting_for(self, job: JobSpec, hold: Hold) -> None:
        """`job` waits for a domain, expected to free what it needs at a time (`hold`): a
        hook for variants (a reservation, a log); the bound is kept whatever it does."""


# The registry's entries from this module: name -> factory(weights, options).
POLICIES = {"planner-waits": lambda weights, options: WaitsForFaster(weights)}
