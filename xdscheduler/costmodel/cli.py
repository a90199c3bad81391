"""`xds calibrate`: fit a software stack's constants to measured runs and write its profile."""

from __future__ import annotations

import json
import re
from pathlib import Path

from xdscheduler.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit a software stack's step-time constants to measured runs",
        description="fit the step-time model's constants to one software stack's measured "
        "runs (a CSV with the columns of benchmarks/published_runs.csv), print "
        "model vs measured for the fitted and the held-out runs, and write the "
        "profile that xds plan --profile and xds estimate --profile use",
    )
    p.add_argument("csv", help="measured runs")
    p.add_argument(
        "--stack",
        required=True,
        help="the software stack to fit (rows of other stacks are left out): "
        "megatron-core, fsdp, fsdp2, ...",
    )
    p.add_argument(
        "--hold-out",
        metavar="REGEX",
        help="hold out the configurations whose label matches (default: every "
        "other configuration, ordered by model size and GPU count)",
    )
    p.add_argument(
        "--accelerators",
        action="append",
        metavar="FILE",
        help="a catalog file of the runs' own accelerators (xds profile --out "
        "writes one; repeatable)",
    )
    p.add_argument("--out", required=True, help="the profile to write (YAML)")
    p.add_argument("--force", action="store_true", help="replace an existing profile")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_calibrate)


def cmd_calibrate(args) -> None:
    import yaml

    from xdscheduler.costmodel.calibration import calibrate, median_error, of_stack
    from xdscheduler.costmodel.plan import STACKS
    from xdscheduler.textfile import output_file, write_atomic

    if args.stack not in STACKS:
        raise UserError(f"unknown stack {args.stack!r}; known: {', '.join(STACKS)}")
    from xdscheduler import catalog

    for path in args.accelerators or []:
        catalog.load_catalog(path)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UserError(f"{out} exists: --force to replace it")
    output_file(out, "profile")  # before the fit
    modelled, left_out = _runs(args.csv)
    runs = [r for r in modelled if of_stack(r, args.stack)]
    if not runs:
        raise UserError(f"{args.csv} has no modelled runs of stack {args.stack!r}")
    held = _held_out(runs, args.hold_out)
    profile = calibrate(runs, held, data=str(args.csv))
    text = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    write_atomic(out, text, "profile")
    summary = {
        "stack": profile.stack,
        "profile": str(out),
        "constants": profile.constants,
        "fitted": len(profile.fitted),
        "held_out": len(profile.held_out),
        "median_abs_error_fitted": median_error(profile.fitted),
        "median_abs_error_held_out": median_error(profile.held_out),
        "left_out": left_out,
    }
    if args.json:
        print(json.dumps({**summary, "rows": profile.model_dump(mode="json")}, indent=2))
        return
    _print(profile, summary)


def _runs(path: str) -> tuple[list, list[dict]]:
    """The CSV's modelled runs, and the rows left out, each with its reason."""
    from xdscheduler.costmodel.calibration import load_runs

    runs, skipped = load_runs(Path(path))
    left_out = [
        {
            "source": row.get("source"),
            "model": row.get("model"),
            "gpu": row.get("gpu"),
            "reason": why,
        }
        for row, why in skipped
    ]
    return runs, left_out


def _held_out(runs, pattern: str | None) -> list[bool]:
    """The runs held out, named before anything is fitted."""
    from xdscheduler.costmodel.calibration import held_out_by_default

    if pattern is None:
        return held_out_by_default(runs)
    try:
        rx = re.compile(pattern)
    except re.error as err:
        raise UserError(f"--hold-out {pattern!r} is not a regular expression: {err}") from None
    held = [bool(rx.search(r.label)) for r in runs]
    if not any(held):
        raise UserError(f"--hold-out {pattern!r} matches none of the {len(runs)} runs")
    return held


def _print(profile, summary) -> None:
    print(
        f"{profile.stack}: fitted on {summary['fitted']} runs, "
        f"{summary['held_out']} held out; wrote {summary['profile']}"
    )
    print("  " + ", ".join(f"{k}={v:.4g}" for k, v in profile.constants.items()))
    for role, rows in (("fit", profile.fitted), ("held out", profile.held_out)):
        for r in rows:
            print(
                f"  {role:8}  {r.configuration:60}  {r.metric:22} measured {r.measured:10,.4g}"
                f"  model {r.model:10,.4g}  {r.error:+.1%}"
            )
    print(
        f"median |error|: fitted {summary['median_abs_error_fitted']:.1%}, held out "
        f"{summary['median_abs_error_held_out']:.1%}"
    )
    if summary["left_out"]:
        n = len(summary["left_out"])
        print(f"left out, not modelled: {n} row{'s' * (n != 1)}")
        for row in summary["left_out"]:
            print(f"  {row['source']}, {row['model']} on {row['gpu']}: {row['reason']}")
