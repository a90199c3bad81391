"""A job across domains of unlike speeds on the live cluster: even shares against the
planner's split by speed, measured.

Run as root from the repository root (network namespaces, tc and CPU cgroups):

    python -m benchmarks.live_unlike_speeds [--slower 2] [--phase-s 60] [--windows 6]

It brings up its own cluster of scenarios/local_three_domains.yaml (its own state file, the
shipped plain-dp profile) with west and north held to 1/SLOWER of their share of the cores
(`xds up --slower`), as slower hardware would run, and submits gpt-wide (3-4 workers, more than
any domain has: it runs across domains) twice:

1. **even**: before anything is measured the planner takes every domain at the scenario's
   speed, so the job's replicas take even shares of its batch, and the fast domain waits for
   the slow one every step;
2. **split**: after `xds profile --apply` has measured each domain (the controller plans with
   the measured entries from then on), the planner splits the batch by speed, and the runner
   gives each domain's replicas their samples (`domain_batch`).

Each runs until it has trained 10 steps, then for --phase-s seconds of wall time cut into
--windows windows: its wall step in each (mean and 95% CI over them), the step it reports
itself (compute and synchronisation, without its input batches, reports and checkpoints), the
step the model predicted when it placed it, and where and how. Then it is cancelled. Ends with
`xds down`, whatever happened.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks._live import PROFILE, LocalCluster
from benchmarks._table import print_table
from benchmarks.live_swings import JOB, job_row, off, pct, wait
from xdscheduler.live import quota
from xdscheduler.live.jobs import load_job
from xdscheduler.report.compare import mean_ci

SLOWED = ("west", "north")


def measure(cluster: LocalCluster, tmp: Path, name: str, args) -> dict:
    """Submit gpt-wide as `name`, and once it trains, its wall step in each of `args.windows`
    windows of `args.phase_s` seconds in all."""
    spec = {**load_job(str(JOB)).model_dump(), "name": name, "steps": args.steps}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    cluster.xds("submit", str(tmp / f"{name}.yaml"))
    try:
        first = wait(cluster, name, lambda r: r["step"] >= 10 and r["status"] == "running")
        marks = [(first["step"], time.monotonic())]
        for _ in range(args.windows):
            time.sleep(args.phase_s / args.windows)
            marks.append((job_row(cluster, name)["step"], time.monotonic()))
        last = job_row(cluster, name)
    finally:
        cluster.xds("cancel", name)
    walls = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in itertools.pairwise(marks) if s1 > s0]
    return {
        "run": name,
        "domains": last["domains"],
        "plan": last["plan"],
        "steps": marks[-1][0] - marks[0][0],
        "wall": mean_ci(walls),
        "own_s": last["measured_step_s"],
        "nominal_s": last["predicted_step_s"],
        "moved": last["attempts"] != first["attempts"] or last["domains"] != first["domains"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--slower", type=float, default=2.0, help="west's and north's slow-down (1-100)"
    )
    ap.add_argument("--phase-s", type=float, default=60.0, help="seconds each run is timed")
    ap.add_argument("--windows", type=int, default=6, help="windows the timing is cut into")
    ap.add_argument(
        "--steps", type=int, default=3000, help="the job's steps (it is cancelled after timing)"
    )
    args = ap.parse_args()
    if not 1.0 <= args.slower <= 100.0:
        ap.error(f"--slower takes a factor from 1 to 100; got {args.slower:g}")
    if args.windows < 2 or args.phase_s <= 0:
        ap.error("--windows takes 2 or more (a CI needs two), --phase-s a positive time")
    if not quota.available():
        print("skipped: needs CPU cgroups (root, with the cpu controller mounted)")
        return
    slow = [f"--slower={d}={args.slower:g}" for d in SLOWED]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xds-live-speeds-") as tmp:
        state = Path(tmp) / "cluster.json"
        with LocalCluster.up(state, "--profile", str(PROFILE), *slow) as cluster:
            even = measure(cluster, Path(tmp), "gpt-even", args)
            print(f"even: {even}", file=sys.stderr)
            profiled = json.loads(cluster.xds("profile", "--apply", "--json", timeout=1200))
            adopted = profiled["applied"]["entries"]
            speeds = {d: e["fp32_tflops"] for d, e in adopted.items()}
            print(f"profiled: {speeds}, {profiled['applied']['constants']}", file=sys.stderr)
            split = measure(cluster, Path(tmp), "gpt-split", args)
    report([even, split], speeds, args, time.perf_counter() - start)


def report(rows: list[dict], speeds: dict, args, wall_s: float) -> None:
    even, split = rows
    faster = even["wall"].mean / split["wall"].mean - 1
    print(
        f"gpt-wide across a fast domain and one at 1/{args.slower:g} of its CPU share: split "
        f"by speed, {split['wall'].mean:.3f} s a step against {even['wall'].mean:.3f} s on "
        f"even shares, {faster:+.0%} steps a second ({args.windows} windows of "
        f"{args.phase_s / args.windows:g} s each, 95% CIs below); {wall_s / 60:.1f} min"
    )
    print_table(
        "gpt-wide, even shares and split by speed",
        ["run", "domains", "plan", "steps", "wall s", "own s", "predicted s", "off", "moved"],
        [
            [
                r["run"],
                "+".join(f"{d} {n}" for d, n in r["domains"].items()),
                r["plan"],
                r["steps"],
                f"{r['wall'].mean:.3f} ± {r['wall'].half_width:.3f}",
                f"{r['own_s']:.3f}" if r["own_s"] else "–",
                f"{r['nominal_s']:.3f}" if r["nominal_s"] else "–",
                pct(off(r["nominal_s"], r["own_s"])),
                "yes" if r["moved"] else "no",
            ]
            for r in rows
        ],
        "wall: the seconds of each window over the steps trained in it, mean ± 95% CI over the "
        "windows (with DiLoCo a step's wall time holds its share of the outer sync, where the "
        "fast domain waits for the slow one); own: the job's own step on rank 0, a fast one "
        "(compute and synchronisation); predicted: the model's when it placed the job, the even "
        "run's from the scenario's figures (every domain alike), the split run's from the "
        "profiled ones; off: predicted against own. The profiled entries' fp32 TFLOP/s: "
        + ", ".join(f"{d} {v:.4f}" for d, v in speeds.items()),
    )


if __name__ == "__main__":
    main()
