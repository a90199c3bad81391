"""What a study measured: the summary per policy and the tables behind the plots."""

from __future__ import annotations

import numpy as np
import pandas as pd

from xdscheduler.planner.search import JobSpec, ideal_tokens_per_s
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights
from xdscheduler.sim.correction import error_figures
from xdscheduler.sim.measurement import Action, Results, percentile
from xdscheduler.sim.records import ClassFigures, PolicyMetrics
from xdscheduler.workload import MFU


def job_efficiency(ideal_s, taken_s):
    """A job's efficiency: its ideal time (the whole cluster to itself) over the time it took
    from arrival, at most 1 (scalars or arrays)."""
    return np.minimum(ideal_s / np.maximum(taken_s, 1e-9), 1.0)


def ideal_rates(specs: list[JobSpec], view: ClusterView) -> dict[str, float]:
    """Tokens/s of each job's best plan on the empty cluster: its speed with no one else."""
    return {spec.name: ideal_tokens_per_s(spec, view) for spec in specs}


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def utilization_while_arriving(res: Results, horizon_s: float) -> float:
    """Busy accelerator-time over available while jobs arrive: the same window for every
    policy, before the queue drains."""
    frame = pd.DataFrame(res.samples)
    if frame.empty:
        return 0.0
    window = frame[frame["time_s"] < horizon_s]
    return float(window["gpus_busy"].sum() / max(window["gpus_total"].sum(), 1))


def peak_flop_per_s(view: ClusterView) -> float:
    """Dense BF16 peak of every accelerator of the cluster together."""
    return float(sum(d.total_gpus * d.accelerator.half_tflops for d in view.domains)) * 1e12


def free_share(dynamics, view: ClusterView, horizon_s: float) -> float:
    """The most accelerators one data centre offers this scheduler's jobs: the largest's (a
    mixed domain's pools together), less what other tenants hold there on average while jobs
    arrive. A job asking for more is a giant: it can have all it asks for only across the
    WAN."""
    window = dynamics.background_load[dynamics.times_s < horizon_s]
    load = window.mean(axis=0) if window.size else np.zeros(len(view.domains))
    return float(
        view.largest_site(
            [d.schedulable * (1 - b) for d, b in zip(view.domains, load, strict=True)]
        )
    )


def is_giant(spec: JobSpec, free_share_gpus: float) -> bool:
    """The job asks for more accelerators than the largest data centre's free share."""
    return spec.gpus_max > free_share_gpus


def _weighted(values: np.ndarray, weights: np.ndarray) -> float | None:
    return float(values @ weights / weights.sum()) if weights.sum() > 0 else None


def class_figures(
    res: Results,
    jct: np.ndarray,
    efficiency: np.ndarray,
    queue: np.ndarray,
    free_share_gpus: float,
    view: ClusterView,
) -> dict[str, ClassFigures]:
    """The fit/giant split of a study's jobs: what each class asked and what it got."""
    work = np.array([r.spec.work_flops for r in res.jobs])
    giant = np.array([is_giant(r.spec, free_share_gpus) for r in res.jobs], dtype=bool)
    started = np.array([r.start_s is not None for r in res.jobs], dtype=bool)
    ended = np.array([r.end_s is not None for r in res.jobs], dtype=bool)
    across = crossed(res, view)
    crossed_ = np.array([r.name in across for r in res.jobs], dtype=bool)
    out = {}
    for name, mask in (("fit", ~giant), ("giant", giant)):
        out[name] = ClassFigures(
            jobs=int(mask.sum()),
            gpu_time_share=float(work[mask].sum() / max(work.sum(), 1e-30)),
            mean_jct_s=_mean(list(jct[mask])),
            work_efficiency=_weighted(efficiency[mask], work[mask]),
            mean_queue_s=_mean(list(queue[mask])),
            never_started=int((mask & ~started).sum()),
            unfinished=int((mask & ~ended).sum()),
            crossed=int((mask & crossed_).sum()),
        )
    return out


def crossed(res: Results, view: ClusterView) -> set[str]:
    """Jobs that held accelerators in more than one data centre at once at some time (across
    the pools of one mixed domain only, a job stays off the WAN)."""
    index = {name: i for i, name in enumerate(view.names)}
    return {
        d.job
        for d in res.decisions
        if d.action != Action.REQUEUE
        and view.over_wan([index[k] for k, n in d.domains.items() if n > 0])
    }


def summarise(
    res: Results,
    weights: Weights,
    ideal: dict[str, float],
    view: ClusterView,
    horizon_s: float,
    free_share_gpus: float,
) -> PolicyMetrics:
    """A policy's figures. Every job counts, finished or not: an unfinished one with the least
    JCT it could still reach (the time it has taken so far, plus what it has left at its ideal
    speed), the same in its JCT, slowdown and efficiency. That is a lower bound, kind to a
    policy that never starts a job, so the jobs never started are counted beside it, and R's
    efficiency is weighted by each job's work: a starved giant weighs what it asked for."""
    done = [r for r in res.jobs if r.end_s is not None]
    jct = np.array(
        [
            r.end_s - r.arrival_s
            if r.end_s is not None
            else res.end_s - r.arrival_s + (r.tokens - r.done) / ideal[r.spec.name]
            for r in res.jobs
        ]
    )
    queue = np.array(
        [(r.start_s if r.start_s is not None else res.end_s) - r.arrival_s for r in res.jobs]
    )
    ideal_s = np.array([r.tokens / ideal[r.spec.name] for r in res.jobs])
    slowdown = list(jct / ideal_s) if len(jct) else []
    efficiency = job_efficiency(ideal_s, jct) if len(jct) else np.zeros(0)
    work = np.array([r.spec.work_flops for r in res.jobs])
    wan_gb = sum(r.wan_gb for r in res.jobs)
    wan_cost = sum(r.wan_cost for r in res.jobs)
    useful = res.useful_flop / (peak_flop_per_s(view) * horizon_s)
    # R per the scenario's weights: efficiency is the ideal time over the time a job took,
    # utilisation the model FLOPs trained over the cluster's peak, cost the WAN bill over the
    # bill for the accelerators the jobs held.
    gpu_bill = res.busy_gpu_s / 3600 * view.mean_gpu_price
    cost = wan_cost / gpu_bill if gpu_bill else 0.0
    per_job = _mean(list(efficiency)) or 0.0
    by_work = _weighted(efficiency, work) or 0.0

    def objective(eff: float) -> float:
        return weights.efficiency * eff + weights.utilization * useful - weights.cost * cost

    ms = [d.decision_ms for d in res.decisions if d.action != Action.REQUEUE]
    return PolicyMetrics(
        mean_jct_s=_mean(list(jct)),
        p95_jct_s=percentile(list(jct), 95),
        mean_slowdown=_mean(slowdown),
        p95_slowdown=percentile(slowdown, 95),
        makespan_s=max((r.end_s for r in done), default=None)
        if len(done) == len(res.jobs)
        else res.end_s,
        useful_utilization=useful,
        allocated_utilization=utilization_while_arriving(res, horizon_s),
        gpu_h_per_job=res.busy_gpu_s / 3600 / max(len(res.jobs), 1),
        mean_queue_s=_mean(list(queue)),
        jobs_completed=len(done),
        jobs_total=len(res.jobs),
        jobs_unfinished=len(res.jobs) - len(done),
        jobs_never_started=sum(r.start_s is None for r in res.jobs),
        cross_domain_gb=wan_gb,
        cross_domain_cost_usd=wan_cost,
        decision_ms_p50=percentile(ms, 50),
        decision_ms_p99=percentile(ms, 99),
        decisions=len(res.decisions),
        replans=sum(r.replans for r in res.jobs),
        requeues=sum(r.requeues for r in res.jobs),
        rejected_samples=res.rejected_samples,
        domains_down=sorted(res.down),
        mean_efficiency=per_job,
        work_efficiency=by_work,
        wan_cost_over_gpu_cost=cost,
        objective_work=objective(by_work),
        objective=objective(per_job),
        free_share_gpus=free_share_gpus,
        classes=class_figures(res, jct, efficiency, queue, free_share_gpus, view),
        wall_s=res.wall_s,
        **error_figures(res.predictions),
    )


def offered_load(specs: list[JobSpec], view: ClusterView, horizon_s: float) -> float:
    """Accelerator-hours the jobs ask for over those the cluster has while they arrive. A job's
    ask is its work (6·parameters FLOPs a token) at the workload generator's MFU on the
    cluster's mean accelerator, so a generated workload of load L offers L."""
    gpus = sum(d.total_gpus for d in view.domains)
    mean_peak = peak_flop_per_s(view) / max(gpus, 1)
    work = sum(s.tokens * 6 * s.arch.params for s in specs)
    return work / (MFU * mean_peak) / (gpus * horizon_s)


def background_load(dynamics, view: ClusterView, horizon_s: float) -> float:
    """The share of the cluster's accelerators other tenants hold while jobs arrive, on
    average."""
    window = dynamics.background_load[dynamics.times_s < horizon_s]
    size = np.array([d.total_gpus for d in view.domains], dtype=float)
    return float((window @ size).mean() / size.sum()) if window.size else 0.0


def job_table(res: Results) -> pd.DataFrame:
    rows = []
    for r in res.jobs:
        p = r.placement
        rows.append(
            {
                "policy": res.policy,
                "job": r.spec.name,
                "arrival_s": r.arrival_s,
                "start_s": r.start_s if r.start_s is not None else np.nan,
                "end_s": r.end_s if r.end_s is not None else np.nan,
                "jct_s": r.end_s - r.arrival_s if r.end_s is not None else np.nan,
                "queue_s": r.start_s - r.arrival_s if r.start_s is not None else np.nan,
                "gpus": p.total_gpus if p else 0,
                "domains": "+".join(res.names[d] for d in (p.domains if p else ())),
                "placement": p.kind if p else "",
                "cross_domain_gb": r.wan_gb,
                "replans": r.replans,
                "status": str(r.state),
            }
        )
    return pd.DataFrame(rows)


def domain_table(res: Results) -> pd.DataFrame:
    frame = pd.DataFrame(res.samples)
    frame.insert(0, "policy", res.policy)
    return frame


TRAFFIC_COLUMNS = ["policy", "time_s", "link", "gbps", "share", "jobs"]


def traffic_table(res: Results) -> pd.DataFrame:
    """What the policy's jobs sent over each WAN link they crossed, at every sample: the busier
    direction's Gbit/s, its share of that direction's bandwidth, and the jobs sending."""
    frame = pd.DataFrame(res.link_samples, columns=TRAFFIC_COLUMNS[1:])
    frame.insert(0, "policy", res.policy)
    return frame


def link_table(dynamics, names: list[str]) -> pd.DataFrame:
    """Bandwidth and RTT of every linked pair over time: the environment all policies share."""
    bw, rtt, times = dynamics.bandwidth_gbps, dynamics.rtt_ms, dynamics.times_s
    rows = []
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            if bw[0, a, b] > 0:
                rows.append(
                    pd.DataFrame(
                        {
                            "time_s": times,
                            "link": f"{names[a]}-{names[b]}",
                            "bandwidth_gbps": bw[:, a, b],
                            "rtt_ms": rtt[:, a, b],
                        }
                    )
                )
    cols = ["time_s", "link", "bandwidth_gbps", "rtt_ms"]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)


def segment_table(res: Results) -> pd.DataFrame:
    """Where each job ran and when: one row per job, domain and stretch of time it held
    accelerators there (policy, job, domain, gpus, start_s, end_s), from the decision log; a
    stretch still open at the end closes when the job finished or the study did."""
    rows: list[dict] = []
    open_: dict[str, list[dict]] = {}
    ends = {r.name: r.end_s for r in res.jobs}

    def close(job: str, t: float) -> None:
        for seg in open_.pop(job, []):
            if t > seg["start_s"]:
                rows.append({**seg, "end_s": t})

    for d in res.decisions:
        close(d.job, d.time_s)
        if d.action != Action.REQUEUE:
            open_[d.job] = [
                {"policy": res.policy, "job": d.job, "domain": name, "gpus": n, "start_s": d.time_s}
                for name, n in d.domains.items()
                if n > 0
            ]
    for job in list(open_):
        end = ends.get(job)
        close(job, res.end_s if end is None else end)
    columns = ["policy", "job", "domain", "gpus", "start_s", "end_s"]
    return pd.DataFrame(rows, columns=columns)
