"""Scheduling in a study: the order in which queued jobs are decided, and the engine's policy
deciding them.

Jobs hit by faults go first, on a view where the backup pools (and holds for announced jobs)
are free to them; then the whole queue, by priority and arrival, on a view without them. The
policy's placements start at once; one that takes accelerators a preemptible placement holds
preempts it first (`reclaim`). With tenants (`sim.tenancy`), queued jobs that may preempt
make room first, and the policy sees only what quotas admit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import plannable
from xdscheduler.planner.view import ClusterView

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine


def decision_order(queue: list) -> list:
    """The queue in the order decisions take it: priority, then arrival."""
    return sorted(queue, key=lambda r: (-r.priority, r.arrival_s, r.spec.name))


def decide(eng: Engine, policy: Policy, t: float) -> None:
    """Let `policy` place what it will of the engine's queue now."""
    order = decision_order(eng.queue)
    by_name = {r.spec.name: r for r in order}
    urgent = [r for r in order if r.recovering]
    releases = expected_releases(eng)
    tenancy = eng.tenancy
    if urgent and eng.faults:  # jobs that lost their accelerators may use the pools
        pools = with_pools(eng, eng.speeds.links_left()).with_releases(releases)
        for p in _admitted(eng, policy, urgent, pools, t, by_name):
            eng.place(by_name[p.job], p)
        order = [r for r in order if r in eng.queue]
    if tenancy:  # room for jobs that may preempt first
        tenancy.preempt_for(eng, order, t)
        order = [r for r in order if r in eng.queue]
    # the links as the running jobs leave them
    view = eng.speeds.links_left().with_releases(releases).with_reclaimable(reclaimable(eng))
    for p in _admitted(eng, policy, order, view, t, by_name):
        reclaim(eng, p)
        eng.place(by_name[p.job], p)


def _admitted(eng: Engine, policy: Policy, jobs: list, view: ClusterView, t: float, by_name: dict):
    """The policy's placements of `jobs` on `view`; with tenants, of those quotas admit (each
    at most its tenant's room), and only those keeping every tenant within its quota."""
    if eng.tenancy is None:
        return policy.decide([r.spec for r in jobs], view, t)
    specs, used = eng.tenancy.admissible(jobs, eng.active)
    # a job its tenant's room caps below what its memory needs waits, as one with no room
    specs = [s for s in specs if s.gpus_max == by_name[s.name].spec.gpus_max or plannable(s, view)]
    return [
        p
        for p in policy.decide(specs, view, t)
        if eng.tenancy.accept(by_name[p.job].tenant, p.taken, used)
    ]


def reclaimable(eng: Engine) -> dict[int, int]:
    """Accelerators held by preemptible placements, by domain index."""
    held: dict[int, int] = {}
    for r in eng.active:
        if r.placed.preemptible:
            for i, n in r.placed.taken.items():
                held[i] = held.get(i, 0) + n
    return held


def reclaim(eng: Engine, p) -> None:
    """Preempt the preemptible jobs that hold what `p` takes beyond what is free, the most
    recently started first (they have the least to lose)."""
    for i, n in p.taken.items():
        if n <= max(eng.view.domains[i].free_gpus, 0):
            continue  # the usual case: it fits in what is free
        holders = sorted(
            (r for r in eng.active if r.placed.preemptible and i in r.placed.taken),
            key=lambda r: -(r.start_s or 0.0),
        )
        while n > max(eng.view.domains[i].free_gpus, 0) and holders:
            eng.preempt(holders.pop(0), f"preempt: {p.job} reclaims {eng.view.domains[i].name}")


def expected_releases(eng: Engine) -> list[tuple[float, int, int]]:
    """When the running jobs should give their accelerators back, at their speed now:
    (time s, domain, count)."""
    ends = ((r, r.finish_s(eng.now)) for r in eng.active)
    return [(end, d, n) for r, end in ends if end < math.inf for d, n in r.placed.taken.items()]


def held_back(eng: Engine) -> dict[str, int] | None:
    """Accelerators no placement may take: spare nodes of the backup pools and holds for
    announced jobs, by domain (None when neither is kept)."""
    if eng.faults is None and eng.demand is None:
        return None
    spare = eng.faults.spare if eng.faults else {}
    holds = eng.demand.holding if eng.demand else {}
    return {d: spare.get(d, 0) + holds.get(d, 0) for d in {**holds, **spare}}


def with_pools(eng: Engine, view: ClusterView) -> ClusterView:
    """`view` (the engine's, as a job finds its links) with what is held back free: what jobs
    hit by faults may take."""
    held = held_back(eng) or {}
    free = {
        n: d.free_gpus + (held.get(n, 0) if n not in eng.down else 0)
        for n, d in zip(eng.names, view.domains, strict=True)
    }
    return view.with_free(free, pooled={n: 0 for n in eng.names})
