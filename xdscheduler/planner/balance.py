"""Work split by speed across domains of different accelerators: a pipeline's stages take
layers, and replicas take micro-batches, in proportion to how fast their accelerators are, so
the slowest domain no longer sets the pace of all."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.catalog import accelerator_code
from xdscheduler.costmodel.plan import Hardware, PlanBatch
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.planner.space import (
    SINGLE,
    SearchOptions,
    describe_placements,
    domain_speeds,
    take_rows,
)
from xdscheduler.planner.view import ClusterView

if TYPE_CHECKING:
    from xdscheduler.planner.spec import JobSpec


def balanced_pace(
    total: np.ndarray, counts: np.ndarray, speeds: np.ndarray, rounds: int = 40
) -> tuple[np.ndarray, np.ndarray]:
    """`total` whole units (layers, samples) over groups of counts[:, i] workers of speed
    speeds[:, i], every worker of a group taking as many: the units each worker of a group
    takes (N, k) and the pace, the largest units/speed of any worker (N,), as small as it
    gets. By hand: 80 layers over 2 stages of speed 2 and 2 of speed 1 are 27, 27, 13, 13
    (pace 13.5).

    Bisects on the pace: at pace T a worker of speed s takes floor(T·s) units, and one at the
    least: a stage without a layer or a replica without a sample would hold its accelerators
    for nothing.
    """
    used = counts > 0
    c, s = np.where(used, counts, 0).astype(float), np.where(used, speeds, 1.0)

    def taken(pace: np.ndarray) -> np.ndarray:
        return np.maximum(np.floor(pace[:, None] * s + 1e-9), 1.0)

    lo = np.zeros(len(total))
    hi = np.ceil(total / np.maximum(c.sum(axis=1), 1)) / np.where(used, s, np.inf).min(axis=1)
    for _ in range(rounds):
        mid = (lo + hi) / 2
        ok = (c * taken(mid)).sum(axis=1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    units = np.where(used, taken(hi), 0.0)
    return units, np.where(used, units / s, 0.0).max(axis=1)


def slot_speeds(
    job: JobSpec,
    view: ClusterView,
    plans: PlanBatch,
    plan_id: np.ndarray,
    slots: np.ndarray,
    held: np.ndarray,
    opts: SearchOptions,
) -> np.ndarray:
    """How fast each held slot's accelerator runs these plans: 1 / the model's own time for a
    replica's or a stage's work on it, so memory-bound parts, slow links inside a node and
    every peak count as the model counts them (peaks alone overrate a chip poor in memory
    bandwidth). Each distinct (plan, domain) is estimated once."""
    domain = np.where(held, slots, 0)
    key = plan_id[:, None] * len(view.domains) + domain
    _, first, back = np.unique(key[held], return_index=True, return_inverse=True)
    rows, doms = np.nonzero(held)[0][first], domain[held][first]
    alone = describe_placements(
        view,
        np.full(len(view.domains), SINGLE, dtype=object),
        np.arange(len(view.domains))[:, None],
    ).hardware
    est = estimate(
        job.arch,
        job.global_batch,
        plans.take(rows),
        take_rows(alone, doms),
        stack=opts.stack,
        calib=opts.calibration,
        seq=job.seq,
        measured=opts.layers,
        network=opts.network,
    )
    parts = est.breakdown_s
    busy = parts["compute"] + parts["recompute"] + parts["tp_comm"]
    speed = np.ones(slots.shape)
    speed[held] = (1.0 / busy)[back]
    return speed


def balanced(
    job: JobSpec,
    view: ClusterView,
    staged: np.ndarray,
    plans: PlanBatch,
    plan_id: np.ndarray,
    slots: np.ndarray,
    parts: np.ndarray,
    hw: Hardware,
    opts: SearchOptions,
) -> tuple[Hardware, np.ndarray, np.ndarray]:
    """Candidates over domains of different speeds with layers (pipeline stages) or
    micro-batches (replicas) in proportion to speed: the hardware that keeps their pace, the
    units each worker of a slot takes, and which candidates these are. `plan_id` names each
    candidate's parallel plan (equal ids: equal plans)."""
    held = (slots >= 0) & (parts > 0)
    multi = np.flatnonzero(held.sum(axis=1) > 1)
    shares = np.zeros(parts.shape)
    if not len(multi):
        return hw, shares, multi
    speed = slot_speeds(
        job, view, plans.take(multi), plan_id[multi], slots[multi], held[multi], opts
    )
    low = np.where(held[multi], speed, np.inf).min(axis=1)
    differ = np.where(held[multi], speed, 0.0).max(axis=1) > low * (1 + 1e-9)
    mixed, speed, held = multi[differ], speed[differ], held[multi][differ]
    if not len(mixed):
        return hw, shares, mixed
    # stages over domains split the layers; replicas over domains the micro-batches of a step
    total, workers = units_of(job, staged[mixed], plans.take(mixed))
    shares[mixed], _ = balanced_pace(total, parts[mixed], speed)
    return paced(view, mixed, total / workers, slots, shares, speed, hw), shares, mixed


def units_of(job: JobSpec, staged: np.ndarray, plans: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
    """What a split by speed shares out and among how many workers: a pipeline's layers among
    its stages, or a step's micro-batches among its replicas."""
    total = np.where(staged, job.arch.layers, -(-job.global_batch // plans.micro_batch))
    return total.astype(float), np.where(staged, plans.pp, plans.dp).astype(float)


def split_hardware(
    job: JobSpec,
    view: ClusterView,
    staged: bool,
    plan: PlanBatch,
    slots: np.ndarray,
    split: np.ndarray,
    hw: Hardware,
    opts: SearchOptions,
) -> Hardware:
    """The hardware that keeps the pace of one plan (a batch of one) split by speed as given:
    `split[0, j]` units a worker of slot j (a placement's own split, timed again)."""
    held = (slots >= 0) & (split > 0)
    speed = slot_speeds(job, view, plan, np.zeros(1, dtype=int), slots, held, opts)
    total, workers = units_of(job, np.array([staged]), plan)
    return paced(view, np.arange(1), total / workers, slots, split.astype(float), speed, hw)


def paced(
    view: ClusterView,
    rows: np.ndarray,
    even: np.ndarray,
    slots: np.ndarray,
    shares: np.ndarray,
    speed: np.ndarray,
    hw: Hardware,
) -> Hardware:
    """`hw` with each of `rows` (split by speed: `shares` units a worker of each slot, where
    an even split gives `even`, the slots running at `speed`) the hardware that keeps its
    pace. The slot that finishes last (most units for its speed) paces the step: its
    accelerator, its rated speeds scaled by even/own share, takes as long at even shares, and
    so does its profile, its times scaled the other way."""
    held = (slots[rows] >= 0) & (shares[rows] > 0)
    at = np.arange(len(rows))
    pacer = np.where(held, shares[rows] / speed, -1.0).argmax(axis=1)
    lead = slots[rows][at, pacer]
    scale = even / shares[rows][at, pacer]
    fields = {
        k: np.asarray(v, dtype=float) * np.ones(len(slots))
        for k, v in hw.__dict__.items()
        if k != "members"
    }
    for k, per_domain in domain_speeds(view).items():
        fields[k][rows] = per_domain[lead] * scale
    code = np.array([accelerator_code(d.accelerator.name) for d in view.domains], dtype=float)
    fields["accelerator"][rows] = code[lead]
    fields["measured_scale"][rows] = 1.0 / (scale * view.speed[lead])
    members = None if hw.members is None else np.array(hw.members, dtype=float)
    if members is not None:
        members[rows] = -1.0  # the pacer's own profile stands
    return Hardware(**fields, members=members)


def stages_fit(
    job: JobSpec,
    view: ClusterView,
    pipeline: np.ndarray,
    plans: PlanBatch,
    est,
    slots: np.ndarray,
    shares: np.ndarray,
    rows: np.ndarray,
) -> np.ndarray:
    """A balanced pipeline's stages hold layers in proportion to speed: each stage's memory
    (the estimate's, scaled by its layers over the even share) within its own accelerator's."""
    even = job.arch.layers / plans.pp[rows]
    scale = np.where(pipeline[:, None], shares / even[:, None], 1.0)
    memory = np.array([d.accelerator.memory_gib for d in view.domains])
    limit = np.where(slots >= 0, memory[np.where(slots >= 0, slots, 0)], np.inf)
    need = est.memory_gib[rows][:, None] * np.maximum(scale, 0.0)
    return ((need <= limit) | (shares == 0)).all(axis=1)
