"""Work split by speed across domains of different accelerators: a pipeline's stages take
layers, and replicas take micro-batches, in proportion to how fast their accelerators are, so
the slowest domain no longer sets the pace of all."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.costmodel.plan import Hardware, PlanBatch
from xdscheduler.planner.space import domain_speeds
from xdscheduler.planner.view import ClusterView

if TYPE_CHECKING:
    from xdscheduler.planner.search import JobSpec


def balanced_pace(total: np.ndarray, counts: np.ndarray, speeds: np.ndarray,
                  rounds: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """`total` whole units (layers, samples) over groups of counts[:, i] workers of speed
    speeds[:, i], every worker of a group taking as many: the units each worker of a group
    takes (N, k) and the pace, the largest units/speed of any worker (N,), as small as it
    gets. By hand: 80 layers over 2 stages of speed 2 and 2 of speed 1 are 27, 27, 13, 13
    (pace 13.5).

    Bisects on the pace: at pace T a worker of speed s takes floor(T·s) units.
    """
    used = counts > 0
    c, s = np.where(used, counts, 0).astype(float), np.where(used, speeds, 1.0)
    lo = np.zeros(len(total))
    hi = np.ceil(total / np.maximum(c.sum(axis=1), 1)) / np.where(used, s, np.inf).min(axis=1)
    for _ in range(rounds):
        mid = (lo + hi) / 2
        ok = (c * np.floor(mid[:, None] * s + 1e-9)).sum(axis=1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    units = np.where(used, np.floor(hi[:, None] * s + 1e-9), 0.0)
    return units, np.where(used, units / s, 0.0).max(axis=1)


def balanced(job: JobSpec, view: ClusterView, staged: np.ndarray, plans: PlanBatch,
             slots: np.ndarray, parts: np.ndarray,
             hw: Hardware) -> tuple[Hardware, np.ndarray, np.ndarray]:
    """Candidates over domains of different speeds with layers (pipeline stages) or
    micro-batches (replicas) in proportion to speed: the hardware that keeps their pace, the
    units each worker of a slot takes, and which candidates these are."""
    used = slots >= 0
    speed = (view.peak_tflops * view.speed)[np.where(used, slots, 0)]
    slowest = np.where(used, speed, np.inf).min(axis=1)
    faster = (np.where(used, speed, slowest[:, None]) > slowest[:, None]).any(axis=1)
    mixed = np.flatnonzero(((parts > 0).sum(axis=1) > 1) & faster)
    shares = np.zeros(parts.shape)
    if not len(mixed):
        return hw, shares, mixed
    # stages over domains split the layers; replicas over domains the micro-batches of a step
    pipeline = staged[mixed]
    workers = np.where(pipeline, plans.pp[mixed], plans.dp[mixed])
    total = np.where(pipeline, job.arch.layers,
                     -(-job.global_batch // plans.micro_batch[mixed])).astype(float)
    shares[mixed], _ = balanced_pace(total, parts[mixed], speed[mixed])
    # Each slot's workers at even shares keep the pace of their own share on their own
    # accelerator: its speeds scaled by even/own. The field-wise slowest of the slots is the
    # hardware that paces the step (peaks alone set the split; a slot richer in memory
    # bandwidth per FLOP than another must not lend it what it lacks).
    even = (total / workers)[:, None]
    scale = even / np.maximum(shares[mixed], 1.0)
    held = used[mixed] & (parts[mixed] > 0)
    fields = {k: np.asarray(v, dtype=float) * np.ones(len(parts))
              for k, v in hw.__dict__.items()}
    for k, per_domain in domain_speeds(view).items():
        paced = np.where(held, per_domain[np.where(used, slots, 0)][mixed] * scale, np.inf)
        fields[k][mixed] = paced.min(axis=1)
    return Hardware(**fields), shares, mixed


def stages_fit(job: JobSpec, view: ClusterView, pipeline: np.ndarray, plans: PlanBatch, est,
               slots: np.ndarray, shares: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A balanced pipeline's stages hold layers in proportion to speed: each stage's memory
    (the estimate's, scaled by its layers over the even share) within its own accelerator's."""
    even = job.arch.layers / plans.pp[rows]
    scale = np.where(pipeline[:, None], shares / even[:, None], 1.0)
    memory = np.array([d.accelerator.memory_gib for d in view.domains])
    limit = np.where(slots >= 0, memory[np.where(slots >= 0, slots, 0)], np.inf)
    need = est.memory_gib[rows][:, None] * np.maximum(scale, 0.0)
    return ((need <= limit) | (shares == 0)).all(axis=1)
