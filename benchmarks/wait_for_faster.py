"""Does a job gain by waiting for a faster domain instead of starting on the one free now?

`planner` starts a job that one domain holds on the best placement free now, however slow;
`planner-waits` (`xdscheduler.planner.waiting`) lets it wait where the running jobs' expected
ends free a domain on which it would finish in at most WAIT_GAIN of its time here, at most
until the release it first waited for, and never for the domain kept for the largest queued
job that nothing free holds now. Beside them, three variants of this benchmark only, none of
which keeps that domain: `planner-waits-unreserved` is `planner-waits` without it (the rule
before); `planner-waits-unbounded` waits as long as a domain frees soon;
`planner-reserves-faster` waits alike and reserves what the job will need of that domain at
its expected release: until then a job is placed there only where it ends before the release
or takes no more than the release spares (Slurm's EASY backfill, one reservation per waiting
job).

    python -m benchmarks.wait_for_faster [--scenarios scenarios/five_domains.yaml,...]
        [--seeds 10] [--loads 0.9,1.2] [--hours 12] [--variants NAME,...] [--out DIR]
    python -m benchmarks.wait_for_faster --from DIR[,DIR...]   # report kept runs, together

Each scenario's `planner`, `planner-waits` and the variants (`--variants`: those named),
paired by seed (`xds compare --local`, the variants registered in this process only); ~30 min
for the defaults on one core.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._compare import by_cell, change_cell, run_compare
from benchmarks._table import print_table
from xdscheduler.planner import policies
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.planner.waiting import WAIT_GAIN, Hold, WaitsForFaster
from xdscheduler.report.compare import mean_ci

log = logging.getLogger("benchmarks.wait_for_faster")
BASELINE, SHIPPED = "planner", "planner-waits"
UNBOUNDED, RESERVING = "planner-waits-unbounded", "planner-reserves-faster"
UNRESERVED = "planner-waits-unreserved"
VARIANTS = (SHIPPED, UNRESERVED, UNBOUNDED, RESERVING)
SCENARIOS = "scenarios/five_domains.yaml,scenarios/skyplane_six_regions.yaml"
COLUMNS = {  # figure -> its column in the table
    "mean_jct_s": "all JCT",
    "giant_mean_jct_s": "giants' JCT",
    "fit_mean_jct_s": "fits' JCT",
    "useful_utilization": "useful util.",
    "objective_work": "R (work)",
    "mean_slowdown": "slowdown",
}
FIGURES = tuple(COLUMNS)


def spare(hold: Hold, view: ClusterView) -> int:
    """What a job placed now may take of the held domain and still run at the hold's time
    without delaying it: what the domain frees by then beyond the hold's need (EASY backfill)."""
    free = view.domains[hold.domain].available
    then = max((h for t, h in view.freeing(hold.domain, free) if t <= hold.until_s), default=free)
    return max(0, min(free, then - hold.need))


@dataclass
class ReservesFaster(WaitsForFaster):
    """`planner-waits-unbounded`, holding for the waiting job what it will need of the
    domain it waits for, until its expected release: a job placed there meanwhile takes only
    what the hold spares, unless it is expected to end before the release (EASY backfill)."""

    held: dict[str, Hold] = field(default_factory=dict)  # waiting job -> its hold

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float):
        queued = {job.name for job in queue}
        kept = {n: h for n, h in self.held.items() if n in queued and h.until_s >= now_s}
        if kept != self.held:  # a hold lapsed: the jobs it kept out are tried again
            self.queue.forget_all_but([])
        self.held = kept
        return super().decide(queue, view, now_s)

    def waiting_for(self, job: JobSpec, hold: Hold) -> None:
        self.held[job.name] = hold

    def _best(
        self, job: JobSpec, view: ClusterView, modest: bool = False, now_s: float | None = None
    ):
        holds = [h for n, h in self.held.items() if n != job.name]
        placed = super()._best(job, view, modest, now_s)
        if placed is not None and holds and not self._keeps(placed, job, holds, view, now_s):
            rooms: dict[str, int] = {}
            for h in holds:  # two jobs waiting for one domain: the smaller spare
                name, room = view.names[h.domain], spare(h, view)
                rooms[name] = min(rooms.get(name, room), room)
            placed = super()._best(job, view.with_free(rooms), modest, now_s)
        if placed is not None:
            self.held.pop(job.name, None)
        return placed

    @staticmethod
    def _keeps(
        placed: Placement, job: JobSpec, holds: list[Hold], view: ClusterView, now_s: float | None
    ) -> bool:
        """Whether `placed` delays no hold: it ends before each release of a domain it
        takes, or takes no more there than the hold spares."""
        taken, estimate = placed.taken, placed.estimate
        assert estimate is not None  # the planner's placements carry theirs
        ends_s = (now_s or 0.0) + job.tokens / estimate.tokens_per_s
        return all(
            h.domain not in taken or ends_s <= h.until_s or taken[h.domain] <= spare(h, view)
            for h in holds
        )


def register() -> None:
    """The benchmark's own variants, in this process's registry only."""
    policies.POLICIES[UNRESERVED] = lambda w, o: WaitsForFaster(
        w, UNRESERVED, reserve_largest=False
    )
    policies.POLICIES[UNBOUNDED] = lambda w, o: WaitsForFaster(
        w, UNBOUNDED, once=False, reserve_largest=False
    )
    policies.POLICIES[RESERVING] = lambda w, o: ReservesFaster(
        w, RESERVING, once=False, reserve_largest=False
    )


def variants_of(doc: dict) -> list[str]:
    """The policies a comparison ran beside `planner` (a kept run's, whatever their names)."""
    return [p for p in doc["grid"]["policies"] if p != BASELINE]


def cells_of(doc: dict) -> list[tuple[float, str, list[dict]]]:
    """Per load and variant: its paired change against `planner` in each of FIGURES."""
    paired, _ = by_cell(doc)
    return [
        (load, v, [paired[(load, v, f)] for f in FIGURES])
        for load in doc["grid"]["loads"]
        for v in variants_of(doc)
    ]


def rows_of(scenario: str, cells: list[tuple[float, str, list[dict]]]) -> list[list]:
    """Per load and variant (`cells_of`): its change against `planner` in each of FIGURES."""
    return [[scenario, f"{load:g}", v, *map(change_cell, changes)] for load, v, changes in cells]


def pooled_rows(points: list[tuple[str, list[dict]]]) -> list[list]:
    """Per variant, over every scenario x load point: the mean of the points' changes with a
    95% interval over points, and how many points were significantly lower and higher."""
    rows = []
    for v in dict.fromkeys(policy for policy, _ in points):
        mine = [cells for policy, cells in points if policy == v]
        row = ["all points", f"{len(mine)}", v]
        for f in range(len(FIGURES)):
            means = [c[f]["mean"] for c in mine if c[f]["mean"] is not None]
            est = mean_ci(means)
            lower = sum(c[f]["significant"] and c[f]["mean"] < 0 for c in mine)
            higher = sum(c[f]["significant"] and c[f]["mean"] > 0 for c in mine)
            cell = {
                "mean": est.mean if est.n else None,  # – where no point has the class
                "half_width": est.half_width,
                "significant": est.significant,
            }
            row.append(f"{change_cell(cell)} ({lower} lower, {higher} higher)")
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=SCENARIOS, help="comma-separated scenario files")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loads", default="0.9,1.2")
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"the policies run beside {BASELINE}, comma-separated (default: all of them)",
    )
    ap.add_argument("--out", help="keep the comparisons here (default: a temporary folder)")
    ap.add_argument(
        "--from",
        dest="again",
        help="run nothing: report the comparisons kept in these comma-separated --out folders",
    )
    args = ap.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        ap.error(f"--variants: {', '.join(sorted(unknown))} not among {', '.join(VARIANTS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    if args.again:
        report(kept(Path(f.strip()) for f in args.again.split(",") if f.strip()), "kept runs")
    else:
        docs = compared(args)
        report(docs, f"{time.perf_counter() - start:.0f} s")


def compared(args: argparse.Namespace) -> dict[str, dict]:
    """Each scenario's comparison of `planner` and the variants, by scenario."""
    register()
    docs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        for scenario in (Path(s.strip()) for s in args.scenarios.split(",") if s.strip()):
            log.info("%s", scenario)
            docs[scenario.stem] = run_compare(
                scenario,
                [BASELINE, *args.variants.split(",")],
                args.seeds,
                args.loads,
                args.hours,
                out / scenario.stem,
                local=True,
                baseline=BASELINE,
            )
    return docs


def kept(folders) -> dict[str, dict]:
    """The comparisons an earlier run kept (its --out folders), by scenario; a scenario kept in
    two folders (two draws name their clusters alike) under FOLDER/SCENARIO, each once."""
    docs: dict[str, dict] = {}
    for folder in folders:
        found = sorted(folder.glob("*/compare.json"))
        if not found:
            raise SystemExit(f"error: no comparison (*/compare.json) in {folder}")
        for path in found:
            name = path.parent.name
            docs[f"{folder.name}/{name}" if name in docs else name] = json.loads(path.read_text())
    return docs


def report(docs: dict[str, dict], how: str) -> None:
    """The table: each scenario's points, then the points pooled where there are several
    scenarios."""
    cells = {name: cells_of(doc) for name, doc in docs.items()}
    rows = [row for name, per in cells.items() for row in rows_of(name, per)]
    points = [(v, changes) for per in cells.values() for _, v, changes in per]
    seeds = sorted({len(doc["grid"]["seeds"]) for doc in docs.values()})
    print_table(
        f"Waiting for a faster domain, against {BASELINE}, paired by seed, ± 95% CI over "
        f"{'/'.join(map(str, seeds))} seeds (* significant); {how}",
        ["scenario", "load", "policy", *COLUMNS.values()],
        rows + (pooled_rows(points) if len(docs) > 1 else []),
        f"waits where a domain freeing soon would finish the job in <= {WAIT_GAIN:.0%} of its "
        f"time here ({SHIPPED}: at most until the release it first waited for; {RESERVING}: "
        "reserving there what it needs, EASY backfill); giants: jobs "
        "asking for more than the largest domain's free share; R (work): the scenario's "
        "objective, higher is better; all points: the mean of the "
        "points' changes, ± 95% CI over points, and the points significantly lower / higher",
    )


if __name__ == "__main__":
    main()
