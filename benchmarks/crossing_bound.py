"""What crossing could buy the giants of a scenario with the planner's search, even with a free WAN.

The issue's target: at loads >= 0.9 on five_domains (its listed jobs in), the best cross-domain
policy cuts the giants' mean JCT by >= 25% against `planner-single-domain`. `planner` never
crosses there: a giant of that comparison asks for more than a domain's free share, but its
minimum fits one domain, and the planner's rule keeps such jobs in one. This benchmark lifts the
rule for them and asks how much is left to gain:

- `planner-asks-cross`: `planner`, except that a job asking for more than any domain's share
  (the accelerators other tenants leave there now) may take the best placement by the objective
  across domains, its work split by the domains' speeds, when that keeps KEEP_MFU of its
  efficiency inside one domain (the planner's rule for its giants);
- `planner-asks-cross-unguarded`: the same without the guard: the best placement by the
  objective, wherever it is.

With `--preemptible`, the two variants' spreads are preemptible (`-preemptible` names): a job
that one domain holds takes their accelerators back when it needs them, as from the planner's
own giants, so a spread soaks up only what the jobs that fit leave.

Each runs on the scenario as it is, and again with the WAN made free: every link at the domains'
own fabric (FREE_GBPS), no swing, no price. The free WAN is the most crossing could buy with this
search, so a target the free WAN does not reach is out of reach for any policy built on it.

    python -m benchmarks.crossing_bound [--scenario scenarios/five_domains.yaml] [--seeds 10]
        [--loads 0.9,1.2] [--hours 12] [--wan leased,free] [--preemptible] [--out DIR]

The studies run in this process (`xds compare --local`): the two variants are registered here,
not in the product's registry. ~19 min for the defaults on 2 cores; with `--preemptible --wan
leased` ~57 min (the unguarded spreads are preempted over and over).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks._compare import by_cell, change_cell, run_compare, scenario_variant
from benchmarks._table import print_table
from xdscheduler.planner import policies
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec, uneven_if_needed
from xdscheduler.planner.space import SINGLE, SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights

log = logging.getLogger("benchmarks.crossing_bound")
FREE_GBPS = 400.0  # the domains' own fabric per accelerator in five_domains
BASELINE = "planner-single-domain"
VARIANTS = ("planner-asks-cross", "planner-asks-cross-unguarded")
WANS = ("leased", "free")


def asks_more_than_a_domain(job: JobSpec, view: ClusterView) -> bool:
    """The job asks for more than any domain's share left by other tenants now, yet its
    minimum fits one (the planner's own giants cross anyway)."""
    share = max((d.schedulable - d.reserved_gpus for d in view.domains if d.up), default=0)
    return job.gpus_max > share and not policies.is_giant(job, view)


@dataclass
class AsksCross(policies.PlannerPolicy):
    """`planner`, letting a job that asks for more than a domain's share cross domains."""

    guarded: bool = True  # keep KEEP_MFU of the job's efficiency inside one domain
    preemptible: bool = False  # its spreads give their accelerators back to jobs that fit

    def _best(self, job, view, modest=False, now_s=None) -> Placement | None:
        # every placement passes here: the queue pass, re-plans and yields
        p = super()._best(job, view, modest, now_s)
        return p if p is None else self._yielding(p, job, view)

    def _yielding(self, p: Placement, job: JobSpec, view: ClusterView) -> Placement:
        """`p`, preemptible where it spreads a job asking for more than a domain."""
        if not self.preemptible or len(p.taken) < 2:
            return p
        return replace(p, preemptible=True) if asks_more_than_a_domain(job, view) else p

    def space(self, job: JobSpec, view: ClusterView) -> SearchOptions:
        if not asks_more_than_a_domain(job, view):
            return super().space(job, view)
        return replace(uneven_if_needed(job, view, self.options), balance=True)

    def pick(self, ev, job, view, weights, options, modest=False, now_s=None) -> int | None:
        if ev is None or not asks_more_than_a_domain(job, view):
            return super().pick(ev, job, view, weights, options, modest, now_s)
        allowed = np.ones(len(ev.place), dtype=bool)
        if self.guarded:  # inside one domain, or across keeping KEEP_MFU of its efficiency
            # (a job that one domain holds may wait for it: the floor does not fall with waiting)
            floor = policies.KEEP_MFU * policies.best_single_mfu(job, view, weights, options)
            single = np.asarray(ev.placements.kind)[ev.place] == SINGLE
            allowed = single | (ev.terms["utilization"] >= floor)
        objective = np.where(allowed, ev.terms["objective"], -np.inf)
        return int(np.argmax(objective)) if np.isfinite(objective.max()) else None


def variants(preemptible: bool = False) -> tuple[str, ...]:
    """The variants' names: guarded, then unguarded."""
    return tuple(f"{v}-preemptible" for v in VARIANTS) if preemptible else VARIANTS


def register(preemptible: bool = False) -> None:
    """The two variants, in this process's registry only."""
    for name, guarded in zip(variants(preemptible), (True, False), strict=True):

        def factory(w: Weights, o: dict, n: str = name, g: bool = guarded) -> AsksCross:
            return AsksCross(w, n, guarded=g, preemptible=preemptible)

        policies.POLICIES[name] = factory


def free_wan(path: Path, out: Path) -> Path:
    """The scenario with every link at FREE_GBPS, without swings or price, written to `out`."""
    free = {"bandwidth_gbps": FREE_GBPS, "fluctuation": 0.0, "price_per_gb": 0.0}
    return scenario_variant(path, out, "free_wan", lambda link: {**link, **free})


def compare(scenario: Path, args, out: Path) -> dict:
    """`xds compare --local` of the baseline and the variants on one scenario."""
    policies = [BASELINE, *variants(args.preemptible)]
    return run_compare(scenario, policies, args.seeds, args.loads, args.hours, out, local=True)


def rows_of(doc: dict, wan: str, preemptible: bool = False) -> list[list]:
    """Per load and variant: the giants' and the fits' mean JCT against the baseline."""
    paired, summary = by_cell(doc)
    rows = []
    for load in doc["grid"]["loads"]:
        for policy in variants(preemptible):
            crossed = summary[(load, policy, "giant_crossed")]["mean"]
            rows.append(
                [
                    wan,
                    f"{load:g}",
                    policy,
                    f"{crossed:.1f}",
                    change_cell(paired[(load, policy, "giant_mean_jct_s")]),
                    change_cell(paired[(load, policy, "fit_mean_jct_s")]),
                    change_cell(paired[(load, policy, "mean_jct_s")]),
                ]
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/five_domains.yaml")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loads", default="0.9,1.2")
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument("--wan", default=",".join(WANS), help="leased, free or both (default)")
    ap.add_argument(
        "--preemptible", action="store_true", help="the variants' spreads are preemptible"
    )
    ap.add_argument("--out", help="keep the comparisons here (default: a temporary folder)")
    args = ap.parse_args()
    wans = [w.strip() for w in args.wan.split(",") if w.strip()]
    if not wans or set(wans) - set(WANS):
        ap.error(f"--wan {args.wan!r}: accepted are leased, free or both, comma-separated")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    register(args.preemptible)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        scenario = Path(args.scenario)
        rows = []
        for wan in wans:
            path = scenario if wan == "leased" else free_wan(scenario, out)
            log.info("%s WAN: %s", wan, path)
            rows += rows_of(compare(path, args, out / f"{wan}-wan"), wan, args.preemptible)
    print_table(
        f"crossing bound on {scenario.stem}: jobs asking for more than a domain may cross"
        f"{' preemptibly' if args.preemptible else ''}; "
        f"mean JCT against {BASELINE}, paired by seed, ± 95% CI over {args.seeds} seeds "
        f"(* significant); {time.perf_counter() - start:.0f} s",
        ["WAN", "load", "policy", "giants across", "giants' JCT", "fits' JCT", "all JCT"],
        rows,
        f"free WAN: every link {FREE_GBPS:g} Gbit/s, no swing, no price; the target is the "
        "giants' JCT at <= -25% with no class significantly worse",
    )


if __name__ == "__main__":
    main()
