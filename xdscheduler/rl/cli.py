"""`xds train`: training the agents under Tune."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from xdscheduler.arguments import number
from xdscheduler.textfile import output_file, output_folder, write_atomic


def cmd_train(args) -> None:
    from xdscheduler.ray_cluster import connect
    from xdscheduler.rl.train import SWEEP_CONFIG, load_config, sweep_weights, train

    cfg = load_config(args.config or (SWEEP_CONFIG if args.samples > 1 else None))
    sweep_weights(cfg, args.samples)  # refuses more samples than the config's sweep lists
    out = output_folder(Path(args.out))
    for name in ("train_summary.json", "trials.json", "pareto_front.png"):
        output_file(out / name)  # before the training, not after it
    connect(args.address)
    # With --json, standard output carries one JSON object: Tune's chatter goes to stderr.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        trials = train(
            cfg,
            out,
            samples=args.samples,
            iterations=args.iterations,
            init=args.init,
            verbose=0 if args.json else 1,
        )
    summary: dict = {"trials": trials}
    if args.samples > 1:
        from xdscheduler.rl.pareto import sweep_report

        summary["pareto"] = sweep_report(trials, out, states=args.states)
    write_atomic(out / "train_summary.json", json.dumps(summary, indent=2))
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for t in trials:
        print(
            f"{t['weights'] or 'scenario weights'}: {t['iterations']} iterations, "
            f"episode return {t['episode_return_mean']:.3f}; modules in {t['module']}"
        )
    if "pareto" in summary:
        p = summary["pareto"]
        print(
            f"Pareto coverage {p['coverage']:.1%} of {p['pareto_choices']} Pareto-optimal "
            f"choices over {p['states']} states; front plot {p['plot']}"
        )


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train the hierarchical PPO agents under Tune",
        description="train the hierarchical PPO agents under Tune",
    )
    p.add_argument(
        "--config",
        help="training config (default: rllib_configs/hppo.yaml, the "
        "study policy; with --samples N > 1, hppo_sweep.yaml)",
    )
    p.add_argument(
        "--samples",
        type=number(int, 1, 1000),
        default=1,
        help="trials: 1 trains on the config's weights; N > 1 sweeps the first N "
        "weightings of the config and draws their Pareto front",
    )
    p.add_argument(
        "--iterations", type=number(int, 1, 1_000_000), help="training iterations per trial"
    )
    p.add_argument(
        "--init",
        help="start from these trained modules (e.g. the shipped policy, "
        "xdscheduler/rl/trained/decision for a sweep)",
    )
    p.add_argument(
        "--states",
        type=number(int, 1, 100_000),
        default=40,
        help="fixed states for the Pareto check",
    )
    p.add_argument("--out", default="xds-train", help="output folder (default xds-train)")
    p.add_argument("--address", help="Ray cluster address (default: an embedded local Ray)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_train)
