"""What crossing domains can buy one job at most: its best speed across domains against its best
inside one, each on an empty cluster, for every listed job of a scenario. Neither queueing nor
other jobs enter: where even this ratio is near 1, no scheduler can cut the job's time by
crossing; where it is large, crossing can pay, if the room is free.

    python -m benchmarks.crossing_speedup [SCENARIO]    # default: scenarios/five_domains.yaml

The plans are the online planner's grid (`planner.baselines.ONLINE`, DiLoCo offered), ranked by
tokens/s alone. `benchmarks.crossing_headroom` gives the same comparison over a generated
workload as one share (`faster across`); this is it job by job, for the scenario's own jobs.
"""

from __future__ import annotations

import sys

import numpy as np

from benchmarks._table import print_table
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.search import THROUGHPUT_ONLY, JobSpec, evaluate_space
from xdscheduler.planner.space import SINGLE
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import load_scenario


def fastest(job: JobSpec, view: ClusterView) -> dict[bool, tuple[float, int]]:
    """Tokens/s and accelerators of the fastest candidate inside one domain (False) and across
    domains (True); (0, 0) where there is none."""
    ev = evaluate_space(job, view, THROUGHPUT_ONLY, ONLINE)
    best = {False: (0.0, 0), True: (0.0, 0)}
    if ev is None:
        return best
    across = np.asarray(ev.placements.kind)[ev.place] != SINGLE
    speed, gpus = ev.terms["tokens_per_s"], ev.gpus.sum(axis=1)
    for side in (False, True):
        idx = np.flatnonzero(across == side)
        if len(idx):
            i = idx[np.argmax(speed[idx])]
            best[side] = (float(speed[i]), int(gpus[i]))
    return best


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "scenarios/five_domains.yaml"
    scn = load_scenario(path)
    view = ClusterView.from_scenario(scn).empty()
    largest = max(d.total_gpus for d in view.domains)
    rows = []
    for spec in scn.jobs:
        job = JobSpec.of(spec)
        best = fastest(job, view)
        (one, one_gpus), (cross, cross_gpus) = best[False], best[True]
        rows.append(
            [
                job.name,
                f"{job.gpus_min}-{job.gpus_max}",
                "yes" if job.gpus_max > largest else "no",
                f"{one:,.0f} on {one_gpus}" if one_gpus else "-",
                f"{cross:,.0f} on {cross_gpus}" if cross_gpus else "-",
                f"{cross / one:.2f}" if one and cross else "-",
            ]
        )
    print_table(
        f"{scn.name}: each listed job's fastest plan inside one domain against across domains, "
        "on an empty cluster (tokens/s on accelerators)",
        [
            "job",
            "asks",
            "more than a domain",
            "inside one domain",
            "across domains",
            "across / one",
        ],
        rows,
        note=f"Largest domain: {largest} accelerators. The ratio bounds what crossing can do "
        "for the job's own speed; queueing behind other jobs is what else it can save.",
    )


if __name__ == "__main__":
    main()
