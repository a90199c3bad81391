"""`planner-waits`: the planner letting a job wait for a domain that frees soon."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.bench_planner import busy, waiting_job
from tests.test_planner import eight_b, pair
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import evaluate_space
from xdscheduler.planner.waiting import (
    RELEASES_LOOKED_AT,
    Hold,
    WaitsForFaster,
    largest_blocked,
    picks,
    soonest_finish_s,
)
from xdscheduler.registry import make_policy
from xdscheduler.scenario import Weights

SINGLE = replace(ONLINE, max_domains=1)


def held(west_frees_at_s: float, east_free: int = 8):
    """east: `east_free` of 16 free now; west: all 16 held, given back at `west_frees_at_s`."""
    view = pair().with_free({"east": east_free, "west": 0})
    return view.with_releases([(west_frees_at_s, 1, 16)])


def test_the_soonest_finish_is_on_the_domain_that_frees_or_the_limit():
    job = eight_b(gpus_min=8, gpus_max=16)
    here = PlannerPolicy(Weights())._best(job, held(1e9))
    here_s = job.tokens / here.estimate.tokens_per_s
    soon, hold = soonest_finish_s(job, held(600.0), Weights(), SINGLE, 0.0, here_s)
    assert 600.0 < soon < 0.6 * here_s  # twice the accelerators, ten minutes from now
    assert hold == Hold(1, 600.0, 16)  # all of west, once it frees
    late = soonest_finish_s(job, held(here_s), Weights(), SINGLE, 0.0, here_s)
    assert late == (here_s, None)
    # a release the job's minimum does not fit into is not looked at
    too_few = pair().with_free({"east": 8, "west": 0}).with_releases([(600.0, 1, 4)])
    assert soonest_finish_s(job, too_few, Weights(), SINGLE, 0.0, here_s)[0] == here_s


def test_a_job_waits_only_where_waiting_finishes_it_sooner():
    job = eight_b(gpus_min=8, gpus_max=16)
    waits = WaitsForFaster(Weights())
    assert waits.decide([job], held(600.0), 0.0) == []  # west frees soon: it waits
    # west frees too late: it starts on east (a fresh policy: the one above skips the job
    # until the free accelerators change)
    (p,) = WaitsForFaster(Weights()).decide([job], held(1e9), 0.0)
    assert set(p.domains) == {0}  # east
    (same,) = PlannerPolicy(Weights()).decide([job], held(600.0), 0.0)  # planner never waits
    assert set(same.domains) == {0}


def test_a_giant_never_waits_for_one_domain():
    giant = eight_b(gpus_min=24, gpus_max=32)  # more than a domain holds
    view = pair().with_releases([(600.0, 1, 16)])
    waits = WaitsForFaster(Weights())
    (p,) = waits.decide([giant], view, 0.0)
    assert len(p.domains) == 2


def test_a_job_waits_at_most_until_the_release_it_first_waited_for():
    """It waits for west's release; past it, west still held (its expected end moved later),
    it takes east, where the unbounded variant waits on."""
    job = eight_b(gpus_min=8, gpus_max=16)
    here_s = job.tokens / PlannerPolicy(Weights())._best(job, held(1e9)).estimate.tokens_per_s
    first, later = 0.05 * here_s, 0.1 * here_s
    once, unbounded = WaitsForFaster(Weights()), WaitsForFaster(Weights(), once=False)
    for policy in (once, unbounded):
        assert policy.decide([job], held(first), 0.0) == []
    assert once.waits_until == {job.name: first}
    # past the release, west expected to free a little later; east frees one more (the
    # planner decides a job again when the free accelerators change)
    again = held(1.5 * later, east_free=9)
    assert unbounded.decide([job], again, later) == []
    (p,) = once.decide([job], again, later)
    assert set(p.domains) == {0}  # east
    # a job no longer queued is forgotten: queued again after a start, it waits afresh
    assert once.decide([], again, later) == [] and once.waits_until == {}


def test_planner_waits_is_registered_beside_the_planner():
    policy = make_policy("planner-waits", Weights())
    assert isinstance(policy, WaitsForFaster) and policy.name == "planner-waits"
    assert policy.once and not policy.single_domain


def test_the_bound_holds_whatever_a_variant_does_on_a_wait():
    """A variant's `waiting_for` (a log, a reservation) that does not call the policy's own
    keeps the bound all the same."""

    class Quiet(WaitsForFaster):
        def waiting_for(self, job, hold):
            pass

    job = eight_b(gpus_min=8, gpus_max=16)
    quiet = Quiet(Weights())
    assert quiet.decide([job], held(600.0), 0.0) == []
    assert quiet.waits_until == {job.name: 600.0}


def one_domain_at_a_time(job, view, weights, options, now_s, limit_s):
    """The look-ahead as first written: a search of each domain alone at each release, in
    order, skipping what cannot beat the best so far. `soonest_finish_s` must agree."""
    best, hold = limit_s, None
    for d, domain in enumerate(view.domains):
        looked = 0
        for t, have in view.freeing(d, domain.available):
            if have < job.gpus_min or t - now_s >= best:
                continue
            looked += 1
            if looked > RELEASES_LOOKED_AT:
                break
            alone = {
                x.name: min(have, x.schedulable) if i == d else 0
                for i, x in enumerate(view.domains)
            }
            ev = evaluate_space(job, view.with_free(alone), weights, options)
            if ev is not None:
                i = int(np.argmax(ev.terms["objective"]))
                if (finish := t - now_s + job.tokens / float(ev.terms["tokens_per_s"][i])) < best:
                    best, hold = finish, Hold(d, t, int(ev.gpus[i].sum()))
    return best, hold


@pytest.mark.parametrize("domains", [3, 8, 16])
def test_searching_a_rounds_domains_together_finds_what_each_alone_would(domains):
    """Alike domains (16: two of each accelerator, some equally free) are searched apart, and
    the first domain of equal finishes wins, as one domain at a time."""
    rng = np.random.default_rng(domains)
    jobs = (waiting_job(), replace(waiting_job(), gpus_min=8, tokens=2e9), eight_b(8, 128))
    for seed in range(3):
        view = busy(domains, seed)
        free = {x.name: int(rng.choice([0, 16, 32, 64])) for x in view.domains}
        for v in (view, view.with_free(free)):
            for job, limit_s in itertools.product(jobs, (3600.0, 86400.0, 1e7)):
                want = one_domain_at_a_time(job, v, Weights(), SINGLE, 0.0, limit_s)
                assert soonest_finish_s(job, v, Weights(), SINGLE, 0.0, limit_s) == want


def test_each_domain_searched_together_gets_the_plan_it_would_get_alone():
    """With a slow fabric in every other domain and utilisation weighed high, a plan's R
    depends on the fastest plan it is scored against: each domain's among its own."""
    view = busy(8)
    slow = tuple(replace(x, scaleout_gbps=5.0) if i % 2 else x for i, x in enumerate(view.domains))
    view, have = replace(view, domains=slow), dict.fromkeys(range(8), 64)
    weights, job = Weights(efficiency=0.3, utilization=1.0, cost=0.3), eight_b(8, 128)
    together = picks(job, view, have, weights, SINGLE)
    for d in have:
        alone = {x.name: 64 if i == d else 0 for i, x in enumerate(view.domains)}
        ev = evaluate_space(job, view.with_free(alone), weights, SINGLE)
        i = int(np.argmax(ev.terms["objective"]))
        assert together[d] == (float(ev.terms["tokens_per_s"][i]), int(ev.gpus[i].sum()))


def test_the_largest_job_nothing_holds_now_keeps_its_domain_from_the_others_bets():
    """west: 8 free now, 8 more in ten minutes; east all held. `big` needs west's sixteen and
    nothing holds it now, so west is kept for it: `a`, which would bet on west's sixteen,
    takes west's eight now instead. Without `big` queued, or without the reservation, `a`
    bets."""
    west_frees = pair().with_free({"east": 0, "west": 8}).with_releases([(600.0, 1, 8)])
    big, a = replace(eight_b(16, 16), name="big"), replace(eight_b(8, 16), name="a")
    assert largest_blocked([a, big], west_frees) == ("big", 1)
    assert largest_blocked([a], west_frees) is None  # west's eight hold `a` now
    later = replace(eight_b(16, 16), name="later", arrival_s=60.0)
    assert largest_blocked([later, big], west_frees) == ("big", 1)  # the first arrived
    (p,) = WaitsForFaster(Weights()).decide([big, a], west_frees, 0.0)
    assert p.job == "a" and set(p.domains) == {1} and p.total_gpus == 8
    assert WaitsForFaster(Weights()).decide([a], west_frees, 0.0) == []
    unreserved = WaitsForFaster(Weights(), reserve_largest=False)
    assert unreserved.decide([big, a], west_frees, 0.0) == [] and unreserved.reserved is None
