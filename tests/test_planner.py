import itertools
from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import SCENARIOS, giant_among_smaller_jobs
from xdscheduler import catalog
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack, WanUse
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import (
    JobSpec,
    described,
    estimate_placement,
    ideal_tokens_per_s,
    search,
)
from xdscheduler.planner.space import (
    DATA,
    MEMORY_LADDER,
    SINGLE,
    SearchOptions,
    describe_placements,
    split,
)
from xdscheduler.planner.view import ClusterView, DomainView
from xdscheduler.scenario import Weights, load_scenario, parse_scenario
from xdscheduler.sim.reconfig import crosses_wan, switch_cost

RECOMPUTE = ("none", "selective", "full")


def two_domains(bandwidth_gbps=10.0, rtt_ms=30.0, gpus=256) -> ClusterView:
    h100 = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(n, h100, gpus, h100.scaleup_gbs, 400, 2.0) for n in ("east", "west"))
    bw = np.array([[0, bandwidth_gbps], [bandwidth_gbps, 0]], dtype=float)
    rtt = np.array([[0, rtt_ms], [rtt_ms, 0]], dtype=float)
    return ClusterView(doms, bw, rtt, np.full((2, 2), 0.02))


def test_70b_across_two_domains_crosses_the_wan_only_at_pipeline_boundaries():
    job = JobSpec("llama2-70b", catalog.model("llama2-70b"), 1024, 4096, 384, 512)
    result = search(job, two_domains(), Weights())
    best = result.best
    assert best.kind == "pipeline"
    assert set(best.gpus_per_domain) == {"east", "west"}
    assert best.plan.tp <= 8  # tensor parallelism stays inside a node
    stages = best.stage_to_domain
    assert sum(a != b for a, b in itertools.pairwise(stages)) == 1  # one WAN boundary
    text = result.explanation["summary"]
    assert "reduced inside each domain" in text and "only at pipeline boundaries" in text
    assert "TP" in text and "inside one node" in text
    # Activations of 1024 sequences × 4096 tokens × 8192 × 2 bytes, there and back.
    assert best.estimate.cross_domain_gb_per_step == pytest.approx(2 * 1024 * 4096 * 8192 * 2 / 1e9)


def test_no_alternatives_asked_still_explains_against_the_runner_up():
    job = JobSpec("llama2-70b", catalog.model("llama2-70b"), 1024, 4096, 384, 512)
    listed, bare = (search(job, two_domains(), Weights(), top_k=k) for k in (5, 0))
    assert bare.alternatives == [] and bare.best.shape == listed.best.shape
    assert bare.explanation == listed.explanation
    assert "It beats the runner-up" in bare.explanation["summary"]


def test_diloco_option_is_taken_when_offered_and_explained():
    job = JobSpec("llama2-70b", catalog.model("llama2-70b"), 1024, 4096, 384, 512)
    opts = SearchOptions(diloco_h=(0, 100))
    result = search(job, two_domains(bandwidth_gbps=2.0), Weights(), opts)
    best = result.best
    assert best.kind in ("pipeline", "data")
    if best.kind == "data":
        assert best.plan.diloco_h == 100 and "DiLoCo" in result.explanation["summary"]


def test_a_job_that_fits_one_domain_stays_there_when_the_wan_is_slow():
    job = JobSpec("llama2-7b", catalog.model("llama2-7b"), 256, 4096, 8, 256)
    best = search(job, two_domains(bandwidth_gbps=1.0), Weights()).best
    assert best.kind == "single" and best.estimate.cross_domain_gb_per_step == 0


def test_infeasible_job_gets_a_clear_error():
    job = JobSpec("llama3.1-405b", catalog.model("llama3.1-405b"), 1024, 8192, 8, 8)
    with pytest.raises(UserError, match=r"no feasible plan for job 'llama3\.1-405b'"):
        search(job, two_domains(), Weights())


def test_default_scenario_decisions_have_alternatives_and_a_pareto_front(default_scenario_path):
    scn = load_scenario(default_scenario_path)
    view = ClusterView.from_scenario(scn)
    d = search(JobSpec.of(scn.jobs[0]), view, scn.weights, top_k=3)
    assert len(d.alternatives) == 3 and d.pareto
    assert all(a.objective.objective <= d.best.objective.objective for a in d.alternatives)
    assert d.explanation["terms"]["efficiency"]["chosen"] >= 0


# ------------------------------------------------------------------ brute force


def brute_force(job: JobSpec, view: ClusterView, weights: Weights, opts: SearchOptions) -> float:
    """The best objective over the plan space, enumerated with plain loops."""
    free = [d.free_gpus for d in view.domains]
    bw = view.bandwidth_gbps
    k = len(view.domains)
    big = sorted([i for i in range(k) if free[i] > 0], key=lambda i: -free[i])
    big = big[: opts.combo_domains]
    places = [("single", (i,)) for i in range(k) if free[i] > 0]
    for size in range(2, (opts.max_domains or k) + 1):
        for members in itertools.combinations(sorted(big), size):
            linked = all(
                bw[a, b] > 0 and bw[b, a] > 0 for a, b in itertools.combinations(members, 2)
            )
            if sum(free[i] for i in members) < job.gpus_min or not linked:
                continue
            places.append(("data", members))
            places += [("pipeline", c) for c in itertools.permutations(members) if c[0] < c[-1]]
    rows = []
    for kind, members in places:
        doms = [view.domains[i] for i in members]
        accs = [d.accelerator for d in doms]
        hw = Hardware(
            peak_tflops=min(a.half_tflops for a in accs),
            peak_fp8_tflops=min(a.fp8_tflops or 0.0 for a in accs),
            peak_tf32_tflops=min(a.tf32_tflops or 0.0 for a in accs),
            peak_fp32_tflops=min(a.fp32_tflops or 0.0 for a in accs),
            memory_gib=min(a.memory_gib for a in accs),
            memory_gbs=min(a.memory_gbs for a in accs),
            scaleup_gbs=min(d.scaleup_gbs for d in doms),
            scaleout_gbps=min(d.scaleout_gbps for d in doms),
            gpus_per_node=min(d.node_gpus for d in doms),
        )
        pairs = list(itertools.combinations(members, 2))
        hops = list(itertools.pairwise(members))
        if kind == "pipeline":
            wan = WanUse(
                pp_crossings=len(hops),
                pp_gbps=min(min(bw[a, b], bw[b, a]) for a, b in hops),
                pp_latency_s=sum(view.rtt_ms[a, b] / 2000 for a, b in hops),
            )
            price = sum(view.price_per_gb[a, b] for a, b in hops) / len(hops)
        elif kind == "data":
            wan = WanUse(
                dp_domains=len(members),
                dp_gbps=min(min(bw[a, b], bw[b, a]) for a, b in pairs),
                dp_rtt_s=max(view.rtt_ms[a, b] / 1000 for a, b in pairs),
            )
            price = sum(view.price_per_gb[a, b] for a, b in pairs) / len(pairs)
        else:
            wan, price = WanUse(), 0.0
        arch = job.arch
        tps = [t for t in opts.tensor if arch.heads % t == 0 and arch.kv_heads % t == 0]
        pps = [p for p in range(1, min(arch.layers, opts.max_pipeline) + 1) if arch.layers % p == 0]
        dps = [
            d
            for d in range(1, min(job.global_batch, job.gpus_max) + 1)
            if job.global_batch % d == 0
        ]
        candidates = []  # (gpus, the memory ladder's plans) of every shape this place takes
        for tp, pp, vp, mb, dp, h in itertools.product(
            tps, pps, opts.virtual, opts.micro_batch, dps, opts.diloco_h
        ):
            n = dp * tp * pp
            micro = job.global_batch // (dp * mb) if job.global_batch % (dp * mb) == 0 else 0
            if not micro or not job.gpus_min <= n <= job.gpus_max or tp > hw.gpus_per_node:
                continue
            if vp > 1 and (pp == 1 or (arch.layers // pp) % vp or micro % pp):
                continue
            if h and kind != "data":
                continue
            if kind == "single":
                gpus = [n] if n <= free[members[0]] else None
            else:
                unit = dp * tp if kind == "pipeline" else tp * pp
                total = pp if kind == "pipeline" else dp
                parts = split(total, [free[i] // unit for i in members])
                gpus = None if parts is None else [p * unit for p in parts]
            if gpus is None:
                continue
            ladder = [
                Plan(
                    dp=dp,
                    tp=tp,
                    pp=pp,
                    vp=vp,
                    micro_batch=mb,
                    zero=zero,
                    recompute=RECOMPUTE[rec],
                    diloco_h=h,
                )
                for zero, rec in MEMORY_LADDER
            ]
            candidates.append((gpus, ladder))
        if not candidates:
            continue
        # every rung of every ladder in one call (each plan's estimate is its own row); the
        # first rung that fits is the plan, as a loop over the ladder would take it
        plans = [plan for _, ladder in candidates for plan in ladder]
        est = estimate(arch, job.global_batch, PlanBatch.of(plans), hw, wan, seq=job.seq)
        row = 0
        for gpus, ladder in candidates:
            fit = next((row + i for i in range(len(ladder)) if est.fits[row + i]), None)
            row += len(ladder)
            if fit is None:
                continue
            step = float(est.step_time_s[fit])
            peak = sum(
                g * view.domains[i].accelerator.half_tflops * 1e12
                for g, i in zip(gpus, members, strict=True)
            )
            gpu_cost = sum(
                g * view.domains[i].price_per_gpu_hour for g, i in zip(gpus, members, strict=True)
            )
            wan_cost = float(est.cross_domain_bytes[fit]) / 1e9 * price * 3600 / step
            rows.append(
                (
                    job.global_batch * job.seq / step,
                    est.model_flops / step / peak,
                    wan_cost / gpu_cost,
                )
            )
    best_tps = max(r[0] for r in rows)
    return max(
        weights.efficiency * t / best_tps + weights.utilization * u - weights.cost * c
        for t, u, c in rows
    )


def random_instance(rng: np.random.Generator):
    names = ["H100-SXM", "A100-80GB", "A100-40GB", "L40S", "H20"]
    k = int(rng.integers(1, 4))
    doms = []
    for i in range(k):
        acc = catalog.accelerator(str(rng.choice(names)))
        acc = replace(acc, memory_gib=float(rng.choice([6, 8, 12, acc.memory_gib])))
        doms.append(
            DomainView(
                f"d{i}",
                acc,
                int(rng.choice([8, 16, 24, 32])),
                acc.scaleup_gbs,
                float(rng.choice([100, 200, 400])),
                float(rng.uniform(1, 3)),
            )
        )
    bw = rng.uniform(1, 10, size=(k, k)) * (rng.random((k, k)) > 0.15)
    rtt = rng.uniform(2, 40, size=(k, k))
    rtt = (rtt + rtt.T) / 2
    price = rng.uniform(0.01, 0.05, size=(k, k))
    view = ClusterView(tuple(doms), bw, rtt, (price + price.T) / 2)
    heads = int(rng.choice([8, 16]))
    arch = catalog.ModelArch(
        "toy",
        int(rng.choice([4, 6, 8, 12])),
        heads * int(rng.choice([64, 128, 256])),
        int(rng.choice([2048, 4096, 8192])),
        heads,
        int(rng.choice([heads, heads // 4])),
        32000,
        int(rng.choice([1024, 2048])),
        bool(rng.random() < 0.5),
        False,
    )
    job = JobSpec(
        "toy",
        arch,
        int(rng.choice([8, 16, 32])),
        arch.seq_len,
        int(rng.choice([1, 4, 8])),
        int(rng.choice([16, 32])),
    )
    weights = Weights(
        efficiency=1.0, utilization=float(rng.uniform(0, 1)), cost=float(rng.uniform(0, 1))
    )
    return job, view, weights


@pytest.mark.slow
def test_search_equals_brute_force_on_random_small_instances():
    rng = np.random.default_rng(2024)
    opts = SearchOptions(
        tensor=(1, 2, 4, 8),
        max_pipeline=8,
        virtual=(1, 2),
        micro_batch=(1, 2),
        diloco_h=(0, 10),
        uneven=False,
    )
    checked = 0
    while checked < 100:
        job, view, weights = random_instance(rng)
        try:
            found = search(job, view, weights, opts).best.objective.objective
        except UserError:
            with pytest.raises(ValueError):  # brute force finds nothing either
                brute_force(job, view, weights, opts)
            continue
        assert found == pytest.approx(brute_force(job, view, weights, opts), rel=1e-9)
        checked += 1


def pair(west: str = "H100-SXM", gbps: float = 10.0) -> ClusterView:
    """east (16 H100) and west (16 of `west`), one link."""
    return ClusterView.from_scenario(
        parse_scenario(
            {
                "name": "pair",
                "domains": [
                    {"name": n, "location": {"city": n}, "nodes": [{"accelerator": a, "count": 2}]}
                    for n, a in (("east", "H100-SXM"), ("west", west))
                ],
                "links": [{"a": "east", "b": "west", "bandwidth_gbps": gbps, "rtt_ms": 20}],
            }
        )
    )


def eight_b(gpus_min: int = 8, gpus_max: int = 32) -> JobSpec:
    arch = catalog.model("llama3-8b")
    return JobSpec("j", arch, 512, arch.seq_len, gpus_min, gpus_max, tokens=1e10)


def test_the_planner_crosses_domains_only_when_it_pays():
    from xdscheduler.planner.policies import PlannerPolicy, planner_pick
    from xdscheduler.planner.search import evaluate_space

    def placed(job, view, **kw):
        (p,) = PlannerPolicy(Weights(), **kw).decide([job], view, 0.0)
        return p

    # A job one domain can hold stays there: spreading the same 16 accelerators over the WAN
    # is no faster, and spreading to 32 would take what the jobs behind it need.
    same = pair()
    inside = placed(eight_b(), same)
    assert inside.kind == "single" and inside.total_gpus == 16 and not inside.preemptible
    # Nothing fits in one domain now: it waits for one rather than spread.
    tight = same.with_free({"east": 6, "west": 6})
    job = eight_b()
    ev = evaluate_space(job, tight, Weights(), ONLINE)
    assert planner_pick(ev, job, tight, Weights(), ONLINE) is None
    # A giant (its minimum is more than any domain holds) crosses, preemptibly, also onto the
    # slower H20s: there is no better place for it.
    giant = eight_b(gpus_min=24)
    for view in (same, pair("H20")):
        spread = placed(giant, view)
        assert spread.kind != "single" and spread.total_gpus >= 24 and spread.preemptible
    # Confined to one domain, the giant is never placed.
    one = PlannerPolicy(Weights(), "p1", replace(ONLINE, max_domains=1))
    assert one.decide([giant], same, 0.0) == []


def test_a_giant_takes_the_best_spread_that_keeps_its_efficiency_rather_than_wait():
    from xdscheduler.planner.policies import (
        KEEP_MFU,
        best_single_mfu,
        planner_pick,
        search_options,
    )
    from xdscheduler.planner.search import evaluate_space

    # Other tenants hold 4 of each domain's 16: the job's 14 fit neither now, one when empty.
    giant, view = (
        eight_b(gpus_min=14),
        pair().with_free({"east": 12, "west": 12}, {"east": 4, "west": 4}),
    )
    options = search_options(giant, view, ONLINE)
    ev = evaluate_space(giant, view, Weights(), options)
    first = planner_pick(ev, giant, view, Weights(), options)
    assert first is not None
    # The best spread by the objective now falls short of KEEP_MFU: the next best that keeps
    # it is placed (waiting for the first would wait as long as the first stays short).
    floor = KEEP_MFU * best_single_mfu(giant, view, Weights(), options)
    assert floor > 0
    mfu = ev.terms["utilization"].copy()
    mfu[first] = 0.9 * floor
    short = replace(ev, terms=ev.terms | {"utilization": mfu})
    second = planner_pick(short, giant, view, Weights(), options)
    kept = mfu >= floor
    assert second is not None and second != first and kept[second]
    objective = np.where(kept, ev.terms["objective"], -np.inf)
    assert ev.terms["objective"][second] == objective.max()
    # No spread keeps it: the giant waits, and the floor falls as it waits (by its response
    # ratio), so no giant waits for ever behind slow links.
    none = replace(ev, terms=ev.terms | {"utilization": np.full_like(mfu, 0.9 * floor)})
    assert planner_pick(none, giant, view, Weights(), options) is None
    ideal_s = giant.tokens / ideal_tokens_per_s(giant, view)  # response ratio 1 + waited/ideal
    assert planner_pick(none, giant, view, Weights(), options, now_s=0.05 * ideal_s) is None
    later = planner_pick(none, giant, view, Weights(), options, now_s=0.2 * ideal_s)
    assert later == int(np.argmax(ev.terms["objective"]))  # no single-domain candidate here


def test_a_giant_refused_on_slow_links_starts_once_it_has_waited_on_a_quiet_cluster():
    from xdscheduler.planner.policies import PlannerPolicy

    # 10 Mbit/s between the domains: no spread keeps KEEP_MFU of the job's efficiency.
    view = pair(gbps=0.01).with_free({"east": 12, "west": 12}, {"east": 4, "west": 4})
    giant = eight_b(gpus_min=14)
    planner = PlannerPolicy(Weights())
    assert planner.decide([giant], view, 0.0) == []
    # Nothing frees up (no other job), yet its floor halves as its response ratio doubles,
    # and the same policy tries it again.
    ideal_s = giant.tokens / ideal_tokens_per_s(giant, view)
    assert planner.decide([giant], view, 0.5 * ideal_s) == []
    (placed,) = planner.decide([giant], view, 4 * ideal_s)
    assert placed.kind != "single" and placed.total_gpus >= giant.gpus_min and placed.preemptible


def test_a_giants_spread_splits_its_micro_batches_by_its_domains_speeds():
    from xdscheduler.planner.policies import PlannerPolicy, search_options

    giant = eight_b(gpus_min=24)
    (mixed,) = PlannerPolicy(Weights()).decide([giant], pair("H20"), 0.0)
    east, west = (mixed.split[mixed.names.index(n)] for n in ("east", "west"))
    assert mixed.kind == DATA and east > 2 * west > 0  # an H100 replica does more than an H20
    (same,) = PlannerPolicy(Weights()).decide([giant], pair(), 0.0)
    assert same.split == ()  # equal speeds: even shares
    # only giants spread, so only their search balances
    assert search_options(giant, pair(), ONLINE).balance
    small = search_options(eight_b(), pair(), ONLINE)
    assert small.max_domains == 1 and not small.balance


def test_short_jobs_go_first_and_waiting_raises_a_long_one():
    from xdscheduler.planner.policies import by_response_ratio, response_ratio

    view = pair()
    short = replace(eight_b(), name="short", tokens=1e9, arrival_s=100.0)
    long = replace(eight_b(), name="long", tokens=1e11, arrival_s=0.0)
    urgent = replace(eight_b(), name="urgent", tokens=1e11, arrival_s=200.0, priority=2)
    assert [j.name for j in by_response_ratio([long, short, urgent], view, 200.0)] == [
        "urgent",
        "short",
        "long",
    ]
    # Once long has waited twice its ideal run, a short job just arrived no longer overtakes it.
    later = 2 * long.tokens / ideal_tokens_per_s(long, view)
    assert response_ratio(long, view, 0.0) == 1.0
    assert response_ratio(long, view, later) == pytest.approx(3.0)
    fresh = replace(short, arrival_s=later)
    assert [j.name for j in by_response_ratio([fresh, long], view, later)] == ["long", "short"]


def test_a_spread_job_gives_a_domain_back_when_a_queued_job_needs_it():
    from xdscheduler.planner.policies import PlannerPolicy

    view = pair()
    planner = PlannerPolicy(Weights())
    spread = search(eight_b(), view, Weights(), replace(ONLINE, kinds=("data",))).best
    assert spread.gpus == (16, 16)  # replicas over east and west
    now = view.with_free({"east": 0, "west": 0})
    needs_east = replace(eight_b(gpus_min=12, gpus_max=16), name="q")
    smaller = planner.yielded(eight_b(), spread, now, [needs_east], 0.0)
    assert smaller is not None and len(smaller.domains) == 1
    # Whichever domain it gave back holds the queued job's minimum now.
    given = next(d for d in spread.domains if d not in smaller.domains)
    assert spread.taken[given] >= needs_east.gpus_min
    assert planner.yielded(eight_b(), spread, now, [], 0.0) is None  # nobody waits
    fits = replace(eight_b(gpus_min=4, gpus_max=4), name="small")
    assert (
        planner.yielded(eight_b(), spread, view.with_free({"east": 4, "west": 0}), [fits], 0.0)
        is None
    )  # it starts without any help


def test_a_giant_stays_preemptible_when_re_planned():
    from xdscheduler.planner.policies import PlannerPolicy

    planner, view = PlannerPolicy(Weights()), pair()
    (spread,) = planner.decide([eight_b(gpus_min=24)], view, 0.0)
    now = view.adjust_free({i: -n for i, n in spread.taken.items()})
    again = planner.replan(eight_b(gpus_min=24), spread, now)
    assert spread.preemptible and again is not None and again.preemptible


def test_a_placement_that_preempts_sees_only_what_preempting_gives_back():
    """Other tenants grew 4 into what this scheduler holds in east: preempting the 16 a
    preemptible giant holds there frees 12, not 16 (seeing 16 placed a job on accelerators
    nobody could give it)."""
    view = pair().with_free({"east": -4, "west": 3}).with_reclaimable({0: 16, 1: 8})
    free = {d.name: d.free_gpus for d in view.reclaiming().domains}
    assert free == {"east": 12, "west": 11}
    assert (
        pair().with_free({"east": -20}).with_reclaimable({0: 16}).reclaiming().domains[0].available
        == 0
    )


def test_jobs_one_domain_holds_go_before_giants_and_a_giant_takes_its_minimum_while_others_wait():
    from xdscheduler.planner.policies import PlannerPolicy

    view = pair()
    # batch 480: data parallelism of 24 and of 30 both divide it
    giant = replace(eight_b(gpus_min=24), name="giant", arrival_s=0.0, global_batch=480)
    small = replace(eight_b(gpus_min=4, gpus_max=4), name="small", arrival_s=100.0)
    placed = PlannerPolicy(Weights()).decide([giant, small], view, 100.0)
    assert [p.job for p in placed] == ["small", "giant"]  # the giant waited longer, yet goes last
    assert not placed[0].preemptible and placed[1].preemptible
    # Alone, the giant takes all it can use; with another giant waiting behind, its minimum.
    (alone,) = PlannerPolicy(Weights()).decide([giant], view, 100.0)
    other = replace(giant, name="other", arrival_s=50.0)
    first, *_ = PlannerPolicy(Weights()).decide([other, giant], view, 100.0)
    assert alone.total_gpus == 32 and first.job == "giant" and first.total_gpus == 24


def test_a_jobs_cost_weight_grows_with_its_work_over_the_typical_jobs_worked_by_hand():
    from xdscheduler.planner.objective import TypicalWork, study_weights

    small = eight_b(gpus_min=4, gpus_max=4)  # 8B, 1e10 tokens
    work = small.tokens * small.flops_per_token
    seen, weights = TypicalWork(), Weights(efficiency=1.0, utilization=0.3, cost=0.3)
    assert study_weights(weights, small, seen) is weights  # nothing seen yet
    seen.record([replace(small, name="a"), replace(small, name="b", tokens=3 * small.tokens)])
    seen.record([replace(small, name="a", tokens=9e12)])  # a job's work is taken once
    assert seen.mean == pytest.approx(2 * work)
    big = replace(small, name="big", tokens=8 * small.tokens)  # 4 typical jobs' work
    assert study_weights(weights, big, seen).cost == pytest.approx(0.3 * 4)
    assert study_weights(weights, big, seen).efficiency == 1.0
    assert study_weights(weights, small, seen) is weights  # less work: never below its own
    assert study_weights(weights, replace(big, tokens=0.0), seen) is weights  # work unknown


def test_the_typical_work_keeps_a_bounded_memory_and_counts_a_queued_job_once(monkeypatch):
    from xdscheduler.planner import objective

    monkeypatch.setattr(objective, "SEEN_NAMES", 3)
    small = eight_b()
    seen = objective.TypicalWork()
    waiting = replace(small, name="waiting")
    for k in range(10):  # a job waits through ten decisions while others come and go
        seen.record([waiting, replace(small, name=f"passing-{k}")])
    assert len(seen.seen) == 3 and seen.count == 11
    assert seen.mean == pytest.approx(small.work_flops)


def test_a_giant_with_more_work_than_the_typical_job_pays_for_its_traffic_as_the_study_does():
    from xdscheduler.planner.policies import PlannerPolicy

    view, giant, small = giant_among_smaller_jobs()
    alone, among = PlannerPolicy(Weights()), PlannerPolicy(Weights())
    (p,) = alone.decide([giant], view, 0.0)
    among.seen.record([small])
    (q,) = among.decide([giant], view, 0.0)
    assert p.kind == "pipeline" and p.estimate.cross_domain_gb_per_step > 100
    assert q.kind == "data" and q.plan.diloco_h > 0
    assert q.objective.wan_cost_per_hour < p.objective.wan_cost_per_hour / 20


# ------------------------------------------------------------------ any number of domains


def ring_of(k: int, gpus: int = 128, gbps: float = 5.0) -> ClusterView:
    acc = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(f"d{i}", acc, gpus, acc.scaleup_gbs, 400, 2.0) for i in range(k))
    bw = np.full((k, k), gbps)
    np.fill_diagonal(bw, 0)
    return ClusterView(doms, bw, np.full((k, k), 20.0), np.full((k, k), 0.02))


def test_a_job_larger_than_three_domains_spans_as_many_as_it_needs():
    view = ring_of(8)
    arch = catalog.model("gpt3-175b")
    job = JobSpec("big", arch, 1536, arch.seq_len, 512, 1024)
    best = search(job, view, Weights(), pareto=False).best
    assert 4 <= len(best.domains) <= 8 and sum(best.gpus) >= 512
    with pytest.raises(UserError, match="no feasible plan"):
        search(job, view, Weights(), SearchOptions(max_domains=3), pareto=False)


def square_with_slow_diagonals(k: int = 4) -> ClusterView:
    """k domains round a ring of 10 Gbit/s links, every other pair joined at 1 Gbit/s."""
    view = ring_of(k, gbps=1.0)
    bw = view.bandwidth_gbps.copy()
    for i in range(k):
        bw[i, (i + 1) % k] = bw[(i + 1) % k, i] = 10.0
    return replace(view, bandwidth_gbps=bw)


@pytest.mark.parametrize("k", [4, 8])  # every ring order tried; the widest way on, greedily
def test_replicas_over_several_domains_ring_round_their_widest_links(k):
    """A ring all-reduce sends to the next member only: over domains round a ring of fast
    links with slow ones across, the fast ring paces it and carries its traffic (before, the
    narrowest of every pair did, ten times slower)."""
    from xdscheduler.planner.space import DATA, describe_placements, in_rings

    view = square_with_slow_diagonals(k)
    scrambled = np.array([[0, *range(2, k, 2), *range(1, k, 2)]])  # 0, 2, 4, ..., 1, 3, ...
    rings = in_rings(view.goodput_gbps, view.rtt_ms / 1000, scrambled, np.array([k]), [True])
    pl = describe_placements(view, np.array([DATA], dtype=object), rings)
    ring = pl.domains[0].tolist()
    assert sorted(ring) == list(range(k))
    assert all(abs(a - b) in (1, k - 1) for a, b in itertools.pairwise([*ring, ring[0]]))
    assert pl.wan.dp_gbps[0] == pytest.approx(view.goodput_gbps[0, 1])
    arch = catalog.model("gpt3-175b")
    job = JobSpec("big", arch, 1536, arch.seq_len, 128 * k, 128 * k)
    best = search(job, view, Weights(), SearchOptions(kinds=(DATA,)), pareto=False).best
    assert len(best.links) == k and all(view.bandwidth_gbps[ab] == 10.0 for ab in best.links)


def test_a_placements_estimate_keeps_the_order_its_replicas_ring_in():
    """A running job's ranks keep their order: estimating a placement across the slow
    diagonals times that ring, not the search's best (before, both were the same)."""
    from xdscheduler.planner.search import estimate_placement
    from xdscheduler.planner.space import DATA

    view = square_with_slow_diagonals(4)
    arch = catalog.model("gpt3-175b")
    job = JobSpec("big", arch, 1536, arch.seq_len, 512, 512)
    best = search(job, view, Weights(), SearchOptions(kinds=(DATA,)), pareto=False).best
    order = (0, 2, 1, 3)
    across = replace(
        best,
        domains=tuple(best.domains[i] for i in order),
        gpus=tuple(best.gpus[i] for i in order),
    )
    assert estimate_placement(best, job, view).step_time_s == pytest.approx(
        best.estimate.step_time_s
    )
    assert estimate_placement(across, job, view).step_time_s > 1.5 * best.estimate.step_time_s


def test_domain_sets_grow_only_while_the_job_can_use_them():
    """Past the few largest domains, sets are grown along the widest links and stop once they
    hold the most the job can use: K² sets, not 2^K."""
    from xdscheduler.planner.space import placements

    view = ring_of(64)
    pl = placements(view, SearchOptions(), gpus_min=256, gpus_max=512)
    members = (pl.domains >= 0).sum(axis=1)
    assert members.max() == 4  # 4 × 128 hold 512: a fifth domain is never needed
    assert len(pl) < 64 * 64


def test_the_scenarios_node_shape_bounds_tensor_parallelism():
    """Sailor's zones are 4-GPU VMs: tensor parallelism of 8 would span two nodes."""
    scn = load_scenario(SCENARIOS / "sailor_five_zones.yaml")
    view = ClusterView.from_scenario(scn)
    assert {d.node_gpus for d in view.domains} == {4}
    job = JobSpec.of(scn.job("opt-350m-sailor"))
    assert search(job, view, scn.weights, SearchOptions(tensor=(4,)), pareto=False)
    with pytest.raises(UserError, match="no feasible plan"):
        search(job, view, scn.weights, SearchOptions(tensor=(8,)), pareto=False)


# ------------------------------------------------------------------ budget and throughput floor


def sailor():
    scn = load_scenario(SCENARIOS / "sailor_five_zones.yaml")
    return JobSpec.of(scn.job("opt-350m-sailor")), ClusterView.from_scenario(scn), scn.weights


def test_a_budget_keeps_every_plan_within_it():
    from xdscheduler.planner.limits import Limits, placement_cost_per_hour

    job, view, weights = sailor()
    free = search(job, view, weights, pareto=False)
    budget = placement_cost_per_hour(free.best, view) / 2
    capped = search(job, view, weights, limits=Limits(budget_per_hour=budget), pareto=False)
    for p in (capped.best, *capped.alternatives):
        assert placement_cost_per_hour(p, view) <= budget
    assert capped.best.estimate.tokens_per_s < free.best.estimate.tokens_per_s
    with pytest.raises(UserError, match=r"budget of \$1\.00/h \(the cheapest plan costs"):
        search(job, view, weights, limits=Limits(budget_per_hour=1.0))


def test_a_throughput_floor_alone_picks_the_cheapest_plan_per_token_that_reaches_it():
    from xdscheduler.planner.limits import Limits, placement_cost_per_hour

    job, view, weights = sailor()
    floor = 1.5e6
    r = search(job, view, weights, top_k=8, limits=Limits(min_tokens_per_s=floor), pareto=False)

    def per_token(p):
        return placement_cost_per_hour(p, view) / p.estimate.tokens_per_s

    assert all(p.estimate.tokens_per_s >= floor for p in (r.best, *r.alternatives))
    assert all(per_token(r.best) <= per_token(p) for p in r.alternatives)
    with pytest.raises(UserError, match="the fastest plan reaches"):
        search(job, view, weights, limits=Limits(min_tokens_per_s=1e12))


def test_uneven_data_parallelism_uses_accelerators_a_divisor_would_leave_idle():
    """160 accelerators, a global batch of 1024: the even grid stops at DP 128; an uneven one
    runs more replicas (some a sample lighter) and finishes a step sooner."""
    acc = catalog.accelerator("A100-40GB")
    view = ClusterView(
        (DomainView("z", acc, 160, acc.scaleup_gbs, 100, 3.7),),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
    )
    arch = catalog.model("opt-350m")
    job = JobSpec("opt", arch, 1024, arch.seq_len, 8, 160)
    even = search(job, view, THROUGHPUT, SearchOptions(uneven=False), pareto=False).best
    uneven = search(job, view, THROUGHPUT, pareto=False).best
    assert even.total_gpus <= 128 < uneven.total_gpus
    assert 1024 % uneven.plan.dp and uneven.estimate.step_time_s < even.estimate.step_time_s


THROUGHPUT = Weights(efficiency=1.0, utilization=0.0, cost=0.0)


# ------------------------------------------------------------------ mixed accelerators


def test_a_balanced_split_by_hand():
    """80 layers over two stages of speed 2 and two of speed 1: 27 + 27 + 13 + 13, the pace
    max(27/2, 13/1) = 13.5; 10 layers over speeds 3 and 1: 8 + 2 (7 + 3 would pace 3)."""
    from xdscheduler.planner.balance import balanced_pace

    units, pace = balanced_pace(
        np.array([80.0, 10.0]), np.array([[2, 2], [1, 1]]), np.array([[2.0, 1.0], [3.0, 1.0]])
    )
    assert units.tolist() == [[27, 13], [8, 2]] and pace.tolist() == [13.5, 8 / 3]


def test_a_balanced_split_leaves_no_worker_without_work():
    """32 layers over stages of speeds 0.3 to 2.2 (a pipeline across six accelerator types):
    the slowest stages still take a layer each (before, floor(pace x speed) gave them none,
    and their accelerators counted towards the job while holding no layer)."""
    from xdscheduler.planner.balance import balanced_pace

    counts = np.array([[5, 2, 2, 8, 8, 7]])
    units, _ = balanced_pace(np.array([32.0]), counts, np.array([[0.3, 1.2, 2.2, 0.9, 1.1, 0.4]]))
    assert (units >= 1).all() and (units * counts).sum() >= 32


def h100_and_910b() -> ClusterView:
    h, a = catalog.accelerator("H100-SXM"), catalog.accelerator("Ascend-910B")
    doms = (
        DomainView("h100", h, 64, h.scaleup_gbs, 400, 2.5),
        DomainView("910b", a, 64, a.scaleup_gbs, 200, 1.5),
    )
    bw = np.array([[0, 100.0], [100.0, 0]])
    return ClusterView(doms, bw, np.full((2, 2), 2.0), np.full((2, 2), 0.01))


@pytest.mark.parametrize("kind", ["pipeline", "data"])
def test_a_mixed_job_splits_work_by_speed_and_beats_the_even_split(kind):
    """H100 and Ascend 910B: the faster domain takes more layers a stage (pipeline) or
    micro-batches a replica (replicas), and the job runs faster than with even shares on the
    same accelerators."""
    view = h100_and_910b()
    arch = catalog.model("llama2-70b")
    job = JobSpec("mixed", arch, 512, arch.seq_len, 128, 128)
    opts = SearchOptions(kinds=(kind,))
    even = search(job, view, THROUGHPUT, replace(opts, balance=False), pareto=False).best
    mixed = search(job, view, THROUGHPUT, opts, pareto=False).best
    assert mixed.split and mixed.split[0] > mixed.split[1]  # the H100 domain comes first
    p = mixed.plan
    if kind == "pipeline":
        stages = [g // (p.dp * p.tp * p.cp) for g in mixed.gpus]
        assert sum(s * x for s, x in zip(stages, mixed.split, strict=True)) >= arch.layers
    else:
        replicas = [g // (p.tp * p.pp * p.cp) for g in mixed.gpus]
        assert (
            sum(r * x for r, x in zip(replicas, mixed.split, strict=True)) * p.micro_batch
            >= job.global_batch
        )
    assert mixed.estimate.tokens_per_s > 1.2 * even.estimate.tokens_per_s


def test_a_mixed_plan_beats_the_best_single_type_plan_on_the_same_accelerators():
    """64 H100 and 64 Ascend 910B joined at 100 Gbit/s: the job's best plan uses both, split by
    speed, and is faster than its best plan on either type alone."""
    view = h100_and_910b()
    arch = catalog.model("llama2-70b")
    job = JobSpec("mixed", arch, 512, arch.seq_len, 32, 128)
    both = search(job, view, THROUGHPUT, SearchOptions(), pareto=False).best
    assert set(both.names) == {"h100", "910b"} and both.split and both.split[0] > both.split[1]
    for name in ("h100", "910b"):
        alone = view.with_free({d.name: 0 for d in view.domains if d.name != name})
        single = search(job, alone, THROUGHPUT, SearchOptions(), pareto=False).best
        assert single.names == (name,)
        assert both.estimate.tokens_per_s > 1.15 * single.estimate.tokens_per_s


def a100_and_v100(gpus: int = 16) -> ClusterView:
    """16 A100-40GB and 16 V100 in one building (100 Gbit/s between them)."""
    a, v = catalog.accelerator("A100-40GB"), catalog.accelerator("V100")
    doms = (
        DomainView("a100", a, gpus, a.scaleup_gbs, 100, 3.7),
        DomainView("v100", v, gpus, v.scaleup_gbs, 50, 2.5),
    )
    return ClusterView(
        doms, np.array([[0, 100.0], [100.0, 0]]), np.full((2, 2), 1.0), np.full((2, 2), 0.01)
    )


# V100 runs no FlashAttention-2 (Ampere and later): Megatron's fused softmax, in fp16
VOLTA = SearchOptions(dtype="fp16", stack=Stack(flash_attention=False))


def test_an_a100_and_v100_plan_beats_the_best_plan_on_either_alone():
    """OPT-350M, global batch 1024 (Sailor's job) in fp16: the best plan uses both types, the
    A100 replicas taking more micro-batches, and beats the best plan on either type alone;
    in BF16 the V100 are left out, and the plan says so."""
    view, arch = a100_and_v100(), catalog.model("opt-350m")
    job = JobSpec("opt", arch, 1024, arch.seq_len, 1, 32)
    both = search(job, view, THROUGHPUT, VOLTA, pareto=False).best
    assert both.names == ("a100", "v100") and both.split[0] > both.split[1]
    for name in ("a100", "v100"):
        alone = view.with_free({d.name: 0 for d in view.domains if d.name != name})
        single = search(job, alone, THROUGHPUT, VOLTA, pareto=False).best
        assert both.estimate.tokens_per_s > 1.4 * single.estimate.tokens_per_s
    bf16 = search(job, view, THROUGHPUT, replace(VOLTA, dtype="bf16"), pareto=False).best
    assert bf16.names == ("a100",)
    with pytest.raises(UserError, match=r"leave out V100-SXM2-32GB.*fp16, fp32"):
        search(job, view.with_free({"a100": 0}), THROUGHPUT, replace(VOLTA, dtype="bf16"))


def test_a_job_that_names_its_precision_is_planned_in_it_whatever_the_options_say():
    view, arch = a100_and_v100(), catalog.model("opt-350m")
    job = JobSpec("opt", arch, 1024, arch.seq_len, 1, 32)
    for own, opts, expected in ((None, VOLTA, "fp16"), ("fp32", VOLTA, "fp32")):
        best = search(replace(job, dtype=own), view, THROUGHPUT, opts, pareto=False).best
        assert best.plan.dtype == expected and best.names == ("a100", "v100")
    alone = search(replace(job, dtype="bf16"), view, THROUGHPUT, VOLTA, pareto=False).best
    assert alone.names == ("a100",)


def test_a_mixed_plan_splits_by_the_models_own_speeds_and_is_paced_by_its_slowest_share():
    """The peaks say an A100 is 2.5 V100s (312:125 TF, 23 of 32 micro-batches to the A100
    replicas), but OPT-350M's kernels are partly memory bound and the V100 has more bandwidth
    per FLOP (900 GB/s for 125 TF, the A100 1,555 for 312): the model's own times say 1.95, 21
    of 32. The step is the slower share on its own accelerator, 11 micro-batches of 2 on a V100
    (within the launch overhead of the 5 beyond the even 16), and shorter than the 23 on an A100
    that the peaks' split would take."""
    view, arch = a100_and_v100(), catalog.model("opt-350m")
    job = JobSpec("opt", arch, 1024, arch.seq_len, 1, 32)
    both = search(job, view, THROUGHPUT, VOLTA, pareto=False).best
    p = both.plan
    assert (both.kind, p.dp, p.micro_batch, both.split) == ("data", 32, 2, (21, 11))

    def alone(domain: int, micro_batches: int) -> float:
        hw = Hardware.of(view.domains[domain].accelerator)
        own = estimate(
            arch,
            2 * micro_batches,
            PlanBatch.of([Plan(dp=1, micro_batch=2, dtype="fp16")]),
            hw,
            stack=VOLTA.stack,
        )
        return float(own.breakdown_s["compute"][0])

    assert both.estimate.breakdown_s["compute"] == pytest.approx(alone(1, 11), rel=0.015)
    assert both.estimate.breakdown_s["compute"] < alone(0, 23)


@pytest.mark.parametrize(
    "dtype, per_zone, zones", [("bf16", 8, 4), ("fp32", 8, 5), ("fp32", 16, 5), ("bf16", 32, 4)]
)
def test_sailors_five_zones_get_the_best_plan_on_any_number_of_zones(dtype, per_zone, zones):
    """Sailor's setup: the search's pick is the fastest of every candidate (no gap), and the
    Oregon zone, 7.8-9.1 Gbit/s a VM pair from the rest, is worth its gradient exchange only
    where a step is long: in fp32 at 8 and 16 A100-40GB a zone (five zones, 12% and 4% ahead
    of four), not in bf16 (four). At 16 a zone the exchange runs over 4 VM pairs a zone at once:
    with the links read as one shared pipe the fifth zone lost there."""
    from benchmarks.sailor_zones import best_by_zones, setup

    job, view = setup(per_zone)
    opts = SearchOptions(dtype=dtype)
    pick = search(job, view, THROUGHPUT, opts, pareto=False).best
    best = best_by_zones(job, view, opts)
    assert len(pick.domains) == zones and pick.kind == "data"
    assert pick.estimate.tokens_per_s == pytest.approx(max(best.values()))


def test_sailors_links_are_per_vm_pair_and_placements_say_so():
    """Sailor's profile times one pair of 4-GPU VMs; the scenario says so and the placements
    over those links carry it to the cost model, those over a leased link do not."""
    from xdscheduler.planner.space import describe_placements

    scn = load_scenario(SCENARIOS / "sailor_five_zones.yaml")
    assert all(link.per_node_pair for link in scn.links)
    view = ClusterView.from_scenario(scn)
    assert view.per_node_pair.sum() == 20  # 10 links, both ways
    doms = np.array([[0, 4, -1], [0, 1, 4], [0, 4, -1], [2, -1, -1]])
    kind = np.array(["data", "data", "pipeline", "single"], dtype=object)
    wan = describe_placements(view, kind, doms).wan
    assert wan.dp_per_node.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert wan.pp_per_node.tolist() == [0.0, 0.0, 1.0, 0.0]
    leased = describe_placements(two_domains(), kind[:1], np.array([[0, 1]])).wan
    assert leased.dp_per_node.tolist() == [0.0]
    # what one GPU-to-GPU connection gets, from the same profile: on the hop to Oregon each
    # placement crosses (4.2-4.9 Gbit/s), beside that hop's own bandwidth; and the slowest of
    # its domains' own
    pl = describe_placements(view, kind, doms)
    assert pl.wan.dp_flow_gbps.tolist() == [[4.931], [4.310], [np.inf], [np.inf]]
    assert pl.wan.dp_gbps.tolist() == [[8.733], [8.745], [np.inf], [np.inf]]
    assert pl.wan.pp_flow_gbps.tolist() == [[np.inf], [np.inf], [4.931], [np.inf]]
    assert pl.hardware.flow_gbps.tolist() == [19.363, 19.363, 19.363, 20.055]
    assert np.isinf(leased.dp_flow_gbps).all()


def test_a_ring_of_replicas_is_as_slow_as_its_slowest_hop_not_slower():
    """Round us-central1-f, us-west1-b and us-central1-c the narrowest hop (f to Oregon, 8.18
    Gbit/s a VM pair) is not the one with the slowest connection (Oregon to c, 4.22): with TP 2
    on 4-GPU VMs (two connections a VM pair) the ring goes at its slowest hop's own rate.
    Before, the one hop's bandwidth at the other's flow rate made it slower than every hop."""
    from xdscheduler.planner.space import DATA, describe_placements

    view = ClusterView.from_scenario(load_scenario(SCENARIOS / "sailor_five_zones.yaml"))
    arch = catalog.model("opt-350m")
    plans = PlanBatch.of([Plan(dp=3, tp=2, micro_batch=8, zero=0, dtype="tf32")])
    ring = (3, 4, 2)
    pl = describe_placements(view, np.array([DATA], dtype=object), np.array([ring]))

    def dp_comm(wan):
        return estimate(arch, 96, plans, pl.hardware, wan).breakdown_s["dp_comm"][0]

    hops = [(a, b) for a, b in zip(ring, (*ring[1:], ring[0]), strict=True)]
    alone = [
        dp_comm(replace(pl.wan, dp_gbps=view.bandwidth_gbps[h], dp_flow_gbps=view.flow_gbps[h]))
        for h in hops
    ]
    assert dp_comm(pl.wan) == pytest.approx(max(alone), rel=1e-12)


def test_our_placements_read_as_sailors_plans_and_back():
    """benchmarks/sailor_side_by_side hands our picks to Sailor's simulator and Sailor's to
    ours: a replicated job's replicas keep their zones, a pipeline's stages theirs, and the
    layers split as Megatron-DeepSpeed's type:transformer partition does."""
    from benchmarks.sailor_side_by_side import as_sailor, from_sailor_plan
    from benchmarks.sailor_zones import setup
    from xdscheduler.planner.placement import Placement

    job, view = setup(8)
    arch = catalog.model("opt-350m")
    names = tuple(d.name for d in view.domains)
    data = Placement(
        job.name,
        "data",
        (0, 1, 2, 3),
        (8, 8, 8, 8),
        Plan(dp=16, tp=2, micro_batch=4, zero=0, dtype="tf32"),
        names[:4],
    )
    body = as_sailor(data, arch)
    stages = body["pipeline_list"][0]
    assert stages["layers_per_stage"] == [list(range(26))] and stages["dp"] == [16]
    assert [vm[0][0][2] for vm in stages["tmp_per_stage"][0]] == [
        z
        for z in ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
        for _ in range(4)
    ]
    assert from_sailor_plan(body, view, job) == data
    pipe = Placement(
        job.name,
        "pipeline",
        (0, 4),
        (24, 16),
        Plan(dp=2, tp=4, pp=5, micro_batch=8, zero=0, dtype="tf32"),
        (names[0], names[4]),
    )
    body = as_sailor(pipe, arch)
    layers = body["pipeline_list"][0]["layers_per_stage"]
    assert [len(s) for s in layers] == [6, 5, 5, 5, 5]  # 5+5+5+5+4 layers, embedding, output
    assert layers[0][0] == 0 and layers[-1][-1] == 25
    assert from_sailor_plan(body, view, job) == pipe


def test_sailors_mixed_gpu_runs_read_as_our_placements_with_their_layer_split():
    """benchmarks/sailor_mixed_gpus: each server of a run is a domain; a pipeline keeps the
    transformer layers Sailor gave each stage (as a split, written back the same), replicas
    their servers in order, and a plan whose stages' replicas mix kinds has no placement."""
    from benchmarks.sailor_mixed_gpus import as_placement, as_sailor, used_servers

    def vm(kind: str) -> list:
        return [[[kind, 8, "zone"]], 8]

    pipe = {
        "zone": "zone",
        "mbs": 2,
        "gbs": 256,
        "pipeline_list": [
            {
                "num_stages": 2,
                "layers_per_stage": [list(range(12)), list(range(12, 26))],
                "tmp_per_stage": [[vm("RTX-3090")], [vm("RTX-2080")]],
                "dp": [1, 1],
            }
        ],
    }
    data = {
        **pipe,
        "pipeline_list": [
            {
                "num_stages": 1,
                "layers_per_stage": [list(range(26))],
                "tmp_per_stage": [[vm("RTX-2080"), vm("Titan-RTX"), vm("RTX-2080")]],
                "dp": [3],
            }
        ],
    }
    mixed = {
        **pipe,
        "pipeline_list": [
            {
                **pipe["pipeline_list"][0],
                "tmp_per_stage": [[vm("RTX-3090"), vm("RTX-2080")]] * 2,
                "dp": [2, 2],
            }
        ],
    }
    assert used_servers(data) == [("RTX-2080", 0), ("Titan-RTX", 0), ("RTX-2080", 1)]
    names = ["rtx-3090-0", "rtx-2080-0", "titan-rtx-0", "rtx-2080-1"]
    a = catalog.accelerator("A100-40GB")
    view = ClusterView(
        tuple(DomainView(n, a, 8, a.scaleup_gbs, 100, 1.0) for n in names),
        np.full((4, 4), 10.0),
        np.full((4, 4), 1.0),
        np.zeros((4, 4)),
    )
    arch = catalog.model("opt-350m")
    job = JobSpec("opt", arch, 256, arch.seq_len, 1, 32)
    p = as_placement(pipe, job, view)
    assert (p.kind, p.names, p.gpus, p.split) == ("pipeline", tuple(names[:2]), (8, 8), (11, 13))
    back = as_sailor(p, arch, "zone")["pipeline_list"][0]["layers_per_stage"]
    assert back == pipe["pipeline_list"][0]["layers_per_stage"]
    r = as_placement(data, job, view)
    assert (r.kind, r.names, r.split) == ("data", ("rtx-2080-0", "titan-rtx-0", "rtx-2080-1"), ())
    assert as_placement(mixed, job, view) is None


def test_the_mixed_gpu_benchmark_reads_a_server_pairs_link_as_measured_or_at_its_best():
    """benchmarks/sailor_mixed_gpus: a link between two kinds of server is Sailor's entry for
    as many GPUs a side as the run took; at its best, the most measured between those kinds
    at any count (counts measured for other kinds only are passed over)."""
    from benchmarks.sailor_mixed_gpus import measured_peak

    def entry(gbps: float) -> list:
        return [[0.0, 0.0, 0.0], gbps * 1e9 / 8]

    z = "zone"
    het = {
        z: {
            "RTX-2080": {
                "1": {z: {"Titan-RTX": {"1": entry(0.9)}}},
                "2": {z: {"Titan-RTX": {"2": entry(23.0)}}},
                "4": {z: {"RTX-2080": {"4": entry(40.0)}}},
                "8": {z: {"Titan-RTX": {"8": entry(0.9)}}},
            }
        }
    }
    assert measured_peak(het, z, "RTX-2080", "Titan-RTX", 8) == pytest.approx(0.9)
    assert measured_peak(het, z, "RTX-2080", "Titan-RTX", 8, best=True) == pytest.approx(23.0)


def test_the_sailor_benchmarks_skip_with_a_reason_without_a_checkout(tmp_path, monkeypatch, capsys):
    """Without a checkout of Sailor (none named, or a folder that is not one) both benchmarks
    say so in one line and stop: nothing of Sailor's is shipped here to fall back on."""
    import sys

    from benchmarks import sailor_mixed_gpus, sailor_side_by_side

    monkeypatch.delenv("SAILOR_DIR", raising=False)
    for module in (sailor_mixed_gpus, sailor_side_by_side):
        for argv in ([], [str(tmp_path)]):
            monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
            module.main()
            out = capsys.readouterr().out.strip()
            assert out.startswith("skipped: ") and "\n" not in out, out
            assert ("not a checkout of Sailor" in out) == bool(argv), out


def test_a_sailor_planner_that_does_not_build_stops_the_benchmark_in_one_line(
    tmp_path, monkeypatch
):
    """When Sailor's C++ planner does not compile (here: a header the machine lacks), the
    benchmark stops on what the build needs and the compiler's error, no traceback."""
    import shutil

    from benchmarks import sailor_side_by_side
    from benchmarks.sailor_driver import SailorError

    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine: the build is not tried")
    src = tmp_path / "sailor" / "sailor" / "Planner" / "sailor_planner" / "cpp_src"
    (src / "utils").mkdir(parents=True)
    for name in ("read_json", "network_utils"):
        (src / "utils" / f"{name}.cpp").write_text("#include <no_such_dir/no_such_header.h>\n")
    for name in ("training", "planner_utils", "planner"):
        (src / f"{name}.cpp").write_text("int x;\n")
    monkeypatch.setattr(sailor_side_by_side, "CACHE", tmp_path / "cache")
    with pytest.raises(SailorError, match=r"libjsoncpp-dev.*g\+\+ said:.*no_such_header"):
        sailor_side_by_side.driver(tmp_path, {"op": "plan"})


def test_a_ring_is_written_from_after_its_slowest_hop():
    """Sailor's simulator leaves out the hop back to a list's first replica: our ring is
    written so that hop is its slowest one-connection hop, the ring and its direction kept."""
    from benchmarks.sailor_side_by_side import written_ring
    from benchmarks.sailor_zones import setup
    from xdscheduler.planner.placement import Placement

    job, view = setup(8)
    ring = (0, 1, 2, 3)
    data = Placement(
        job.name,
        "data",
        ring,
        (8, 16, 8, 8),
        Plan(dp=20, tp=2, micro_batch=4, zero=0, dtype="tf32"),
        tuple(view.domains[d].name for d in ring),
    )
    flow = view.flow_gbps
    slowest = min(range(4), key=lambda i: flow[ring[i], ring[(i + 1) % 4]])
    written = written_ring(data, view)
    start = (slowest + 1) % 4
    assert written.domains == ring[start:] + ring[:start]
    assert written.gpus == data.gpus[start:] + data.gpus[:start]
    assert written.names == tuple(view.domains[d].name for d in written.domains)
    assert (written.domains[-1], written.domains[0]) == (ring[slowest], ring[(slowest + 1) % 4])
    pipe = Placement(job.name, "pipeline", (0, 4), (24, 16), data.plan, data.names[:2])
    assert written_ring(pipe, view) is pipe


def test_the_side_by_side_says_why_it_does_not_run_without_a_checkout(
    capsys, monkeypatch, tmp_path
):
    from benchmarks import sailor_side_by_side

    monkeypatch.delenv("SAILOR_DIR", raising=False)
    monkeypatch.setattr("sys.argv", ["sailor_side_by_side"])
    sailor_side_by_side.main()
    assert capsys.readouterr().out.startswith("skipped: give a checkout")
    monkeypatch.setattr("sys.argv", ["sailor_side_by_side", str(tmp_path)])
    sailor_side_by_side.main()
    assert "is not a checkout of Sailor" in capsys.readouterr().out
    for sizes in ("6", "8,x"):  # a zone holds 4-GPU VMs
        monkeypatch.setattr("sys.argv", ["sailor_side_by_side", str(tmp_path), "--per-zone", sizes])
        with pytest.raises(SystemExit) as exit_:
            sailor_side_by_side.main()
        assert exit_.value.code == 2 and "--per-zone takes" in capsys.readouterr().err


def jjj_with_two_pools() -> ClusterView:
    """jjj holds 64 H800 and 64 A100 (two pools of one data centre, joined by its own network),
    10 Gbit/s from 32 H100 in imn."""
    node = {"location": {"city": "hub"}, "intra_domain_gbps": 400}
    both = [{"accelerator": "H800", "count": 8}, {"accelerator": "A100-80GB", "count": 8}]
    scn = parse_scenario(
        {
            "name": "mixed",
            "domains": [
                {"name": "jjj", "nodes": both, **node},
                {"name": "imn", "nodes": [{"accelerator": "H100-SXM", "count": 4}], **node},
            ],
            "links": [
                {"a": "jjj", "b": "imn", "bandwidth_gbps": 10, "rtt_ms": 5, "price_per_gb": 0.01}
            ],
        },
        "mixed.yaml",
    )
    return ClusterView.from_scenario(scn)


@pytest.mark.parametrize(
    ("kind", "gpus", "busy", "offsite"),
    [
        ("data", 128, (), 0.0),
        ("data", 160, (), 2 / 3),
        ("pipeline", 160, (), 1 / 2),
        ("data", 96, ("jjj.A100-80GB",), 1.0),
    ],
)
def test_traffic_between_the_pools_of_one_data_centre_is_no_wan_traffic(kind, gpus, busy, offsite):
    """Replicas over jjj's two pools send nothing over the WAN (before: 52 GB a step); a ring
    on to imn counts its two hops off jjj of three, a pipeline H800→A100→imn its last boundary;
    across two data centres the figure is as before. The plan, its step (the fabric timed at
    its rate) and its WAN bill (the fabric had no price) are as before."""
    view, arch = (
        jjj_with_two_pools().with_free({name: 0 for name in busy}),
        catalog.model("llama2-13b"),
    )
    job = JobSpec("j", arch, 512, arch.seq_len, gpus, gpus)
    opts = SearchOptions(kinds=(kind,))
    result = search(job, view, THROUGHPUT, opts, pareto=False)
    old = search(job, replace(view, fabric=None), THROUGHPUT, opts, pareto=False).best
    assert result.best.same_as(old)
    now, before = result.best.estimated, old.estimated
    assert before.cross_domain_bytes_per_step > 0
    assert now.cross_domain_bytes_per_step == pytest.approx(
        offsite * before.cross_domain_bytes_per_step
    )
    assert now.step_time_s == pytest.approx(before.step_time_s)
    assert now.cross_domain_bytes_per_step * now.wan_price_per_gb == pytest.approx(
        before.cross_domain_bytes_per_step * before.wan_price_per_gb
    )
    if offsite == 0:
        why = result.explanation["summary"]
        assert "inside one data centre, across its pools" in why and "nothing crosses" in why


def test_moving_a_job_between_the_pools_of_one_data_centre_is_no_wan_move():
    """A job grown from jjj's H800 pool onto its A100 pool re-lays its state over jjj's own
    network, node by node: no WAN GB, no WAN bill, an adjustment rather than a relocation
    (before: 182 GB, the whole state, counted over the WAN); grown onto imn, it crosses."""
    view = jjj_with_two_pools()
    h800, a100, imn = (view.names.index(n) for n in ("jjj.H800", "jjj.A100-80GB", "imn"))
    params = catalog.model("llama2-13b").params
    old = Placement("j", SINGLE, (h800,), (8,), Plan(dp=8, micro_batch=1))
    pools = Placement("j", DATA, (h800, a100), (8, 8), Plan(dp=16, micro_batch=1))
    wan = Placement("j", DATA, (h800, imn), (8, 8), Plan(dp=16, micro_batch=1))
    cost = switch_cost(old, pools, params, view)
    assert cost.wan_gb == cost.wan_cost == cost.wan_s == 0 and not crosses_wan(old, pools, view)
    assert 0 < cost.pause_s < switch_cost(old, wan, params, view).pause_s
    assert switch_cost(old, pools, params, replace(view, fabric=None)).wan_gb > 0
    assert crosses_wan(old, wan, view) and switch_cost(old, wan, params, view).wan_gb > 0


@pytest.mark.parametrize(
    ("gpus", "where"), [(96, {"jjj.H800", "jjj.A100-80GB"}), (160, {"jjj.H800", "imn"})]
)
def test_a_job_one_data_centre_can_hold_stays_inside_it(gpus, where):
    """96 accelerators are more than any pool of jjj, not more than jjj: the planner keeps the
    job inside jjj, across its pools, though jjj's H800 with imn's H100 over the WAN train it
    faster (it took those before); a job larger than jjj still crosses."""
    from xdscheduler.planner.policies import PlannerPolicy, largest_site
    from xdscheduler.scenario import Job

    view = jjj_with_two_pools()
    assert largest_site(view) == 128
    job = JobSpec.of(
        Job(name="j", model="llama3-8b", global_batch=512, tokens=1e10, gpus={"min": gpus})
    )
    (placed,) = PlannerPolicy(Weights()).decide([job], view, 0.0)
    assert where <= set(placed.names) and (view.wan_links(placed) == []) == (gpus <= 128)


def test_a_split_by_speed_keeps_its_pacers_profile_and_is_timed_again_alike():
    """A100 and V100 replicas, each kind profiled (the V100 three times as slow): the search
    splits the micro-batches by the profiles' speeds, the step is the pacer's profile at its
    share, and the placement timed again (as on a link's change) keeps its split."""
    from tests.test_layer_profiles import TINY, profile, scaled
    from xdscheduler.costmodel.layers import MeasuredLayers

    view = a100_and_v100()
    job = JobSpec("tiny", TINY, 1024, TINY.seq_len, 2, 32)
    fast = profile(accelerator="A100-40GB", dtype="fp16")
    layers = (MeasuredLayers.of(fast), MeasuredLayers.of(scaled(fast, 3.0, "V100")))
    opts = SearchOptions(
        dtype="fp16", kinds=("data",), layers=layers, stack=VOLTA.stack, max_pipeline=1
    )
    best = search(job, view, THROUGHPUT, opts, pareto=False).best
    assert best.names == ("a100", "v100") and best.split[0] > best.split[1], best
    # a replica's micro-batch of 2 or 4: every block twice as long at 4 (the profile)
    per_micro_batch = (4 * 0.030 + 0.0015 + 0.010) * best.plan.micro_batch / 2
    pace = max(best.split[0] * per_micro_batch, best.split[1] * 3 * per_micro_batch)
    assert best.estimate.breakdown_s["compute"] == pytest.approx(pace)
    again = estimate_placement(best, job, view, opts)
    assert again.step_time_s == pytest.approx(best.estimate.step_time_s)


def test_a_pipeline_over_two_domains_is_timed_where_its_crossing_sits():
    """Two H100 domains over 10 Gbit/s: the best pipeline across them is timed with the fill
    of its one crossing where it sits (the stages the second domain holds), alike when timed
    again, and not as it would be with the crossing's place unknown."""
    h = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(n, h, 16, h.scaleup_gbs, 400, 2.5) for n in ("a", "b"))
    view = ClusterView(
        doms, np.array([[0, 10.0], [10.0, 0]]), np.full((2, 2), 20.0), np.zeros((2, 2))
    )
    arch = catalog.model("llama2-70b")
    job = JobSpec("p", arch, 512, arch.seq_len, 32, 32)
    opts = SearchOptions(kinds=("pipeline",), virtual=(1,))
    best = search(job, view, THROUGHPUT, opts, pareto=False).best
    assert best.plan.pp > 2 and len(best.domains) == 2, best
    assert sum(best.stages_per_domain) == best.plan.pp
    again = estimate_placement(best, job, view, opts)
    assert again.step_time_s == pytest.approx(best.estimated.step_time_s)
    pl = describe_placements(view, np.array([best.kind], dtype=object), np.array([best.domains]))
    unknown = estimate(
        arch,
        job.global_batch,
        PlanBatch.of([best.plan]),
        pl.hardware,
        pl.wan,
        opts.stack,
        opts.calibration,
        seq=job.seq,
    )
    assert float(unknown.step_time_s[0]) != pytest.approx(best.estimated.step_time_s, rel=1e-6)


def test_the_model_is_told_the_stage_boundaries_after_each_crossing():
    """A pipeline's stage boundaries after each WAN crossing, in its order, -1 past the last:
    where a middle domain holds one stage, two crossings are one link apart, which is how the
    model finds a stage alone between two; other kinds cross nothing."""
    from xdscheduler.costmodel.exchanges import _alone_before
    from xdscheduler.planner.space import PIPELINE, with_stage_counts

    kind = np.array([PIPELINE, PIPELINE, PIPELINE, PIPELINE, DATA], dtype=object)
    stages = np.array([[2, 1, 2, 0], [2, 2, 2, 0], [3, 4, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    after = np.asarray(with_stage_counts(WanUse(), kind, stages).pp_after_crossings)
    assert after.tolist() == [
        [2.0, 1.0, -1.0],
        [3.0, 1.0, -1.0],
        [3.0, -1.0, -1.0],
        [2.0, 1.0, 0.0],
        [-1.0, -1.0, -1.0],
    ]
    assert _alone_before(after).any(axis=1).tolist() == [True, False, False, True, False]


def test_a_stage_between_two_crossings_waits_on_each_at_its_own_speed():
    """One stage a domain over three H100 domains joined at 10 and 40 Gbit/s: the middle stage
    waits on both crossings, the fast one at its own speed, so the step is shorter than with
    the slow one standing for both (and than with both slow), and longer than with the second
    link free."""
    h = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(n, h, 8, h.scaleup_gbs, 400, 2.5) for n in "abc")

    def step(fast: float, known: bool = True) -> float:
        bw = np.array([[0, 10.0, 0], [10.0, 0, fast], [0, fast, 0]])
        view = ClusterView(doms, bw, np.full((3, 3), 20.0), np.zeros((3, 3)))
        plan = Plan(dp=1, tp=8, pp=3, micro_batch=1, zero=0, dtype="bf16")
        placed = Placement("p", "pipeline", (0, 1, 2), (8, 8, 8), plan, ("a", "b", "c"))
        est = estimate_placement(placed, job, view, SearchOptions(kinds=("pipeline",)))
        if known:
            return est.breakdown_s["pp_comm"]
        pl = describe_placements(view, np.array(["pipeline"], dtype=object), np.array([[0, 1, 2]]))
        untold = pl.wan.with_(pp_crossing_gbps=np.nan, pp_crossing_flow_gbps=np.nan)
        return float(
            estimate(
                arch, job.global_batch, PlanBatch.of([plan]), pl.hardware, untold, seq=job.seq
            ).breakdown_s["pp_comm"][0]
        )

    arch = catalog.model("gpt3-1.3b")
    job = JobSpec("p", arch, 64, arch.seq_len, 24, 24)
    # not told the lone stage's links nor each crossing's, the slowest stands for both,
    # whatever the other's speed
    assert step(40.0, known=False) == pytest.approx(step(10.0, known=False))
    assert step(1e6) < step(40.0) < step(10.0) <= step(10.0, known=False)


def test_a_pipeline_over_three_domains_times_each_crossing_at_its_own_speed():
    """Llama 2 70B, two stages a domain over three H100 domains joined at 10 Gbit/s and then
    at a faster link: the fill sends each micro-batch over each crossing at its own speed and
    hides part of it behind the links after each, so the step falls as the second link gets
    faster; told neither the links after each crossing nor each crossing's speed, the count
    is higher, and does not see the second link at all."""
    h = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(n, h, 16, h.scaleup_gbs, 400, 2.5) for n in "abc")
    arch = catalog.model("llama2-70b")
    job = JobSpec("p", arch, 64, arch.seq_len, 48, 48)
    plan = Plan(dp=1, tp=8, pp=6, micro_batch=1, zero=0, dtype="bf16")
    placed = Placement("p", "pipeline", (0, 1, 2), (16, 16, 16), plan, ("a", "b", "c"))

    def step(second: float, told: str = "all") -> float:
        bw = np.array([[0, 10.0, 0], [10.0, 0, second], [0, second, 0]])
        view = ClusterView(doms, bw, np.full((3, 3), 20.0), np.zeros((3, 3)))
        pl = described(view, [placed])
        wan = pl.wan
        if told != "all":
            wan = wan.with_(pp_after_crossings=-1.0)
        if told == "nothing":
            wan = wan.with_(pp_crossing_gbps=np.nan)
        est = estimate(arch, job.global_batch, PlanBatch.of([plan]), pl.hardware, wan, seq=job.seq)
        return float(est.breakdown_s["pp_comm"][0])

    assert step(40.0, "nothing") == pytest.approx(step(10.0, "nothing"))
    assert step(1e6) < step(40.0) < step(10.0)
    assert step(40.0) < step(40.0, "speeds") < step(40.0, "nothing")


@pytest.mark.parametrize("gbps", [4.0, 1.0])
def test_a_pipeline_over_slow_crossings_waits_as_its_schedule_does(gbps, monkeypatch):
    """Llama 2 70B, two stages a domain over four H100 domains joined at about 4 or 1 Gbit/s
    (a micro-batch's crossing 1.6-11 times its compute, 64 micro-batches), planned with
    Megatron's 1F1B: the wait the planner's estimate charges, its stage and link times put
    into the schedule's event simulation, gives the simulation's step. The code before the
    later-crossing term was 0.38% and 0.12% over here (every link twice, where a crossing
    took more than two micro-batches' compute)."""
    import xdscheduler.costmodel.steptime as steptime
    from xdscheduler.costmodel.exchanges import PipelineExchanges
    from xdscheduler.costmodel.schedules import Pipeline
    from xdscheduler.planner.search import estimate_placement

    told: list[PipelineExchanges] = []

    class Recorded(PipelineExchanges):
        def wait(self):
            told.append(self)
            return super().wait()

    monkeypatch.setattr(steptime, "PipelineExchanges", Recorded)
    h = catalog.accelerator("H100-SXM")
    doms = tuple(DomainView(n, h, 16, h.scaleup_gbs, 400, 2.5) for n in "abcd")
    bw = np.zeros((4, 4))
    for (a, b), scale in zip(itertools.pairwise(range(4)), (1.0, 1.4, 0.8), strict=True):
        bw[a, b] = bw[b, a] = gbps * scale
    view = ClusterView(doms, bw, np.full((4, 4), 20.0), np.zeros((4, 4)))
    arch = catalog.model("llama2-70b")
    job = JobSpec("p", arch, 64, arch.seq_len, 64, 64)
    plan = Plan(dp=1, tp=8, pp=8, micro_batch=1, zero=0, dtype="bf16")
    placed = Placement("p", "pipeline", (0, 1, 2, 3), (16, 16, 16, 16), plan, tuple("abcd"))
    estimate_placement(placed, job, view)
    e = told[-1]

    def one(x) -> float:
        return float(np.asarray(x).reshape(-1)[0])

    fwd, t_mb, m = one(e.fwd_s), one(e.t_mb), int(one(e.micro_batches))
    cross = np.asarray(e.crossing_s, dtype=float).reshape(-1)[:3]
    assert m == 64 and (cross > t_mb).all() and cross.max() > 2 * t_mb
    intra = one(e.intra_s)  # two stages a domain: a link inside, then a crossing
    links = [x for c in cross for x in (intra, c)] + [intra]
    schedule = Pipeline("batched", 8, m, fwd, t_mb - fwd, links)
    modelled = (m + 7) * t_mb + one(e.wait()[0])
    assert modelled == pytest.approx(schedule.simulated_s(), rel=1e-6)


def test_a_job_queued_again_is_tried_afresh_and_the_jobs_gone_are_forgotten():
    """The backfill rule skips a job while nothing changed since it last did not fit. Once
    it has left the queue (started), that is forgotten: queued again (preempted, or its
    domain lost), it is tried at once even where the free accelerators are as they were."""
    from xdscheduler.planner.policies import DecisionQueue, queue_pass

    busy, job, tried = pair().with_free({"east": 0, "west": 0}), eight_b(), []

    def place(j, view, modest, now_s):
        tried.append(j.name)
        return None  # nothing free: it does not fit

    decisions = DecisionQueue()
    queue_pass([job], busy, 0.0, place, decisions)
    queue_pass([job], busy, 1.0, place, decisions)  # nothing changed: skipped
    assert tried == ["j"]
    queue_pass([], busy, 2.0, place, decisions)  # it started, and left the queue
    assert decisions.no_fit == {}
    queue_pass([job], busy, 3.0, place, decisions)  # queued again, free as before
    assert tried == ["j", "j"]
