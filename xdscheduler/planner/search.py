"""The plan search: every placement × parallel plan evaluated at once, ranked by the objective."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from xdscheduler.cache import BoundedCache
from xdscheduler.costmodel.layers import coverage
from xdscheduler.costmodel.plan import PlanBatch
from xdscheduler.costmodel.steptime import StepEstimate, estimate
from xdscheduler.errors import UserError
from xdscheduler.planner.balance import balanced, split_hardware, stages_fit
from xdscheduler.planner.limits import Limits, ranked
from xdscheduler.planner.objective import Objective, Weights, pareto_mask, score
from xdscheduler.planner.placement import Estimate, Placement
from xdscheduler.planner.space import (
    DATA,
    PIPELINE,
    SINGLE,
    ParallelGrid,
    Placements,
    SearchOptions,
    describe_placements,
    even_grid,
    memory_ladder,
    parallel_grid,
    placements,
    share,
    take_rows,
    with_stage_counts,
)
from xdscheduler.planner.spec import Evaluated, JobSpec, SearchResult
from xdscheduler.planner.view import ClusterView

DEFAULT_OPTIONS = SearchOptions()


def search(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    opts: SearchOptions | None = None,
    top_k: int = 5,
    pareto: bool = True,
    limits: Limits | None = None,
) -> SearchResult:
    """Best plan for `job` on the free accelerators of `view`, with alternatives and reasons.

    `pareto=False` skips the Pareto front (quadratic in the candidates kept) when only the
    decision is wanted, as in a running study.
    """
    opts, limits = in_precision(opts or DEFAULT_OPTIONS, job), limits or Limits()
    start = time.perf_counter()
    ev = refined_space(job, view, weights, opts)
    if ev is None:
        free = ", ".join(f"{d.name}={d.free_gpus}" for d in view.domains)
        raise UserError(
            f"no feasible plan for job {job.name!r} ({job.arch.size} parameters, "
            f"{job.gpus_min}-{job.gpus_max} GPUs) on the free accelerators ({free})"
            + why_no_plan(job, view, opts)
            + unrated_note(view, opts.dtype)
        )
    order = ranked(ev, view, limits)
    picked = distinct(ev, order, max(top_k, 1) + 1)  # a runner-up to explain, at --top 0 too
    cands = [placement_at(ev, i, view, job) for i in picked]
    front_idx = []
    if pareto:
        front = order[: min(len(order), 4000)]
        mask = pareto_mask(
            ev.terms["tokens_per_s"][front], ev.terms["utilization"][front], ev.terms["cost"][front]
        )
        front_idx = distinct(ev, front[mask], 20)
    front_cands = [placement_at(ev, i, view, job) for i in front_idx]
    best = cands[0]
    runner = next((c for c in cands[1:] if c.shape != best.shape), None)
    explanation = explain(job, best, runner, weights, view)
    ms = (time.perf_counter() - start) * 1000
    alternatives = cands[1 : top_k + 1]
    return SearchResult(job.name, best, alternatives, front_cands, explanation, ms, len(ev.place))


def in_precision(opts: SearchOptions, job: JobSpec) -> SearchOptions:
    """The options in the job's own precision, where it names one (a V100 job in FP16)."""
    return opts if job.dtype in (None, opts.dtype) else replace(opts, dtype=job.dtype)


THROUGHPUT_ONLY = Weights(efficiency=1.0, utilization=0.0, cost=0.0)
# The yardstick's plan space: every plan a policy may run, low-communication ones included.
IDEAL_OPTIONS = even_grid(SearchOptions(diloco_h=(0, 100)))
# Memos per job shape and cluster, bounded: a service meets job shapes without end. Each
# holds far more shapes than one study or rollout has.
MEMO_SIZE = 4096
_IDEAL: BoundedCache[tuple[float, bool]] = BoundedCache(MEMO_SIZE)  # tokens/s, an even plan?
# a job's shape without its largest size, and a cluster -> the largest cap known to leave it
# no plan, and the least known to give it one
_PLANNABLE: BoundedCache[tuple[float, float]] = BoundedCache(MEMO_SIZE)


def ideal_tokens_per_s(job: JobSpec, view: ClusterView) -> float:
    """The job's best speed with the whole cluster, as leased, to itself: the yardstick its
    efficiency is measured against (the same for every policy, whatever the load)."""
    return _ideal(job, view)[0]


def plannable(job: JobSpec, view: ClusterView) -> bool:
    """Whether any plan runs `job`, within its range of accelerators, on the whole cluster
    free (a quota's cap on that range can leave it none: too few for its memory)."""
    # Asked at every decision with whatever cap a tenant's room gives: a plan within a cap
    # is one within any larger cap, so per job and cluster two bounds settle most caps.
    key = (job.arch, job.global_batch, job.seq, job.gpus_min, job.dtype, _cluster_key(view))
    too_few, enough = _PLANNABLE.get(key, (job.gpus_min - 1, math.inf))
    if job.gpus_max >= enough or job.gpus_max <= too_few:
        return job.gpus_max >= enough
    try:
        _ideal(job, view)
    except UserError:
        _PLANNABLE[key] = (job.gpus_max, enough)
        return False
    _PLANNABLE[key] = (too_few, job.gpus_max)
    return True


def uneven_if_needed(job: JobSpec, view: ClusterView, opts: SearchOptions) -> SearchOptions:
    """`opts`, with uneven degrees too where no even plan runs `job` even on the whole cluster
    free (a prime number of layers, a batch no accelerator count divides): the plans `xds plan`
    finds for it, rather than a job refused or queued for ever. Even-placed jobs keep the
    lean grid."""
    return opts if opts.uneven or _ideal(job, view)[1] else replace(opts, uneven=True)


def _cluster_key(view: ClusterView) -> tuple:
    """What the whole cluster free, as leased, depends on."""
    leased = view.leased
    return (
        tuple(
            (d.name, d.accelerator.name, d.total_gpus, d.scaleup_gbs, d.scaleout_gbps)
            for d in view.domains
        ),
        leased[0].tobytes(),
        leased[1].tobytes(),
    )


def _ideal(job: JobSpec, view: ClusterView) -> tuple[float, bool]:
    key = (job.shape_key, _cluster_key(view))
    if key not in _IDEAL:  # asked every decision and for every job of a rollout: search once
        try:
            _IDEAL[key] = _fastest(job, view.empty(), IDEAL_OPTIONS), True
        except UserError:  # raised again, with why, where uneven plans do not run it either
            _IDEAL[key] = _fastest(job, view.empty(), replace(IDEAL_OPTIONS, uneven=True)), False
    return _IDEAL[key]


def _fastest(job: JobSpec, view: ClusterView, opts: SearchOptions) -> float:
    return search(
        job, view, THROUGHPUT_ONLY, opts, top_k=0, pareto=False
    ).best.estimated.tokens_per_s


# The even grid picks these many placements; the whole grid is searched on them alone.
REFINED_PLACEMENTS = 12


def refined_space(
    job: JobSpec, view: ClusterView, weights: Weights, opts: SearchOptions
) -> Evaluated | None:
    """The space evaluated in two passes where it is large: the even grid (parallel degrees
    that divide layers and batch, few micro-batch sizes, as many layers or micro-batches on
    every domain) over every placement, then every plan, split by speed, over the placements
    whose even plans ranked best. Uneven plans refine a placement; they seldom change which
    one wins, and evaluating them everywhere costs 20-30x."""
    opts = in_precision(opts, job)
    pl = placements(view, opts, job.gpus_min, job.gpus_max)
    if not (opts.uneven or opts.balance) or len(pl) <= REFINED_PLACEMENTS:
        return evaluate_space(job, view, weights, opts, pl)
    coarse = evaluate_space(job, view, weights, even_grid(opts), pl)
    if coarse is None:
        return evaluate_space(job, view, weights, opts, pl)
    by_rank = coarse.place[np.argsort(-coarse.terms["objective"], kind="stable")]
    _, first = np.unique(by_rank, return_index=True)
    best = by_rank[np.sort(first)[:REFINED_PLACEMENTS]]
    return evaluate_space(job, view, weights, opts, pl.take(np.sort(best)))


def evaluate_space(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    opts: SearchOptions,
    pl: Placements | None = None,
) -> Evaluated | None:
    """All feasible (placement, plan) pairs of the space (over the placements `pl`, where
    given), evaluated; None if there are none."""
    opts = in_precision(opts, job)
    grid = parallel_grid(job.arch, job.global_batch, job.seq, job.gpus_max, opts)
    if pl is None:
        pl = placements(view, opts, job.gpus_min, job.gpus_max)
    if len(pl) == 0 or len(grid.plans) == 0:
        return None
    cand = _candidates(job, view, grid, pl, opts)
    return None if cand is None else _evaluated(job, view, weights, opts, pl, cand)


@dataclass(frozen=True)
class _Candidates:
    """The (placement, plan) pairs that fit, each plan at its memory rung: what each slot of
    its placement holds, and the rated peak and price of what it holds."""

    plans: PlanBatch
    plan_id: np.ndarray  # the grid's plan at its memory rung
    place: np.ndarray  # index into the placements
    kind: np.ndarray
    unit: np.ndarray  # accelerators a part takes
    parts: np.ndarray  # (candidates, slots): parts each slot holds
    peak: np.ndarray  # FLOP/s of the accelerators held
    price: np.ndarray  # $/h of them


def _candidates(
    job: JobSpec, view: ClusterView, grid: ParallelGrid, pl: Placements, opts: SearchOptions
) -> _Candidates | None:
    """The pairs with room for them, split over their placements' domains; None if none."""
    g = grid.plans
    free = np.array([d.available for d in view.domains])
    c_idx, p_idx, rung = _feasible_pairs(job, view, grid, pl, free, opts)
    if not len(c_idx):
        return None
    kind = pl.kind[p_idx]
    is_pp, single = kind == PIPELINE, kind == SINGLE
    dp, tp, pp, cp = g.dp[c_idx], g.tp[c_idx], g.pp[c_idx], g.cp[c_idx]
    unit = np.where(is_pp, dp * tp * cp, np.where(single, dp * tp * pp * cp, tp * pp * cp))
    total = np.where(is_pp, pp, np.where(single, 1, dp))
    # The split over a placement's domains, and what it holds there, depend on the placement,
    # the unit and the total alone: each distinct triple is worked out once (a few per cent of
    # the candidates on large clusters) and the candidates take theirs.
    key = (p_idx * (unit.max() + 1) + unit) * (total.max() + 1) + total
    _, one, back = np.unique(key, return_index=True, return_inverse=True)
    split = _splits(pl, p_idx[one], unit[one], total[one], single[one], free, view)
    ok = split.ok[back]
    if not ok.any():
        return None
    c_idx, p_idx, rung, unit, back = c_idx[ok], p_idx[ok], rung[ok], unit[ok], back[ok]
    ladder = memory_ladder(opts.stack)
    plans = g.take(c_idx)
    zero = np.array([z for z, _ in ladder])[rung]
    recompute = np.array([r for _, r in ladder])[rung]
    return _Candidates(
        PlanBatch(**{**plans.__dict__, "zero": zero, "recompute": recompute}),
        c_idx * len(ladder) + rung,
        p_idx,
        kind[ok],
        unit,
        split.parts[back],
        unit * split.peak[back],
        unit * split.price[back],
    )


def _evaluated(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    opts: SearchOptions,
    pl: Placements,
    cand: _Candidates,
) -> Evaluated | None:
    """The candidates estimated and scored, those that fit kept; None if none does."""
    plans, p_idx, kind, parts = cand.plans, cand.place, cand.kind, cand.parts
    slots = pl.domains[p_idx]
    cand_hw, shares = take_rows(pl.hardware, p_idx), np.zeros(parts.shape)
    mixed = np.zeros(0, dtype=int)
    if opts.balance:
        cand_hw, shares, mixed = balanced(
            job, view, kind == PIPELINE, plans, cand.plan_id, slots, parts, cand_hw, opts
        )
    est = estimate(
        job.arch,
        job.global_batch,
        plans,
        cand_hw,
        with_stage_counts(take_rows(pl.wan, p_idx), kind, parts),
        opts.stack,
        opts.calibration,
        seq=job.seq,
        measured=opts.layers,
        network=opts.network,
    )
    terms = score(job, est, cand.peak, cand.price, pl.wan_price_per_gb[p_idx], weights)
    keep = est.fits.copy()  # the ladder chose by memory; the estimate confirms it
    if len(mixed):  # each stage's own layers against its own accelerator's memory
        keep[mixed] = stages_fit(
            job, view, kind[mixed] == PIPELINE, plans, est, slots[mixed], shares[mixed], mixed
        )
    if opts.layers:  # where a profile is of the accelerator, only what it timed
        timed, profiled = coverage(opts.layers, job.arch, job.seq, plans, cand_hw)
        keep = keep & (timed | ~profiled)
    if not keep.any():
        return None
    return Evaluated(
        pl,
        plans.take(keep),
        p_idx[keep],
        (parts * cand.unit[:, None])[keep],
        _take_est(est, keep),
        {k: v[keep] for k, v in terms.items()},
        pl.wan_price_per_gb[p_idx[keep]],
        shares[keep],
    )


def _feasible_pairs(
    job: JobSpec,
    view: ClusterView,
    grid: ParallelGrid,
    pl: Placements,
    free: np.ndarray,
    opts: SearchOptions,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (grid plan, placement) pairs worth estimating, and the first memory rung each plan
    fits under its placement's accelerator memory: enough accelerators free, tensor
    parallelism inside a node, DiLoCo only between replicas, a precision the accelerators
    rate. Worked out as a plans × placements mask first: cheap where most pairs do not fit."""
    g, hw = grid.plans, pl.hardware
    slots = pl.domains
    room = np.where(slots >= 0, free[np.where(slots >= 0, slots, 0)], 0).sum(axis=1)
    # The first memory rung each plan fits under each distinct accelerator memory (-1: none).
    limits, limit_of = np.unique(np.asarray(hw.memory_gib), return_inverse=True)
    fits = grid.memory_gib[:, :, None] <= limits[None, None, :]
    first = np.where(fits.any(axis=1), fits.argmax(axis=1), -1)  # (C, L)
    n = (g.dp * g.tp * g.pp * g.cp)[:, None]
    gpn = np.broadcast_to(np.asarray(hw.gpus_per_node), (len(pl),))
    ok = (
        (n >= job.gpus_min)
        & (n <= room[None, :])
        & (first[:, limit_of] >= 0)
        & (g.tp[:, None] <= gpn[None, :])
        & ((g.diloco_h[:, None] == 0) | (pl.kind == DATA)[None, :])
        & rated(view, pl.domains, opts.dtype)[None, :]
    )
    c_idx, p_idx = np.nonzero(ok)
    return c_idx, p_idx, first[c_idx, limit_of[p_idx]]


@dataclass(frozen=True)
class _Split:
    """Distinct (placement, unit, total) triples: the units each slot takes, whether they
    make the total on every member, and the rated peak and price of one unit's worth."""

    parts: np.ndarray  # (M, k)
    ok: np.ndarray
    peak: np.ndarray  # FLOP/s of the accelerators held, per unit
    price: np.ndarray  # $/h of them, per unit


def _splits(
    pl: Placements,
    place: np.ndarray,
    unit: np.ndarray,
    total: np.ndarray,
    single: np.ndarray,
    free: np.ndarray,
    view: ClusterView,
) -> _Split:
    slots = pl.domains[place]
    used = slots >= 0
    safe = np.where(used, slots, 0)
    parts = np.zeros(slots.shape, dtype=np.int64)
    parts[single, 0] = 1  # fits: n <= room was checked
    multi = ~single
    if multi.any():
        caps = np.where(used, free[safe], 0)[multi]
        parts[multi] = share(total[multi], caps // unit[multi, None])
    ok = (parts.sum(axis=1) == total) & (single | ((parts > 0).sum(axis=1) == used.sum(axis=1)))
    price = np.array([d.price_per_gpu_hour for d in view.domains])
    return _Split(
        parts,
        ok,
        (parts * view.peak_tflops[safe] * 1e12).sum(axis=1),
        (parts * price[safe]).sum(axis=1),
    )


def rated(view: ClusterView, domains: np.ndarray, dtype: str) -> np.ndarray:
    """Placements whose every accelerator has a rated peak in `dtype` (FP8, TF32, FP32 or BF16
    units some lack: V100 has no BF16): a plan never runs at a peak the catalog cannot give."""
    has = np.array([d.accelerator.rates(dtype) for d in view.domains])
    valid = domains >= 0
    return np.all(has[np.where(valid, domains, 0)] | ~valid, axis=1)


def why_no_plan(job: JobSpec, view: ClusterView, opts: SearchOptions) -> str:
    """Why no plan runs `job` on the free accelerators of `view`, said to the user: the first
    of too few accelerators, too few in any group of linked domains, no parallel plan its
    batch and range allow, too little memory ("" where none of these explains it)."""
    opts = in_precision(opts, job)
    rated = [i for i, d in enumerate(view.domains) if d.accelerator.rates(opts.dtype) and d.up]
    if not rated:
        return f": no domain that is up has accelerators rated in {opts.dtype.upper()}"
    free = {i: max(view.domains[i].available, 0) for i in rated}
    if job.gpus_min > sum(free.values()):
        return f": it needs at least {job.gpus_min}, and {sum(free.values())} are free"
    from scipy.sparse.csgraph import connected_components

    links = view.bandwidth_gbps[np.ix_(rated, rated)] > 0
    _, group = connected_components(links, directed=False)
    linked = int(np.bincount(group, weights=[free[i] for i in rated]).max())
    if job.gpus_min > linked:
        return (
            f": it needs at least {job.gpus_min}, more than any group of linked domains has "
            f"free ({linked}); domains with no link between them are never combined"
        )
    grid = parallel_grid(job.arch, job.global_batch, job.seq, job.gpus_max, opts)
    sizes = grid.plans.gpus
    if not (sizes >= job.gpus_min).any():
        return (
            f": no parallel plan of {job.gpus_min}-{job.gpus_max} accelerators "
            f"{'splits' if opts.uneven else 'divides'} its global batch of {job.global_batch} "
            f"and its {job.arch.layers} layers and {job.arch.heads} heads"
        )
    node = max(view.domains[i].node_gpus for i in rated)
    within = (sizes >= job.gpus_min) & (grid.plans.tp <= node)  # TP stays inside a node
    if not within.any():
        return (
            f": every parallel plan of {job.gpus_min}-{job.gpus_max} accelerators needs tensor "
            f"parallelism wider than the largest node ({node} accelerators)"
        )
    need = float(grid.memory_gib[within].min())
    room = max(view.domains[i].accelerator.memory_gib for i in rated)
    if need > room:
        wider = grid.memory_gib[sizes >= job.gpus_min].min()
        return (
            f": even its leanest plan (every memory saver, up to {job.gpus_max} accelerators, "
            f"tensor parallelism within a node of {node}) needs {need:.0f} GiB an accelerator, "
            f"more than the {room:.0f} GiB of the largest"
            + (
                f" (wider tensor parallelism would fit, {wider:.0f} GiB, on larger nodes)"
                if wider <= room
                else ""
            )
        )
    return ""


def unrated_note(view: ClusterView, dtype: str) -> str:
    """What a plan in `dtype` leaves out, said to the user: the domains whose accelerator the
    catalog rates no such peak for, and the precisions they have."""
    out = {
        d.accelerator.name: d.accelerator for d in view.domains if not d.accelerator.rates(dtype)
    }
    return "".join(
        f"; {dtype.upper()} plans leave out {name}, which has no {dtype.upper()} figure (it "
        f"has {', '.join(k for k in acc.rated_tflops if acc.rates(k))}: a job's `dtype` in "
        f"the scenario, or --dtype of `xds plan` and `xds estimate`, sets the precision)"
        for name, acc in out.items()
    )


def _take_est(est, keep):
    def pick(parts):
        return {k: v[keep] for k, v in parts.items()}

    return replace(
        est,
        step_time_s=est.step_time_s[keep],
        breakdown_s=pick(est.breakdown_s),
        overlapped_s=pick(est.overlapped_s),
        memory_gib=est.memory_gib[keep],
        memory_parts_gib=pick(est.memory_parts_gib),
        fits=est.fits[keep],
        hardware_flops=est.hardware_flops[keep],
        cross_domain_bytes=est.cross_domain_bytes[keep],
    )


def candidate_key(ev: Evaluated, i: int) -> tuple:
    """Its placement and parallel shape: candidates alike here differ only in finer choices."""
    p = ev.plans
    return (int(ev.place[i]), int(p.dp[i]), int(p.tp[i]), int(p.pp[i]), int(p.cp[i]))


def distinct(ev: Evaluated, order: np.ndarray, k: int) -> list[int]:
    """The first k candidates in `order` that differ in placement or parallel shape."""
    seen, out = set(), []
    for i in order:
        key = candidate_key(ev, int(i))
        if key not in seen:
            seen.add(key)
            out.append(int(i))
            if len(out) == k:
                break
    return out


def _estimate_at(
    est: StepEstimate, i: int, wan_price_per_gb: float, objective: Objective | None = None
) -> Estimate:
    """Row i of a batch estimate."""
    return Estimate(
        step_time_s=float(est.step_time_s[i]),
        breakdown_s={k: float(v[i]) for k, v in est.breakdown_s.items()},
        overlapped_s={k: float(v[i]) for k, v in est.overlapped_s.items()},
        memory_gib_per_gpu=float(est.memory_gib[i]),
        cross_domain_bytes_per_step=float(est.cross_domain_bytes[i]),
        wan_price_per_gb=float(wan_price_per_gb),
        tokens_per_step=float(est.tokens),
        objective=objective,
    )


def placement_at(
    ev: Evaluated,
    i: int,
    view: ClusterView,
    job: JobSpec,
    explanation: str = "",
    decision_ms: float = 0.0,
) -> Placement:
    """Candidate i as a placement with its estimate: its domains in slot order (stage order for
    a pipeline), those it takes nothing in left out."""
    slots = ev.placements.domains[ev.place[i]]
    kind = str(ev.placements.kind[ev.place[i]])
    members = [
        (int(s), int(ev.gpus[i, j]), int(ev.shares[i, j]))
        for j, s in enumerate(slots)
        if s >= 0 and ev.gpus[i, j] > 0
    ]
    objective = Objective(**{k: float(v[i]) for k, v in ev.terms.items()})
    split = tuple(x for *_, x in members)
    return Placement(
        job.name,
        kind,
        tuple(d for d, *_ in members),
        tuple(g for _, g, _ in members),
        ev.plans.plan(i),
        tuple(view.domains[d].name for d, *_ in members),
        _estimate_at(ev.est, i, ev.wan_price_per_gb[i], objective),
        explanation=explanation,
        decision_ms=decision_ms,
        split=split if any(split) else (),
    )


def described(view: ClusterView, placements: list[Placement]) -> Placements:
    """What placements already made ask of the hardware and the WAN (`describe_placements`),
    with the stages each domain holds, which a pipeline's waits depend on."""
    width = max(len(p.domains) for p in placements)

    def padded(rows, fill: int) -> np.ndarray:
        return np.array([list(r) + [fill] * (width - len(r)) for r in rows])

    kind = np.array([p.kind for p in placements], dtype=object)
    pl = describe_placements(view, kind, padded((p.domains for p in placements), -1))
    stages = padded((p.stages_per_domain for p in placements), 0)
    return replace(pl, wan=with_stage_counts(pl.wan, kind, stages))


def estimate_placement(
    p: Placement, job: JobSpec, view: ClusterView, opts: SearchOptions = DEFAULT_OPTIONS
) -> Estimate:
    """A placement's estimate under the view's links now (the search's, for a placement it did
    not make, or after the links changed), with the software stack and constants of `opts`."""
    pl = described(view, [p])
    plans = PlanBatch.of([p.plan])
    hw = pl.hardware
    if p.split:  # split by speed: the pace its own split keeps
        hw = split_hardware(
            job, view, p.kind == PIPELINE, plans, pl.domains, np.array([p.split]), hw, opts
        )
    est = estimate(
        job.arch,
        job.global_batch,
        plans,
        hw,
        pl.wan,
        opts.stack,
        opts.calibration,
        seq=job.seq,
        measured=opts.layers,
        network=opts.network,
    )
    return _estimate_at(est, 0, pl.wan_price_per_gb[0])


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def describe(c: Placement) -> str:
    """One line a person can read: where the job runs and how it is split."""
    p = c.plan
    stages = c.stage_to_domain
    where = {
        SINGLE: f"inside {c.names[0]}",
        PIPELINE: "pipeline over "
        + "→".join(f"{d} ({counted(stages.count(d), 'stage')})" for d in c.names),
        DATA: "replicas over " + "+".join(c.names),
    }[c.kind]
    extra = f", DiLoCo sync every {p.diloco_h} steps" if p.diloco_h else ""
    if c.split:  # by speed: more layers a stage, or micro-batches a replica, on faster domains
        unit = "layers a stage" if c.kind == PIPELINE else "micro-batches a replica"
        where += (
            " ("
            + ", ".join(f"{n} {x}" for n, x in zip(c.names, c.split, strict=True))
            + f" {unit}, in proportion to speed)"
        )
    return (
        f"{where}: TP {p.tp} × PP {p.pp} × DP {p.dp}"
        + (f" × CP {p.cp}" if p.cp > 1 else "")
        + f" on {p.gpus} GPUs, micro-batch {p.micro_batch}"
        + (f", {p.vp} virtual stages" if p.vp > 1 else "")
        + f", ZeRO-{p.zero}, recompute {p.recompute}{extra}"
    )


def explain(
    job: JobSpec, best: Placement, runner: Placement | None, weights: Weights, view: ClusterView
) -> dict:
    """Why the chosen plan wins: what crosses the WAN, and the objective term by term."""
    p, names, wan_gb = best.plan, best.names, best.estimated.cross_domain_gb_per_step
    facts = [f"TP {p.tp} stays inside one node" if p.tp > 1 else "no tensor parallelism"]
    if best.kind == SINGLE:
        facts.append(f"the whole job runs inside {names[0]}: nothing crosses the WAN")
    elif not view.over_wan(best.domains):
        facts.append(
            f"the whole job runs inside one data centre, across its pools {', '.join(names)} "
            "on its own network: nothing crosses the WAN"
        )
    elif best.kind == PIPELINE:
        every = view.names
        hops = "; ".join(f"{every[a]}→{every[b]}" for a, b in view.wan_links(best))
        facts.append(
            f"data-parallel gradients are reduced inside each domain; the WAN is crossed only "
            f"at pipeline boundaries ({hops}), {wan_gb:.2f} GB per step"
        )
    elif p.diloco_h:
        facts.append(
            f"replicas in {', '.join(names)} reduce gradients inside their "
            f"domain every step and synchronise over the WAN with DiLoCo every "
            f"{p.diloco_h} steps ({wan_gb:.2f} GB per step)"
        )
    else:
        facts.append(
            f"data-parallel gradients are all-reduced across "
            f"{', '.join(names)} over the WAN every step "
            f"({wan_gb:.2f} GB per step)"
        )
    summary = f"{job.name}: {describe(best)}; " + "; ".join(facts) + "."
    if runner is None:
        return {"summary": summary + " It is the only feasible shape.", "terms": {}}
    w = {
        "efficiency": weights.efficiency,
        "utilization": weights.utilization,
        "cost": -weights.cost,
    }
    terms: dict[str, dict[str, float]] = {}
    for term, weight in w.items():
        a, b = getattr(best.scored, term), getattr(runner.scored, term)
        terms[term] = {"chosen": a, "runner_up": b, "weighted_delta": weight * (a - b)}
    step, runner_step = best.estimated.step_time_s, runner.estimated.step_time_s
    terms["step_time_s"] = {"chosen": step, "runner_up": runner_step}
    lead = max(terms, key=lambda k: terms[k].get("weighted_delta", -np.inf))
    gain = best.scored.objective - runner.scored.objective
    summary += (
        f" It beats the runner-up ({describe(runner)}) by {gain:.3f} in R, "
        f"mostly on {lead} (step {step:.2f} s vs {runner_step:.2f} s)."
    )
    return {"summary": summary, "terms": terms, "runner_up": describe(runner)}
