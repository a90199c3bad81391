"""The baseline ladder, worked by hand on two small domains: EASY backfill's reservation, gang
admission at any size, the fair greedy's spill over domains."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xdscheduler import catalog
from xdscheduler.planner.baselines import (
    BackfillSingleDomain,
    GangSingleDomain,
    GreedyCrossDomain,
    fastest_on,
)
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import parse_scenario


def two_domains() -> ClusterView:
    """east and west, 16 H100 each, one 10 Gbit/s link."""
    return ClusterView.from_scenario(
        parse_scenario(
            {
                "name": "two",
                "domains": [
                    {
                        "name": n,
                        "location": {"city": n},
                        "nodes": [{"accelerator": "H100-SXM", "count": 2}],
                    }
                    for n in ("east", "west")
                ],
                "links": [{"a": "east", "b": "west", "bandwidth_gbps": 10, "rtt_ms": 20}],
            }
        )
    )


def job(name: str, gpus_min: int, gpus_max: int, hours: float, view: ClusterView) -> JobSpec:
    """A llama3-8b job sized to run `hours` on its fastest plan of `gpus_max` accelerators."""
    arch = catalog.model("llama3-8b")
    spec = JobSpec(name, arch, 256, arch.seq_len, gpus_min, gpus_max, tokens=1.0)
    p = fastest_on(spec, view, {0: gpus_max}, least=gpus_max)
    return replace(spec, tokens=p.estimate.tokens_per_s * hours * 3600)


def test_a_domain_frees_what_its_running_jobs_hold_as_they_end_and_nothing_when_down():
    view = (
        two_domains()
        .with_free({"east": 4, "west": 8})
        .with_releases([(3000.0, 1, 8), (1000.0, 0, 12), (2000.0, 0, 2)])
    )
    assert list(view.freeing(0, 4)) == [(1000.0, 16), (2000.0, 18)]
    assert list(view.freeing(1, 8)) == [(3000.0, 16)]
    assert list(view.with_down({"east"}).freeing(0, 4)) == []


def test_easy_backfill_reserves_for_the_head_and_lets_only_harmless_jobs_by():
    # east: 4 free now, 12 more when a running job ends at 1,000 s; west: 8 free, 8 more at
    # 3,000 s. The head asks for a whole domain: east holds it first, at 1,000 s.
    base = two_domains()
    view = base.with_free({"east": 4, "west": 8}).with_releases([(1000.0, 0, 12), (3000.0, 1, 8)])
    head = job("head", 16, 16, 2.0, base)
    long = job("long", 4, 4, 2.0, base)  # east fits it best, but it would still hold east's 4
    eight = job("eight", 8, 8, 2.0, base)  # at 1,000 s: west takes it, and this one no longer fits
    short = job("short", 4, 4, 0.1, base)  # done in 360 s: east, before the reservation is due
    placed = BackfillSingleDomain().decide([head, long, eight, short], view, 0.0)
    where = {p.job: view.names[p.domains[0]] for p in placed}
    assert where == {"long": "west", "short": "east"}
    assert all(p.total_gpus == 4 for p in placed)


def test_gang_admits_at_the_largest_size_a_domain_holds_and_skips_what_cannot_start():
    base = two_domains()
    view = base.with_free({"east": 6, "west": 12})
    first = job("first", 8, 32, 1.0, base)
    blocked = job("blocked", 16, 16, 1.0, base)  # needs 16 in one domain: none has it
    after = job("after", 4, 8, 1.0, base)
    placed = GangSingleDomain().decide([first, blocked, after], view, 0.0)
    assert [p.job for p in placed] == ["first", "after"]  # best effort: the blocked one waits
    first_p = placed[0]
    assert first_p.names == ("west",) and 8 <= first_p.total_gpus <= 12


def test_the_fair_greedy_stays_in_one_domain_when_it_can_and_spreads_hierarchically_else():
    base = two_domains()
    inside = GreedyCrossDomain().decide(
        [job("a", 8, 16, 1.0, base)], base.with_free({"east": 10, "west": 12}), 0.0
    )
    assert inside[0].kind == "single" and inside[0].names == ("west",)
    spread = GreedyCrossDomain().decide(
        [job("b", 16, 16, 1.0, base)], base.with_free({"east": 8, "west": 8}), 0.0
    )
    (p,) = spread
    assert p.kind == "data" and set(p.names) == {"east", "west"} and p.total_gpus == 16


@pytest.mark.parametrize("policy", [BackfillSingleDomain(), GangSingleDomain()])
def test_single_domain_baselines_never_spread_and_never_replan(policy):
    base = two_domains()
    spec = job("j", 16, 16, 1.0, base)
    assert policy.decide([spec], base.with_free({"east": 8, "west": 8}), 0.0) == []
    assert policy.single_domain and policy.replan(spec, None, base) is None


def test_fifo_never_runs_a_job_below_its_minimum_nor_waits_for_one_no_domain_holds():
    """A job asking for more than any domain has is refused, not run on a domain's worth (it
    was: its minimum of 32 run on 16, and reported done) and not waited for by the queue."""
    from xdscheduler.planner.baselines import FifoSingleDomain

    base = two_domains()
    giant = job("giant", 32, 32, 1.0, base.with_free({"east": 32, "west": 0}))
    small = job("small", 8, 8, 1.0, base)
    placed = FifoSingleDomain().decide([giant, small], base, 0.0)
    assert [(p.job, p.total_gpus) for p in placed] == [("small", 8)]


def old_and_new() -> ClusterView:
    """old: 32 V100 (no BF16 plan), new: 16 H100; the old one has the most room."""
    doms = [("old", "V100-SXM2-32GB", 4), ("new", "H100-SXM", 2)]
    return ClusterView.from_scenario(
        parse_scenario(
            {
                "name": "old-and-new",
                "domains": [
                    {"name": n, "location": {"city": n}, "nodes": [{"accelerator": a, "count": c}]}
                    for n, a, c in doms
                ],
                "links": [{"a": "old", "b": "new", "bandwidth_gbps": 10, "rtt_ms": 20}],
            }
        )
    )


@pytest.mark.parametrize("policy", [GangSingleDomain(), GreedyCrossDomain()])
def test_a_domain_that_cannot_run_a_job_leaves_it_to_the_next(policy):
    """The domain with the most room has no plan for the job (V100: no BF16): the next one
    runs it (before, nothing ran: every job went to the V100s and got no plan)."""
    view = old_and_new()
    arch = catalog.model("llama3-8b")
    spec = JobSpec("j", arch, 256, arch.seq_len, 8, 32, tokens=1e9)
    (p,) = policy.decide([spec], view, 0.0)
    assert p.names == ("new",) and p.total_gpus == 16
