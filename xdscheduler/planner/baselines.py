"""The schedulers a user would run instead: today's FIFO, Slurm-style EASY backfill, Kueue-style
gang admission, and a fair greedy spread over domains.

All decide in the queue's order (priority, then arrival). Where the real system would tune the
parallel plan (a backfilled Slurm job, an admitted gang, a greedy spread), the plan is the
fastest the cost model finds for the accelerators given (`fastest_on`); only FIFO keeps
Megatron's default plan, as most submissions do today. None of them re-plans running jobs.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace

import numpy as np

from xdscheduler.costmodel.memory import memory_gib
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import (
    THROUGHPUT_ONLY,
    JobSpec,
    evaluate_space,
    placement_at,
    uneven_if_needed,
)
from xdscheduler.planner.space import DATA, SINGLE, SearchOptions, describe_placements, even_grid
from xdscheduler.planner.view import ClusterView

# The online grid: studies decide thousands of times, so the even grid (the yardstick,
# IDEAL_OPTIONS, searches the same kinds of plans) with micro-batches of 1-2, which cover
# nearly all of the best plans and halve the candidates; replicas across domains may sync
# every step or, DiLoCo-style, every 100.
ONLINE = replace(even_grid(SearchOptions(diloco_h=(0, 100))), micro_batch=(1, 2))


def megatron_default(
    job: JobSpec, gpus: int, hw: Hardware, stack: Stack | None = None
) -> Plan | None:
    """TP 8 inside a node (fewer where the node or the job has fewer accelerators), the least
    PP that fits memory, the rest DP (Megatron's recipe)."""
    arch = job.arch
    tp = next(
        t
        for t in (8, 4, 2, 1)
        if t <= min(hw.gpus_per_node, gpus) and arch.heads % t == 0 and arch.kv_heads % t == 0
    )
    for recompute in ("none", "full"):
        for pp in (p for p in range(1, arch.layers + 1) if arch.layers % p == 0):
            dp = gpus // (tp * pp)
            while dp > 0 and job.global_batch % dp:
                dp -= 1
            if dp == 0:
                break
            plan = Plan(dp=dp, tp=tp, pp=pp, recompute=recompute)
            mem = memory_gib(arch, job.global_batch, PlanBatch.of([plan]), stack, job.seq)
            if sum(v[0] for v in mem.values()) <= hw.memory_gib:
                return plan
    return None


def fastest_on(
    job: JobSpec,
    view: ClusterView,
    gpus: dict[int, int],
    least: int | None = None,
    kinds: tuple[str, ...] = (SINGLE,),
) -> Placement | None:
    """The fastest plan of `job` on exactly the accelerators `gpus` (domain -> count) offers,
    using at least `least` of them (default: the job's minimum); None if none fits."""
    total = sum(gpus.values())
    least = job.gpus_min if least is None else least
    if total < least:
        return None
    offered = view.with_free({view.names[i]: gpus.get(i, 0) for i in range(len(view.domains))})
    sized = replace(job, gpus_min=least, gpus_max=min(job.gpus_max, total))
    # over domains of different speeds, work split by speed: the fastest plan for what it takes
    spread = replace(ONLINE, max_domains=max(len(gpus), 1), kinds=kinds, balance=len(gpus) > 1)
    opts = uneven_if_needed(job, view, spread)
    ev = evaluate_space(sized, offered, THROUGHPUT_ONLY, opts)
    # the fastest: the first best, as `search` ranks (no ranking, alternatives or text needed)
    return (
        None
        if ev is None
        else placement_at(ev, int(np.argmax(ev.terms["objective"])), offered, sized)
    )


def _hardware(view: ClusterView, members: list[int]) -> Hardware:
    pl = describe_placements(view, np.array([SINGLE], dtype=object), np.array([members]))
    return pl.hardware.one(0)


def _timed(p: Placement, start: float, why: str) -> Placement:
    ms = (time.perf_counter() - start) * 1000
    return replace(p, explanation=why, decision_ms=ms)


class _NoReplans:
    single_domain = True

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        return None


@dataclass
class FifoSingleDomain(_NoReplans):
    """Today's practice: strict FIFO, each job inside one domain, the first with room for all it
    asks, on Megatron's default plan. The head of the queue waits until a domain can hold it."""

    name: str = "fifo-single-domain"
    stack: Stack | None = None

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = [d.available for d in view.domains]
        largest = max(d.schedulable for d in view.domains)
        out = []
        for job in queue:
            start = time.perf_counter()
            want = min(job.gpus_max, largest)
            if want < job.gpus_min:
                continue  # no domain will ever hold it: refused, not waited for
            fit = next((i for i, f in enumerate(free) if f >= want), None)
            if fit is None:
                break  # FIFO: nobody overtakes the head of the queue
            plan = megatron_default(job, want, _hardware(view, [fit]), self.stack)
            if plan is None or plan.gpus < job.gpus_min:
                continue  # Megatron's recipe has no plan of its size there: passed over
            free[fit] -= plan.gpus
            out.append(
                Placement(
                    job.name,
                    SINGLE,
                    (fit,),
                    (plan.gpus,),
                    plan,
                    (view.domains[fit].name,),
                    explanation="first domain with room, Megatron default plan",
                    decision_ms=(time.perf_counter() - start) * 1000,
                )
            )
        return out


@dataclass
class BackfillSingleDomain(_NoReplans):
    """Slurm's EASY backfill: each job asks for its maximum (at most a domain's share), in the
    domain that fits it most tightly, on the fastest plan for that size. A head that does not
    fit gets a reservation at the earliest time a domain will hold it (from the running jobs'
    expected ends); later jobs start now only when they cannot delay it: they end before it, or
    leave it room."""

    name: str = "backfill-single-domain"

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = np.array([d.available for d in view.domains])
        largest = max(d.schedulable for d in view.domains)
        out, reservation = [], None  # (domain, time, accelerators beyond the head's)
        for job in queue:
            start = time.perf_counter()
            want = min(job.gpus_max, largest)
            fits = [i for i in np.argsort(free, kind="stable") if free[i] >= want]
            placed = None
            for d in fits:
                p = fastest_on(job, view, {int(d): want}, least=want) or fastest_on(
                    job, view, {int(d): want}
                )
                if p is not None and (reservation is None or _keeps(reservation, p, job, now_s)):
                    placed = p
                    break
            if placed is not None:
                free[list(placed.domains)] -= placed.gpus
                if reservation is not None:
                    reservation = _after(reservation, placed, job, now_s)
                out.append(
                    _timed(
                        placed,
                        start,
                        "backfilled: best-fit domain, fastest plan for the size it asks"
                        if reservation
                        else "best-fit domain, fastest plan for the size it asks",
                    )
                )
            elif reservation is None:
                reservation = _reserve(want, free, view, now_s)
        return out


def _reserve(
    want: int, free: np.ndarray, view: ClusterView, now_s: float
) -> tuple[int, float, int] | None:
    """The domain that will first hold `want` accelerators as running jobs end, when, and how
    many it will have beyond them then."""
    best = None
    for d in range(len(view.domains)):
        if not view.domains[d].up:
            continue
        points = itertools.chain([(now_s, int(free[d]))], view.freeing(d, int(free[d])))
        at, have = next(((t, n) for t, n in points if n >= want), (None, 0))
        if at is not None and (best is None or at < best[1]):
            best = (d, at, have - want)
    return best


def _ends_s(p: Placement, job: JobSpec, now_s: float) -> float:
    """When the job would finish on p, by the model's estimate (Slurm's is the user's limit)."""
    assert p.estimate is not None, "a planned placement carries its estimate"
    return now_s + job.tokens / p.estimate.tokens_per_s


def _keeps(reservation: tuple[int, float, int], p: Placement, job: JobSpec, now_s: float) -> bool:
    """A backfilled placement delays no reservation: elsewhere, done before it, or within the
    accelerators the reserved domain will have to spare."""
    d, at, spare = reservation
    return d not in p.domains or _ends_s(p, job, now_s) <= at or p.taken[d] <= spare


def _after(
    reservation: tuple[int, float, int], p: Placement, job: JobSpec, now_s: float
) -> tuple[int, float, int]:
    """The reservation once p is backfilled: still running then, it uses up some spare."""
    d, at, spare = reservation
    if d in p.domains and _ends_s(p, job, now_s) > at:
        spare -= p.taken[d]
    return d, at, spare


@dataclass
class GangSingleDomain(_NoReplans):
    """Kueue/Volcano gang admission: a job is admitted whole, at any size between its minimum
    and its maximum (the largest a domain can hold now, in the domain with the most room that
    runs it), on the fastest plan for that size; best-effort FIFO: a job that cannot be
    admitted does not block the ones behind it."""

    name: str = "gang-single-domain"

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = np.array([d.available for d in view.domains])
        out = []
        for job in queue:
            start = time.perf_counter()
            p = _in_most_room(job, view, free)
            if p is not None:
                free[p.domains[0]] -= p.total_gpus
                out.append(
                    _timed(
                        p,
                        start,
                        "gang admitted at the largest size a domain holds now, fastest plan",
                    )
                )
        return out


def _in_most_room(job: JobSpec, view: ClusterView, free: np.ndarray) -> Placement | None:
    """The fastest plan at the most the domain with the most room holds (up to the job's
    maximum), or in the next such domain where none runs there (a V100 domain has no BF16
    plan); None where no domain holds the job's minimum."""
    for d in np.argsort(-free, kind="stable"):
        if free[d] < job.gpus_min:
            return None
        p = fastest_on(job, view, {int(d): int(min(job.gpus_max, free[d]))})
        if p is not None:
            return p
    return None


@dataclass
class GreedyCrossDomain(_NoReplans):
    """A fair greedy: each job inside one domain whenever one can hold its minimum (the domain
    with the most room, up to its maximum); otherwise spread over the domains with the most
    room, replicas reducing gradients inside each domain and across them over the WAN
    (hierarchical data parallelism). The fastest plan for what it takes; it never waits for a
    better allocation and never re-plans."""

    name: str = "greedy-cross-domain"
    single_domain = False

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        free = np.array([d.available for d in view.domains])
        out = []
        for job in queue:
            start = time.perf_counter()
            p, why = self._place(job, view, free)
            if p is not None:
                free[list(p.domains)] -= p.gpus
                out.append(_timed(p, start, why))
        return out

    def _place(
        self, job: JobSpec, view: ClusterView, free: np.ndarray
    ) -> tuple[Placement | None, str]:
        """The placement (None: none now) and why."""
        order = [int(i) for i in np.argsort(-free, kind="stable") if free[i] > 0]
        if not order or free.sum() < job.gpus_min:
            return None, ""
        if free[order[0]] >= job.gpus_min:
            return _in_most_room(job, view, free), "inside the domain with the most room"
        taken, total = {}, 0
        for i in order:  # the most room first, until the minimum is met
            taken[i] = int(min(free[i], job.gpus_max - total))
            total += taken[i]
            if total >= job.gpus_min:
                break
        return (
            fastest_on(job, view, taken, kinds=(DATA,)),
            "spread over the domains with the most room, hierarchical data parallelism",
        )
