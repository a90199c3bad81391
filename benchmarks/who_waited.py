"""Whose waits cost what: each job's waits under `planner-waits` (or, with --unbounded, waiting
without its bound), and its JCT against `planner`'s over the same jobs and network.

    python -m benchmarks.who_waited [--scenarios scenarios/five_domains.yaml,...] [--seeds 5]
        [--loads 0.9,1.2] [--hours 6] [--unbounded] [--late-min 10]

Per class (the jobs that fit; the giants, asking for more than the largest domain's free share)
and whether the job waited at least once: how many, and their JCT summed under each policy. Of
those that waited, the ones that started more than --late-min after the release they first
waited for. Summed, not a mean of the jobs' ratios, which a few short jobs stretched a lot
would lead; over the jobs finished under both policies. Studies run in this process, one after
another (~2 s each on a drawn cluster of 6 h, 9-18 s on five_domains at 12 h and load 1.2).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._table import print_table
from xdscheduler.errors import UserError
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.planner.waiting import Hold, WaitsForFaster
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import Scenario, load_scenario
from xdscheduler.sim.cell import cell_workload
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.metrics import free_share, is_giant

log = logging.getLogger("benchmarks.who_waited")


@dataclass
class Logged(WaitsForFaster):
    """`planner-waits`, keeping the release each job first waited for."""

    first_release_s: dict[str, float] = field(default_factory=dict)

    def waiting_for(self, job: JobSpec, hold: Hold) -> None:
        self.first_release_s.setdefault(job.name, hold.until_s)
        super().waiting_for(job, hold)


@dataclass(frozen=True)
class Outcome:
    """One job of one study under both policies."""

    giant: bool
    waited: bool
    late: bool  # started more than --late-min after the release it first waited for
    jct_s: float  # under `planner`
    waiting_jct_s: float  # under the waiting policy


def outcomes(scn: Scenario, seed: int, load: float, hours: float, unbounded: bool, late_s: float):
    """The jobs of one cell finished under both policies."""
    cell = cell_workload(scn, hours, seed, load)
    inputs = StudyInputs.of_cell(scn, cell.jobs, seed, hours)  # one for both policies
    share = free_share(inputs.dynamics, ClusterView.from_scenario(scn), hours * 3600)
    waits = Logged(scn.weights, once=not unbounded)
    ends = {}
    for policy in (PlannerPolicy(scn.weights), waits):
        ends[policy.name] = {r.name: r for r in run_here(inputs, policy).jobs}
    out = []
    for name, job in ends["planner"].items():
        other = ends[waits.name][name]
        if job.end_s is None or other.end_s is None:
            continue
        released = waits.first_release_s.get(name, math.inf)
        started = other.start_s if other.start_s is not None else -math.inf
        out.append(
            Outcome(
                giant=is_giant(job.spec, share),
                waited=released < math.inf,
                late=started - released > late_s,
                jct_s=job.end_s - job.arrival_s,
                waiting_jct_s=other.end_s - other.arrival_s,
            )
        )
    return out


def rows_of(jobs: list[Outcome]) -> list[list]:
    """Per class: those that waited (and of them the late), those that never did."""
    rows = []
    for giant in (False, True):
        for label, keep in (
            ("waited", lambda o: o.waited),
            ("  of which started late", lambda o: o.late),
            ("never waited", lambda o: not o.waited),
        ):
            mine = [o for o in jobs if o.giant == giant and keep(o)]
            before = sum(o.jct_s for o in mine) / 3600
            after = sum(o.waiting_jct_s for o in mine) / 3600
            change = f"{after / before - 1:+.1%}" if before else "–"
            rows.append(["giants" if giant else "fits", label, len(mine), before, after, change])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="scenarios/five_domains.yaml")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--loads", default="0.9,1.2")
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--unbounded", action="store_true", help="wait without planner-waits' bound")
    ap.add_argument("--late-min", type=float, default=10.0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    jobs: list[Outcome] = []
    late_s = args.late_min * 60
    try:
        for path in (Path(s.strip()) for s in args.scenarios.split(",") if s.strip()):
            scn = load_scenario(path)
            for load in (float(x) for x in args.loads.split(",")):
                for seed in range(args.seeds):
                    log.info("%s, load %g, seed %d", path.stem, load, seed)
                    jobs += outcomes(scn, seed, load, args.hours, args.unbounded, late_s)
    except (UserError, ValueError) as err:  # a scenario or a load that is not one
        raise SystemExit(f"error: {err}") from None
    policy = "waiting unbounded" if args.unbounded else "planner-waits"
    print_table(
        f"Whose waits cost what: {policy} against planner, summed JCT of the jobs finished "
        f"under both; {time.perf_counter() - start:.0f} s",
        ["class", "jobs", "count", "planner (h)", f"{policy} (h)", "change"],
        rows_of(jobs),
        f"late: started more than {args.late_min:g} min after the release it first waited for; "
        "giants: more than the largest domain's free share",
    )


if __name__ == "__main__":
    main()
