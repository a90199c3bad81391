"""Crossing headroom: the most any policy could gain in mean JCT by pooling the domains, as if
the WAN were free and packing perfect: a fluid estimate per cell of the comparison grid.

Each (scenario, load, seed) cell has the workload `xds compare` gives it. Its jobs' work (model
FLOPs) is served two ways, each by preemptive shortest-remaining-work-first on fluid capacity
(every domain's accelerators at their BF16 peak x MFU_CAP, less the background load), a job
never faster than its best plan allows:
- pooled: one pool of the whole cluster; a job at most at its best speed on the empty cluster
  (crossing domains allowed, as the slowdown's yardstick);
- partitioned: each job confined to one domain, the one where it would finish first given the
  work served before it there when it arrives (jobs with less left), at most at its best speed
  inside that domain.
Pooled against partitioned is what crossing domains could give at best under either policy
family's ideal scheduling: a WAN that costs nothing, no fragments, no reconfiguration.

Two more figures say where a gain could come from at all: `faster across`, the share of jobs
that some plan across domains (the real WAN, low-communication plans included) runs at least
FASTER faster than their best single domain on the empty cluster; and, from an `xds compare`
folder of the same grid (`--compare`), the baseline's measured JCT, the share of it spent
queued, the pooled fluid against it (the most any policy could cut from the measured baseline,
crossing or not) and the `planner` vs `planner-single-domain` change measured there, so a
target can be told reachable or not.

    python -m benchmarks.crossing_headroom [--scenarios A.yaml,B.yaml] [--seeds 10]
        [--loads 0.6,0.8,1.0,1.2] [--compare DIR]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from benchmarks._table import print_table
from xdscheduler.errors import UserError
from xdscheduler.planner.search import IDEAL_OPTIONS, THROUGHPUT_ONLY, JobSpec, search
from xdscheduler.planner.view import ClusterView
from xdscheduler.report.compare import mean_ci
from xdscheduler.scenario import load_scenario
from xdscheduler.sim.cell import cell_workload
from xdscheduler.sim.inputs import study_dynamics
from xdscheduler.sim.metrics import background_load, ideal_rates

MFU_CAP = 0.5  # fluid capacity: above what the best plans reach, so the estimate is generous
FASTER = 0.05  # a job counts as faster across domains from this much faster alone
HOURS = 12.0


def domain_rates(specs: list[JobSpec], view: ClusterView) -> np.ndarray:
    """(jobs, domains): each job's best tokens/s inside one empty domain (0: it does not fit)."""
    cache: dict[tuple, float] = {}
    empty = view.empty()
    out = np.zeros((len(specs), len(view.domains)))
    for d, dom in enumerate(view.domains):
        alone = empty.with_free({o.name: 0 for o in view.domains if o.name != dom.name})
        for j, spec in enumerate(specs):
            key = (spec.shape_key, d)
            if key not in cache:
                try:
                    best = search(
                        spec,
                        alone,
                        THROUGHPUT_ONLY,
                        replace(IDEAL_OPTIONS, max_domains=1),
                        top_k=0,
                        pareto=False,
                    )
                    estimate = best.best.estimate
                    assert estimate is not None  # the search's pick carries its estimate
                    cache[key] = estimate.tokens_per_s
                except UserError:
                    cache[key] = 0.0
            out[j, d] = cache[key]
    return out


def fluid(
    arrival: np.ndarray, work: np.ndarray, cap: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """JCT of each job under SRPT on pools of `capacity` (FLOP/s); `cap` (jobs, pools): its
    most FLOP/s in each pool (0: not there). A job joins, at arrival, the pool where it would
    finish first given the work already in it."""
    n, pools = len(arrival), len(capacity)
    order = np.argsort(arrival, kind="stable")
    left, pool_of, end = work.astype(float).copy(), np.full(n, -1), np.full(n, np.nan)
    active: list[list[int]] = [[] for _ in range(pools)]
    t, k = 0.0, 0
    while k < n or any(active):
        if not any(active):
            t = max(t, arrival[order[k]])
        while k < n and arrival[order[k]] <= t + 1e-9:
            j = order[k]
            k += 1
            # work served before it there: what is left of jobs with less left (SRPT)
            backlog = np.array([sum(left[i] for i in a if left[i] < work[j]) for a in active])
            finish = np.where(
                cap[j] > 0,
                np.maximum(work[j] / np.maximum(cap[j], 1e-30), (backlog + work[j]) / capacity),
                np.inf,
            )
            p = int(np.argmin(finish))
            pool_of[j] = p
            active[p].append(j)
        rates: dict[int, float] = {}
        for p in range(pools):
            room = capacity[p]
            for j in sorted(active[p], key=lambda i: left[i]):
                rates[j] = min(cap[j, p], room)
                room -= rates[j]
                if room <= 0:
                    break
        next_arrival = arrival[order[k]] - t if k < n else np.inf
        dt = min([left[j] / r for j, r in rates.items() if r > 0] + [next_arrival])
        for j, r in rates.items():
            left[j] -= r * dt
        t += dt
        for p in range(pools):
            for j in [j for j in active[p] if left[j] <= 1e-9 * work[j]]:
                end[j] = t
                active[p].remove(j)
    return end - arrival


def cell(path: str, load: float, seed: int) -> dict:
    scn = load_scenario(path)
    work = cell_workload(scn, HOURS, seed, load, None)
    inputs = scn.model_copy(update={"jobs": []})
    view = ClusterView.from_scenario(inputs)
    specs = [JobSpec.of(j) for j in work.jobs]
    flops = np.array([s.flops_per_token for s in specs])
    total = np.array([s.tokens for s in specs]) * flops
    arrival = np.array([s.arrival_s for s in specs])
    pooled_cap = np.array([ideal_rates(specs, view)[s.name] for s in specs]) * flops
    inside = domain_rates(specs, view) * flops[:, None]
    bg = background_load(study_dynamics(inputs, seed, HOURS), view, HOURS * 3600)
    peaks = np.array([d.total_gpus * d.accelerator.half_tflops * 1e12 for d in view.domains])
    capacity = peaks * MFU_CAP * (1 - bg)
    pooled = fluid(arrival, total, pooled_cap[:, None], np.array([capacity.sum()]))
    parted = fluid(arrival, total, inside, capacity)
    return {
        "scenario": scn.name,
        "load": load,
        "seed": seed,
        "pooled_jct_h": float(np.mean(pooled)) / 3600,
        "partitioned_jct_h": float(np.mean(parted)) / 3600,
        "headroom": float(np.mean(pooled) / np.mean(parted) - 1),
        "faster_across": float(np.mean(pooled_cap > (1 + FASTER) * inside.max(axis=1))),
    }


def measured(compare_dir: str | None) -> pd.DataFrame | None:
    """Per seed, from a compare run's cells: the baseline's mean JCT and its queued share, and
    planner's change against it."""
    if not compare_dir:
        return None
    cells = pd.read_parquet(f"{compare_dir}/compare.parquet")
    wide = cells.pivot_table(
        index=["scenario", "load", "seed"], columns="policy", values=["mean_jct_s", "mean_queue_s"]
    )
    jct, queue = wide["mean_jct_s"], wide["mean_queue_s"]
    if not {"planner", "planner-single-domain"} <= set(jct.columns):
        raise UserError(f"{compare_dir}: needs planner and planner-single-domain cells")
    base = jct["planner-single-domain"]
    return pd.DataFrame(
        {
            "baseline_jct_h": base / 3600,
            "baseline_queued": queue["planner-single-domain"] / base,
            "measured": jct["planner"] / base - 1,
        }
    ).reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scenarios", default="scenarios/five_domains.yaml,scenarios/skyplane_six_regions.yaml"
    )
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loads", default="0.6,0.8,1.0,1.2")
    ap.add_argument("--compare", help="an xds compare --out folder with the same grid")
    args = ap.parse_args()
    start = time.perf_counter()
    cells = [
        cell(path, float(load), seed)
        for path in args.scenarios.split(",")
        for load in args.loads.split(",")
        for seed in range(args.seeds)
    ]
    frame = pd.DataFrame(cells)
    seen = measured(args.compare)
    if seen is not None:
        frame = frame.merge(seen, on=["scenario", "load", "seed"], how="left")
    header = ["scenario", "load", "faster across", "pooled JCT h", "one-domain h", "headroom"]
    if seen is not None:
        header += ["baseline JCT h", "queued", "pooled vs baseline", "measured planner"]
    rows = []
    for (scn, load), g in frame.groupby(["scenario", "load"], sort=False):
        row = [
            scn,
            f"{load:.1f}",
            f"{100 * g['faster_across'].mean():.1f}%",
            g["pooled_jct_h"].mean(),
            g["partitioned_jct_h"].mean(),
            _ci(g["headroom"]),
        ]
        if seen is not None:
            pooled_vs = g["pooled_jct_h"] / g["baseline_jct_h"] - 1
            row += [
                g["baseline_jct_h"].mean(),
                f"{100 * g['baseline_queued'].mean():.1f}%",
                _ci(pooled_vs),
                _ci(g["measured"]),
            ]
        rows.append(row)
    print_table(
        f"crossing headroom: fluid SRPT, pooled vs each job in one domain; {args.seeds} "
        f"seeds a cell, {HOURS:g} h of arrivals, MFU cap {MFU_CAP}; means ± 95% CI "
        f"({time.perf_counter() - start:.0f} s)",
        header,
        rows,
        f"faster across: jobs some plan across domains runs {100 * FASTER:.0f}% faster "
        "than their best domain, alone on the cluster; queued: the baseline's "
        "(planner-single-domain) JCT spent waiting to start",
    )


def _ci(values: pd.Series) -> str:
    est = mean_ci(values)
    half = 0.0 if math.isnan(est.half_width) else est.half_width
    return f"{100 * est.mean:+.1f}% ± {100 * half:.1f}%"


if __name__ == "__main__":
    main()
