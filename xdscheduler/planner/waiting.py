"""Waiting for a faster domain: `planner-waits`, the planner letting a job wait for a domain
that frees soon where it would finish sooner than on the best placement free now.

`planner` starts a job that one domain holds on the best placement free now, however slow. On
clusters of mixed accelerators that start can take several times the job's ideal time while a
fast domain frees minutes later. `planner-waits` lets such a job wait where the running jobs'
expected ends (the view's releases, at their speed now) free a domain on which it would finish
in at most WAIT_GAIN of its time here: the time until then plus its run there, against its run
here now. Nothing is reserved: when the domain frees, the job is decided first only if its
response ratio puts it first, and the smaller jobs decided before it may take what freed. So
a wait is a bet on one release, made once: a job waits at most until the release it first
waited for, and past it takes the best placement free. Measured in docs/policies.md (waiting
without that bound cost the largest jobs that one domain holds; `benchmarks.wait_for_faster`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy, is_giant
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
    with nothing to wait for."""
    best, hold = limit_s, None
    for d, domain in enumerate(view.domains):
        looked = 0
        for t, have in view.freeing(d, domain.available):
            if have < job.gpus_min or t - now_s >= best:
                continue
            looked += 1
            if looked > RELEASES_LOOKED_AT:
                break
            ev = evaluate_space(job, only(view, d, have), weights, options)
            if ev is not None:
                i = int(np.argmax(ev.terms["objective"]))
                if (finish := t - now_s + job.tokens / float(ev.terms["tokens_per_s"][i])) < best:
                    best, hold = finish, Hold(d, t, int(ev.gpus[i].sum()))
    return best, hold


def only(view: ClusterView, d: int, have: int) -> ClusterView:
    """The view with `have` accelerators free in domain `d` (at most what it can hold), none
    elsewhere."""
    return view.with_free(
        {x.name: min(have, x.schedulable) if i == d else 0 for i, x in enumerate(view.domains)}
    )


@dataclass
class WaitsForFaster(PlannerPolicy):
    """`planner`, letting a job that one domain holds wait for a domain that frees soon, at
    most until the release it first waited for (`once`; without it, for as long as one
    frees soon). A job that waits is decided again when the free accelerators change (the
    planner's `DecisionQueue`), not when the expected ends move."""

    name: str = "planner-waits"
    once: bool = True
    waits_until: dict[str, float] = field(default_factory=dict)  # job -> its first release

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        queued = {job.name for job in queue}  # a job queued again after a start waits afresh
        self.waits_until = {n: t for n, t in self.waits_until.items() if n in queued}
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
        if there_s >= WAIT_GAIN * here_s or hold is None:
            return i
        if self.once:
            self.waits_until.setdefault(job.name, hold.until_s)
        self.waiting_for(job, hold)
        return None

    def waiting_for(self, job: JobSpec, hold: Hold) -> None:
        """`job` waits for a domain, expected to free what it needs at a time (`hold`): a
        hook for variants (a reservation, a log); the bound is kept whatever it does."""


# The registry's entries from this module: name -> factory(weights, options).
POLICIES = {"planner-waits": lambda weights, options: WaitsForFaster(weights)}
