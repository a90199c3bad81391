"""The reward-weight sweep against exhaustive evaluation of the candidates on fixed states.

Trains one trial per weighting of rllib_configs/hppo_sweep.yaml under Tune (each fine-tuned
from the shipped per-decision policy, trained under weightings drawn at random), then counts
the Pareto-optimal choices (supported by the sweep's weightings, found exhaustively) that the
trained agents pick. Baselines, measured in the same run: the shipped per-decision policy,
untouched, told each weighting only through its inputs; and the study policy the same way.
Run: python -m benchmarks.bench_pareto_sweep [--samples 6] [--iterations 3] [--states 40]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._table import print_table
from xdscheduler.ray_cluster import connect
from xdscheduler.rl.agents import SHIPPED, SHIPPED_DECISION, Agents
from xdscheduler.rl.pareto import coverage, fixed_states, plot_front
from xdscheduler.rl.train import SWEEP_CONFIG, load_config, train
from xdscheduler.scenario import Weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--states", type=int, default=40)
    ap.add_argument("--out", default=None, help="folder for the trials and the plot")
    args = ap.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="xds-sweep-"))
    connect(None)
    trials = train(
        load_config(SWEEP_CONFIG),
        out,
        samples=args.samples,
        iterations=args.iterations,
        init=SHIPPED_DECISION,
        verbose=0,
    )
    weights = [Weights(**t["weights"]) for t in trials]
    states = fixed_states(args.states)
    study = coverage(states, [(w, Agents(w, SHIPPED)) for w in weights])
    base = coverage(states, [(w, Agents(w, SHIPPED_DECISION)) for w in weights])
    swept = coverage(
        states, [(w, Agents(w, t["module"])) for w, t in zip(weights, trials, strict=True)]
    )
    plot = plot_front(swept, weights, out)
    rows = []
    for name, r in (
        ("study policy, weights as input only", study),
        ("per-decision policy, weights as input only (baseline)", base),
        (f"sweep: {len(trials)} trials × {args.iterations} iterations", swept),
    ):
        rows.append(
            [
                name,
                r["states"],
                r["pareto_choices"],
                r["coverage"],
                r["picks_on_front"],
                r["coverage"] / max(base["coverage"], 1e-9),
            ]
        )
    print_table(
        "Pareto coverage of the reward-weight sweep (default scenario)",
        [
            "policy",
            "states",
            "Pareto choices",
            "coverage",
            "picks on front",
            "coverage vs baseline",
        ],
        rows,
        f"target: coverage ≥ 0.85; front plot: {plot}",
    )
    for w, terms in zip(weights, swept["mean_terms"].values(), strict=True):
        if terms:
            print(
                f"  w=({w.efficiency:g}, {w.utilization:g}, {w.cost:g}): mean efficiency "
                f"{terms[0]:.3f}, utilisation {terms[1]:.3f}, cost {terms[2]:.4f}"
            )


if __name__ == "__main__":
    main()
