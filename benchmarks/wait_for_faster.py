"""Would a job gain by waiting for a better domain instead of starting on the one free now?

`planner` starts a job that one domain can hold on the best placement free now, however slow,
and a re-plan when a faster domain frees up did not pay (docs/policies.md). Followed job by job
on five_domains, a giant asking for more than a domain's share may find the fast domains held
and start on a slow one at several times its ideal time. `planner-waits-for-faster` is
`planner`, except that such a job waits where the running jobs' expected ends (the view's
releases, at their speed now) free a domain on which it would finish sooner than here, by
WAIT_GAIN at least: the time until then plus its run there, against its run here now. Nothing
is reserved: when that domain frees, the job is decided first only if its response ratio
puts it first.

    python -m benchmarks.wait_for_faster [--scenarios scenarios/five_domains.yaml,...]
        [--seeds 10] [--loads 0.9,1.2] [--hours 12] [--out DIR]

Each scenario's `planner` and the variant, paired by seed (`xds compare --local`, the variant
registered in this process only); ~12 min for the defaults on one core.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks._compare import by_cell, change_cell, run_compare
from benchmarks._table import print_table
from xdscheduler.planner import policies
from xdscheduler.planner.search import JobSpec, evaluate_space
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights

log = logging.getLogger("benchmarks.wait_for_faster")
BASELINE, VARIANT = "planner", "planner-waits-for-faster"
WAIT_GAIN = 0.9  # wait only to finish in at most 90% of the time it would take here now
RELEASES_LOOKED_AT = 2  # per domain: the first points at which it holds the job's minimum
SCENARIOS = "scenarios/five_domains.yaml,scenarios/skyplane_six_regions.yaml"
FIGURES = ("mean_jct_s", "giant_mean_jct_s", "fit_mean_jct_s", "useful_utilization")


def soonest_finish_s(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    options: SearchOptions,
    now_s: float,
    limit_s: float,
) -> float:
    """The soonest the job could finish (from `now_s`) on one domain freed by the running
    jobs' expected ends, each domain at the first RELEASES_LOOKED_AT points at which it holds
    the job's minimum; `limit_s` where none finishes sooner."""
    best = limit_s
    for d, domain in enumerate(view.domains):
        looked = 0
        for t, have in view.freeing(d, domain.available):
            if have < job.gpus_min or t - now_s >= best:
                continue
            looked += 1
            if looked > RELEASES_LOOKED_AT:
                break
            ev = evaluate_space(job, only(view, d, have), weights, options)
            if ev is not None:
                speed = float(ev.terms["tokens_per_s"][int(np.argmax(ev.terms["objective"]))])
                best = min(best, t - now_s + job.tokens / speed)
    return best


def only(view: ClusterView, d: int, have: int) -> ClusterView:
    """The view with `have` accelerators free in domain `d` (at most what it can hold), none
    elsewhere."""
    return view.with_free(
        {x.name: min(have, x.schedulable) if i == d else 0 for i, x in enumerate(view.domains)}
    )


@dataclass
class WaitsForFaster(policies.PlannerPolicy):
    """`planner`, letting a job that one domain holds wait for a domain that frees soon. A job
    that waits is decided again when the free accelerators change (the planner's
    `DecisionQueue`), not when the expected ends move."""

    def pick(self, ev, job, view, weights, options, modest=False, now_s=None) -> int | None:
        i = super().pick(ev, job, view, weights, options, modest, now_s)
        if i is None or ev is None or now_s is None or not view.releases:
            return i
        if policies.is_giant(job, view):  # a giant runs across domains: it has none to wait for
            return i
        here_s = job.tokens / float(ev.terms["tokens_per_s"][i])
        single = replace(options, max_domains=1)
        there_s = soonest_finish_s(job, view, weights, single, now_s, here_s)
        return None if there_s < WAIT_GAIN * here_s else i


def register() -> None:
    """The variant, in this process's registry only."""
    policies.POLICIES[VARIANT] = lambda w, o: WaitsForFaster(w, VARIANT)


def rows_of(doc: dict, scenario: str) -> list[list]:
    """Per load: the variant's change against `planner` in each of FIGURES."""
    paired, _ = by_cell(doc)
    return [
        [scenario, f"{load:g}", *(change_cell(paired[(load, VARIANT, f)]) for f in FIGURES)]
        for load in doc["grid"]["loads"]
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=SCENARIOS, help="comma-separated scenario files")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loads", default="0.9,1.2")
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument("--out", help="keep the comparisons here (default: a temporary folder)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    register()
    start, rows = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        for scenario in (Path(s.strip()) for s in args.scenarios.split(",") if s.strip()):
            log.info("%s", scenario)
            doc = run_compare(
                scenario,
                [BASELINE, VARIANT],
                args.seeds,
                args.loads,
                args.hours,
                out / scenario.stem,
                local=True,
                baseline=BASELINE,
            )
            rows += rows_of(doc, scenario.stem)
    print_table(
        f"{VARIANT} against {BASELINE}, paired by seed, ± 95% CI over {args.seeds} seeds "
        f"(* significant); {time.perf_counter() - start:.0f} s",
        ["scenario", "load", "all JCT", "giants' JCT", "fits' JCT", "useful util."],
        rows,
        f"waits where a domain freeing soon would finish the job in <= {WAIT_GAIN:.0%} of its "
        "time here; giants: jobs asking for more than the largest domain's free share",
    )


if __name__ == "__main__":
    main()
