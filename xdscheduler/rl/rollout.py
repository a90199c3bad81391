"""What a decision is worth to a study: its effect on the objective over the next hours, against
the planner's own decision in the same state, both continued by the planner.

A placement's cost to the jobs behind it (the fast accelerators it takes, the queue it makes)
shows up hours later, in other jobs' times, far beyond what a per-decision reward sees and too
diffuse for a value function to pin on one decision among a hundred. Two rollouts of the same
engine from the same state, with the same arrivals and the same network, differ only by the
decision: their difference is the decision's advantage over the planner, with the noise of
the future cancelled out (the rollout algorithm of Bertsekas, one step of policy iteration
over the planner).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import ideal_tokens_per_s
from xdscheduler.scenario import Weights
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.metrics import job_efficiency


@dataclass(frozen=True)
class Tally:
    """The engine's running totals at one moment, to count what came after it."""

    since_s: float
    busy_gpu_s: float
    wan_cost: float

    @classmethod
    def of(cls, eng: Engine) -> Tally:
        return cls(eng.now, eng.busy_gpu_s, sum(r.wan_cost for r in eng.runs))


def outlook(eng: Engine, weights: Weights, since: Tally) -> float:
    """The study objective of the jobs a decision at `since` can still affect (running or
    queued then, or arrived since), summed over them, as it stands at the engine's clock:
    finished jobs by their time taken, running ones at their speed now, queued ones as if they
    started now at their ideal speed (a queue's full cost is not known yet). Busy time and WAN
    cost count from `since` on."""
    since_s = since.since_s
    now, total, jobs = eng.now, 0.0, 0
    for r in eng.runs:
        if r.arrival_s > now or (r.end_s is not None and r.end_s <= since_s):
            continue
        ideal = ideal_tokens_per_s(r.spec, eng.base_view)
        left = r.tokens - r.done
        if r.end_s is not None:
            end = r.end_s
        elif r.running and r.rate > 0:
            end = max(now, r.paused_until) + left / r.rate
        else:
            end = now + left / ideal
        total += weights.efficiency * job_efficiency(r.tokens / ideal, end - r.arrival_s)
        jobs += 1
    capacity = sum(d.total_gpus for d in eng.base_view.domains) * max(now - since_s, 1e-9)
    busy = eng.busy_gpu_s - since.busy_gpu_s
    bill = busy / 3600 * eng.base_view.mean_gpu_price
    cost = (sum(r.wan_cost for r in eng.runs) - since.wan_cost) / bill if bill else 0.0
    # Utilisation and cost as a study measures them, weighted per job like the efficiency terms.
    return total + jobs * (weights.utilization * busy / capacity - weights.cost * cost)


def rollout(
    eng: Engine, job: str, placement: Placement | None, weights: Weights, hours: float
) -> float:
    """The outlook after placing `job` as given (None: leaving it queued) and letting the
    planner decide everything else for `hours`. The engine itself is left untouched."""
    shared = {
        id(eng.dynamics): eng.dynamics,
        id(eng.scn): eng.scn,
        id(eng.base_view): eng.base_view,
    }
    twin = copy.deepcopy(eng, shared)
    twin.hand_over(PlannerPolicy(weights))
    since = Tally.of(twin)  # busy time and WAN cost count from the decision on
    if placement is not None:
        twin.place(next(r for r in twin.queue if r.spec.name == job), placement)
    twin.run(until_s=since.since_s + hours * 3600)
    return outlook(twin, weights, since)


def advantage(
    eng: Engine,
    job: str,
    chosen: Placement | None,
    planners: Placement,
    weights: Weights,
    hours: float,
) -> float:
    """How much better the study goes over `hours` with `chosen` than with the planner's own
    pick, both continued by the planner (0 when they are the same)."""
    if _same(chosen, planners):
        return 0.0
    return rollout(eng, job, chosen, weights, hours) - rollout(eng, job, planners, weights, hours)


def _key(p: Placement | None) -> tuple | None:
    return None if p is None else (p.kind, p.domains, p.gpus, p.plan, p.keep_off)


def _same(a: Placement | None, b: Placement | None) -> bool:
    return _key(a) == _key(b)
