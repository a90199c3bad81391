"""Input-data movement under ±30% WAN swings: fixed shards (baseline) vs adaptive movement.

Run: python -m benchmarks.bench_datamove [--seed 0] [--steps 3000]
Baseline, in the same run on the same seeded bandwidth series: fixed 4 GB shards, prefetch depth
1, eager transfers that share the link with the gradient collective. Also an ablation (adaptive
without moving work) and the ratio adaptive / fixed at other input volumes per step.
"""

from __future__ import annotations

import argparse

from benchmarks._table import print_table
from xdscheduler.datamove import AdaptivePolicy, DataJob, compare

COLS = (
    "idle_wait_fraction",
    "blocking_rate",
    "steps_per_s",
    "moved_work_share",
    "mean_shard_gb",
    "mean_depth",
    "peak_buffer_gb",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    job = DataJob(steps=args.steps)
    main_run = compare(job, args.seed)
    no_move = compare(job, args.seed, AdaptivePolicy(move_max=0.0))["adaptive"]
    rows = [
        [name] + [run[c] for c in COLS]
        for name, run in (
            ("fixed (baseline)", main_run["fixed"]),
            ("adaptive", main_run["adaptive"]),
            ("adaptive, no work moved", no_move),
        )
    ]
    r = main_run["ratio"]
    rows.append(
        [
            "adaptive / fixed",
            r["idle_wait_fraction"],
            r["blocking_rate"],
            r["steps_per_s"],
            "",
            "",
            "",
            "",
        ]
    )
    for gb in (0.8, 1.0, 1.5):
        rr = compare(DataJob(input_gb=gb, grad_gb=job.grad_gb, steps=args.steps), args.seed)
        rows.append(
            [
                f"ratio, input {gb:g} GB/step",
                rr["ratio"]["idle_wait_fraction"],
                rr["ratio"]["blocking_rate"],
                rr["ratio"]["steps_per_s"],
                "",
                "",
                "",
                "",
            ]
        )
    bw = main_run["bandwidth_gbs"]
    print_table(
        f"Data movement, {job.steps} steps, seed {args.seed}: {job.input_gb:g} GB input and "
        f"{job.grad_gb:g} GB gradients per {job.compute_s:g} s step over a {job.link_gbps:g} "
        f"Gb/s link ({bw['min']:.2f}-{bw['max']:.2f} GB/s)",
        ["policy", "idle wait", "blocking", "steps/s", "moved", "shard GB", "depth", "buffer GB"],
        rows,
        "idle wait: accelerator time waiting for input / wall time; blocking: share of steps "
        "whose compute waited for input or whose collective shared the link with a transfer.",
    )


if __name__ == "__main__":
    main()
