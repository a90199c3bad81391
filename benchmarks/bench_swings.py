"""Re-plans on load swings and RTT rises: make-before-break vs the old checkpoint-and-restart.

Run: python -m benchmarks.bench_swings [--seeds 7,8,9] [--hours 12] [--every 1800]
On the default scenario, each seed's study (planner policy) gets seeded swings on top of its own
network: a domain's background load up or down by 20-50%, or a link's RTT up 1.5-3x, one every
`--every` seconds on average, each lasting 10-60 minutes. The same jobs and the same swings run
twice in this process: re-plans by make-before-break, and by the old 300 s restart (baseline).
Every adjustment a load swing (≥ 20%) or an RTT rise (≥ 50%) fired (the job re-planned on the
domains it holds) is measured: dip = 1 − tokens trained from the trigger until recovery / what
the rate before the swing would have trained; the adjustment's own dip = the same over what
keeping the plan under the swing would have trained (dip also counts the swing's slowdown while
the new plan's communicators are built); recovery = seconds until the job trains at
min(new plan's rate, 90% of the rate before) with nothing pending. Relocations to other domains are
separate decisions, listed apart: seconds their state spent on the WAN, and seconds of training
they lost (paused, or redone after a checkpoint).
"""

from __future__ import annotations

import argparse

from benchmarks._table import print_table
from xdscheduler.registry import make_policy
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.reconfig import (
    SWING_CAUSES,
    Relocate,
    Switch,
    adjustment_stats,
    relocation_stats,
)
from xdscheduler.sim.swings import EVERY_S, inject_swings


def measure(seeds: list[int], hours: float, every_s: float) -> tuple[dict, list, int]:
    """Swing records of both ways of re-planning over the seeds, the relocations the swings led
    to under make-before-break, and the swings injected."""
    scn = load_scenario(default_scenario_path())
    records: dict[Switch, list] = {Switch.MAKE_BEFORE_BREAK: [], Switch.RESTART: []}
    moves: list = []
    injected = 0
    for seed in seeds:
        jobs = study_jobs(scn, hours, seed)
        dyn, swings = inject_swings(
            study_dynamics(scn, seed, hours), seed, every_s, until_s=hours * 3600
        )
        injected += len(swings)
        for mode, out in records.items():
            inputs = StudyInputs(scn, jobs, dyn, hours)
            res = run_here(inputs, make_policy("planner", scn.weights), replan=mode)
            out += [s for s in res.swings if s.cause in SWING_CAUSES and s.how != Switch.KEPT]
            moves += [m for m in res.relocations if m.cause in SWING_CAUSES]
    return records, moves, injected


def row(name: str, records: list) -> list:
    """The report's adjustment statistics of the records, dips in %."""
    st = adjustment_stats(records)
    pct = [
        _cell(getattr(st, k), 100)
        for k in (
            "dip_p50",
            "dip_p99",
            "dip_max",
            "swing_dip_p50",
            "swing_dip_max",
            "adjustment_dip_p50",
            "adjustment_dip_p99",
            "adjustment_dip_max",
        )
    ]
    return [
        name,
        st.count,
        st.recovered,
        *pct,
        *(_cell(getattr(st, k)) for k in ("recovery_s_p50", "recovery_s_p99", "recovery_s_max")),
    ]


def relocation_rows(moves: list) -> list[list]:
    """The report's relocation statistics, one row per way of relocating."""
    rows = []
    for how in Relocate:
        st = relocation_stats([m for m in moves if m.how == how])
        rows.append(
            [
                how,
                *(
                    _cell(getattr(st, k))
                    for k in (
                        "count",
                        "switched",
                        "cancelled",
                        "transfer_s_p50",
                        "transfer_s_max",
                        "lost_s_p50",
                        "lost_s_max",
                        "lost_gpu_h",
                    )
                ),
            ]
        )
    return rows


def _cell(value, scale: float = 1):
    """A statistic for the table, scaled; '–' where there is none."""
    return "–" if value is None else value * scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument("--every", type=float, default=EVERY_S, help="mean seconds between swings")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    records, moves, injected = measure(seeds, args.hours, args.every)
    mbb, old = records[Switch.MAKE_BEFORE_BREAK], records[Switch.RESTART]
    rows = [row("restart (baseline)", old), row("make-before-break adjustments", mbb)]
    a, b = rows[0], rows[1]
    swing_alone = {6, 7}  # the swing's own slowdown: the same swings, no ratio to take
    rows.append(
        ["restart / make-before-break", "", ""]
        + [
            x / y
            if isinstance(x, float) and isinstance(y, float) and y > 0 and k not in swing_alone
            else "–"
            for k, (x, y) in enumerate(zip(a, b, strict=True))
            if k >= 3
        ]
    )
    fallbacks = sum(s.how == Switch.FALLBACK for s in mbb)
    crossed = sum(s.wan_gb > 0 for s in mbb)
    title = (
        f"five_domains, planner, seeds {args.seeds}, {args.hours:g} h each; {injected} "
        "swings injected on top of the network's own"
    )
    print_table(
        f"Adjustments on load swings and RTT rises, {title}",
        [
            "re-plan",
            "re-plans",
            "recovered",
            "dip p50 %",
            "dip p99 %",
            "dip max %",
            "swing alone p50 %",
            "swing alone max %",
            "adjustment's own p50 %",
            "adjustment's own p99 %",
            "adjustment's own max %",
            "recovery p50 s",
            "recovery p99 s",
            "recovery max s",
        ],
        rows,
        f"make-before-break fell back to restart {fallbacks} times; {crossed} adjustments sent "
        "state over the WAN (adjustments stay on the job's domains). Simulated seconds.",
    )
    print()
    print_table(
        f"Relocations those swings led to, {title}",
        [
            "relocation",
            "decided",
            "switched",
            "cancelled",
            "WAN p50 s",
            "WAN max s",
            "lost p50 s",
            "lost max s",
            "lost GPU-h",
        ],
        relocation_rows(moves),
        "transfer: paused while the state crosses; checkpoint: the next checkpoint copied while "
        "the job trains on, then loaded and the steps since redone. lost: seconds of training "
        "paused or redone; lost GPU-h: accelerator-hours held idle, loading or redoing work.",
    )


if __name__ == "__main__":
    main()
