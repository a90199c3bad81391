"""Compute index: one number per accelerator and task that makes architectures comparable.

A task's sensitivity to each capability is the elasticity of its step time to that
capability on the reference accelerator: a plan that spends 70% of its step in GEMMs has
sensitivity 0.7 to matrix throughput. The time a plan would take elsewhere is then
T_ref·Σ_k w_k·c_ref,k / c_k. Tasks adapt their plan to the hardware (no tensor parallelism
over PCIe, more pipeline stages where memory is small), so the index keeps the sensitivities
of several good plans of the task, the reference's top plans and its best plan under each
target's memory and interconnect, and takes the best prediction among plans that fit:
index = max_p T_best / T_p(acc), with T_p(acc) integrated from the elasticities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from xdscheduler import catalog
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import THROUGHPUT_ONLY, JobSpec, search
from xdscheduler.planner.view import ClusterView, DomainView

# The capabilities a task can be sensitive to: Hardware field -> accelerator attribute.
CAPABILITIES = {
    "matrix_tflops": ("peak_tflops", "half_tflops"),
    "memory_bandwidth": ("memory_gbs", "memory_gbs"),
    "scaleup_bandwidth": ("scaleup_gbs", "scaleup_gbs"),
    "scaleout_bandwidth": ("scaleout_gbps", "scaleout_gbps"),
}
STEP = 1.01  # 1% perturbation for the elasticities


def task(arch: catalog.ModelArch, gpus: int) -> JobSpec:
    """The training task an index is for: the model on `gpus` accelerators, 2M-token steps."""
    batch = max(2 ** round(math.log2(max(2**21 // arch.seq_len, 1))), gpus // 8, 1)
    return JobSpec(arch.name, arch, batch, arch.seq_len, gpus, gpus)


def _search(job: JobSpec, acc: catalog.Accelerator, top_k: int) -> list[Placement]:
    view = ClusterView(
        (DomainView("domain", acc, job.gpus_max, acc.scaleup_gbs, acc.scaleout_gbps, 1.0),),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
    )
    try:
        result = search(job, view, THROUGHPUT_ONLY, top_k=top_k, pareto=False)
    except UserError:
        return []
    return [result.best, *result.alternatives]


def best_plan(job: JobSpec, acc: catalog.Accelerator) -> Placement | None:
    """The fastest plan of `job` on one domain of `acc`, or None if nothing fits."""
    found = _search(job, acc, 0)
    return found[0] if found else None


@dataclass(frozen=True)
class PlanSensitivity:
    job: JobSpec
    plan: Plan
    step_s: float
    memory_gib: float
    weights: dict[str, float]

    def predicted_s(self, acc: catalog.Accelerator, ref: catalog.Accelerator) -> float:
        """Integrate d ln T = Σ_k w_k·d ln(1/c_k) from `ref` to `acc`, with the elasticities
        taken halfway (midpoint rule): exact for a plan whose parts each scale with one
        capability, and close when overlap shifts the balance on the way."""
        mid = _hardware(
            {k: math.sqrt(getattr(ref, a) * getattr(acc, a)) for k, (_, a) in CAPABILITIES.items()},
            ref,
        )
        weights = elasticities(self.job, self.plan, mid)
        log_ratio = sum(
            weights[k] * math.log(getattr(ref, a) / getattr(acc, a))
            for k, (_, a) in CAPABILITIES.items()
        )
        return self.step_s * math.exp(log_ratio)


def _hardware(capabilities: dict[str, float], base: catalog.Accelerator) -> Hardware:
    fields = {CAPABILITIES[k][0]: v for k, v in capabilities.items()}
    return replace(Hardware.of(base), **fields)


def elasticities(job: JobSpec, plan: Plan, hw: Hardware) -> dict[str, float]:
    """−d ln T / d ln c_k for each capability, by a 1% step."""
    plans = PlanBatch.of([plan])

    def time(h: Hardware) -> float:
        return float(estimate(job.arch, job.global_batch, plans, h, seq=job.seq).step_time_s[0])

    base = time(hw)
    return {
        name: math.log(base / time(replace(hw, **{field: getattr(hw, field) * STEP})))
        / math.log(STEP)
        for name, (field, _) in CAPABILITIES.items()
    }


def sensitivity(
    job: JobSpec, plan: Plan, ref: catalog.Accelerator, memory_gib: float
) -> PlanSensitivity:
    hw = Hardware.of(ref)
    step = float(
        estimate(job.arch, job.global_batch, PlanBatch.of([plan]), hw, seq=job.seq).step_time_s[0]
    )
    return PlanSensitivity(job, plan, step, memory_gib, elasticities(job, plan, hw))


def task_plans(
    job: JobSpec, ref: catalog.Accelerator, targets: list[catalog.Accelerator], top_k: int = 8
) -> list[PlanSensitivity]:
    """The reference's top plans, and its best plan under each target's structural limits.

    Memory capacity and interconnect decide which plans are possible or sensible (no TP over
    PCIe, more stages where memory is small), so the reference is re-planned with each
    target's memory and links; throughput-like capabilities enter through elasticities.
    """
    found = _search(job, ref, top_k)
    limits = {(a.memory_gib, a.scaleup_gbs, a.scaleout_gbps) for a in targets}
    limits |= {(gib, ref.scaleup_gbs, ref.scaleout_gbps) for gib, _, _ in limits}
    for gib, up, out in sorted(limits):
        found += _search(job, replace(ref, memory_gib=gib, scaleup_gbs=up, scaleout_gbps=out), 0)
    if not found:
        raise UserError(
            f"{job.name} does not fit on {job.gpus_max} × {ref.name}; "
            "use more --gpus or another --reference"
        )
    unique = {c.plan: c for c in found}
    return [sensitivity(job, p, ref, c.estimated.memory_gib_per_gpu) for p, c in unique.items()]


def compute_index(
    arch: catalog.ModelArch,
    accelerators: list[str] | None = None,
    reference: str = "H100-SXM",
    gpus: int = 64,
    check: bool = True,
) -> dict:
    """Index per accelerator for training `arch` on `gpus` of them; with `check`, the
    throughput ratio of each accelerator's own best plan beside it."""
    ref = catalog.accelerator(reference)
    job = task(arch, gpus)
    accs = [catalog.accelerator(n) for n in accelerators or catalog.ACCELERATORS]
    plans = task_plans(job, ref, accs)
    best_s = min(p.step_s for p in plans if p.memory_gib <= ref.memory_gib)
    lead = min(plans, key=lambda p: p.step_s if p.memory_gib <= ref.memory_gib else math.inf)
    rows = {}
    for acc in accs:
        fitting = [p.predicted_s(acc, ref) for p in plans if p.memory_gib <= acc.memory_gib]
        index = best_s / min(fitting) if fitting else 0.0
        row: dict[str, float | None] = {"index": index}
        if check:
            own = best_plan(job, acc)
            ratio = None if own is None else best_s / own.estimated.step_time_s
            row["throughput_ratio"] = ratio
            if ratio is not None and fitting:
                row["relative_error"] = index / ratio - 1.0
        rows[acc.name] = row
    return {
        "model": arch.name,
        "reference": ref.name,
        "gpus": gpus,
        "global_batch": job.global_batch,
        "seq_len": job.seq,
        "reference_plan": lead.plan.as_dict(),
        "sensitivity": lead.weights,
        "plans_considered": len(plans),
        "accelerators": rows,
    }
