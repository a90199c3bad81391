"""`xds compare`: argparse wiring over the grid runner and the comparison's report."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from xdscheduler.arguments import SEED_LIMIT, number, seed
from xdscheduler.errors import UserError
from xdscheduler.scenario import MAX_LOAD
from xdscheduler.textfile import unclaimed

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SCENARIOS = ("five_domains.yaml", "skyplane_six_regions.yaml")
DEFAULT_LOADS = "0.6,0.8,1.0,1.2"
DEFAULT_SEEDS = "10"
# 12 h of arrivals: the default grid (2 scenarios × 7 policies × 10 seeds × 4 loads) was
# extrapolated from timed cells to about 25 minutes on 2 cores (24 h: about 40 minutes, too
# close to an hour once the cores are shared); docs/results.md, "Comparing policies".
# `planner-waits` made it 8 policies: 640 studies, about a seventh longer.
DEFAULT_HOURS = 12.0
DEFAULT_BASELINE = "planner-single-domain"  # the strongest single-domain scheduler
MAX_SEEDS = 1000
LOAD = number(float, 0, MAX_LOAD, above=True)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="policies over a grid of scenarios × loads × seeds, means with 95%% CIs",
        description="Run every policy over scenarios × offered loads × seeds, each cell a study "
        "(a Ray task, or in this process with --local), and write the means with 95% "
        "confidence intervals, the changes against a baseline paired by seed, and plots.",
    )
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenario files (default: five_domains and skyplane_six_regions)",
    )
    p.add_argument("--policies", help="comma-separated (default: every registered policy)")
    p.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        help=f"a count N (seeds 0..N-1) or a list a,b,c (one seed: 'a,'); default {DEFAULT_SEEDS}",
    )
    p.add_argument(
        "--loads",
        default=DEFAULT_LOADS,
        help=f"offered loads, comma-separated (default {DEFAULT_LOADS})",
    )
    p.add_argument(
        "--hours",
        type=number(float, 0, 24 * 30.0, above=True),
        default=DEFAULT_HOURS,
        help=f"hours of job arrivals per study (default {DEFAULT_HOURS:g})",
    )
    p.add_argument(
        "--baseline", help=f"the policy the others are compared with (default {DEFAULT_BASELINE})"
    )
    p.add_argument(
        "--generated-only",
        action="store_true",
        help="leave the scenarios' listed jobs out: the generated workload alone",
    )
    p.add_argument(
        "--giant-shares",
        metavar="X,Y,...",
        help="fix the share of the offered accelerator-time in giants (jobs asking "
        "for more than the largest domain's free share), a cell per share, "
        "e.g. 0,0.05,0.2,0.4: the gain as a curve (listed jobs left out)",
    )
    p.add_argument(
        "--arrivals",
        default="poisson",
        help="poisson (the generator's), or replayed from a trace in the shared "
        "data: philly, helios, acme",
    )
    p.add_argument("--out", default="xds-compare", help="output folder (default xds-compare)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the comparison (or the files of its names) --out holds",
    )
    p.add_argument("--address", help="Ray cluster address (default: an embedded local Ray)")
    p.add_argument("--local", action="store_true", help="no Ray: the studies one after another")
    p.add_argument(
        "--readme",
        metavar="FILE",
        help="replace the text between <!-- compare:begin --> and "
        "<!-- compare:end --> in FILE with the table",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--from",
        dest="saved",
        metavar="DIR[,DIR...]",
        help="run nothing: write the tables, plots (and --readme) again from the "
        "studies saved in DIR by an earlier run, into DIR; several DIRs, runs of one grid "
        "each with its own policies (one added later), joined into --out",
    )
    p.set_defaults(fn=cmd_compare)


def parse_seeds(text: str) -> list[int]:
    """'10' -> seeds 0..9; '3,5,8' (or '7,') -> those seeds."""
    try:
        count = int(text) if "," not in text else None
        seeds = [seed(s) for s in text.split(",") if s.strip()] if count is None else []
    except (ValueError, argparse.ArgumentTypeError):
        raise UserError(
            f"--seeds takes a count or comma-separated integers from 0 to "
            f"{SEED_LIMIT - 1:,}, got {text!r}"
        ) from None
    if count is not None and not 1 <= count <= MAX_SEEDS:
        raise UserError(f"--seeds: a count from 1 to {MAX_SEEDS}, got {count}")
    seeds = list(range(count)) if count is not None else seeds
    if not seeds or len(seeds) > MAX_SEEDS:
        raise UserError(f"--seeds: give a count or a list of 1 to {MAX_SEEDS} seeds, got {text!r}")
    return seeds


def parse_loads(text: str) -> list[float]:
    """'0.6,0.8' -> those offered loads, each finite in (0, MAX_LOAD]."""
    try:
        return [LOAD(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError as err:
        raise UserError(
            f"--loads takes comma-separated offered loads in (0, {MAX_LOAD:g}]: {err}"
        ) from None


def parse_shares(text: str | None) -> list[float] | None:
    """'0,0.05,0.2' -> those shares of the offered load in giants; None: as drawn."""
    if text is None:
        return None
    try:
        shares = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        shares = []
    if not shares or not all(0 <= x < 1 for x in shares):  # also refuses NaN
        raise UserError(f"--giant-shares takes comma-separated numbers in [0, 1), got {text!r}")
    return shares


def _scenario_paths(given: list[str]) -> list[Path]:
    if given:
        return [Path(s) for s in given]
    from xdscheduler.scenario import default_scenario_path

    folder = default_scenario_path().parent
    return [folder / name for name in DEFAULT_SCENARIOS]


def cmd_compare(args) -> None:
    from xdscheduler.report.compare import write
    from xdscheduler.report.readme import check_readme, splice_readme

    saved = _saved(args) if args.saved else None
    # the curve along the giants' share has a section of its own beside the table by load
    shares = saved[2]["grid"].get("giant_shares") if saved else args.giant_shares
    section = "compare" if shares is None else "giants"
    if args.readme:
        check_readme(Path(args.readme), section)  # before the grid, not after it
    out, cells, meta = _rejoined(args, *saved) if saved else _fresh(args)
    doc = write(out, cells, meta)
    if args.readme:
        splice_readme(Path(args.readme), section, doc["markdown"], provenance(meta))
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(doc["markdown"])
    print(
        f"{meta['cells_run']} studies in {meta['wall_s'] / 60:.1f} min on {meta['cpus']} "
        f"CPUs ({meta['runtime']}); files in {out}/",
        file=sys.stderr,
    )


def _fresh(args) -> tuple[Path, pd.DataFrame, dict]:
    """The grid the arguments ask for, run: every argument checked, then the output, before
    any study runs."""
    from xdscheduler.report.compare import check_out

    grid = _grid(args)
    out = check_out(_unclaimed(Path(args.out), args.force))
    return out, *_run(args, grid)


def _rejoined(args, out: Path, cells: pd.DataFrame, meta: dict) -> tuple[Path, pd.DataFrame, dict]:
    """Saved cells with the baseline asked for, and the command that runs the joined runs as
    one, the grid checked as a run would check it."""
    from xdscheduler.runtime.compare import Grid

    if args.baseline:
        if args.baseline not in set(cells["policy"]):
            raise UserError(
                f"baseline {args.baseline!r} is not among the policies saved "
                f"in {args.saved}: {', '.join(sorted(set(cells['policy'])))}"
            )
        meta["grid"]["baseline"] = args.baseline
    grid = Grid.of(**meta["grid"])  # what the tables say of it: as a run would check it
    if meta["command"] is None:  # runs joined: the command that runs them as one
        meta["command"] = command_line(grid, args)
    return out, cells, meta


def _saved(args) -> tuple[Path, pd.DataFrame, dict]:
    """Where the tables go and the saved cells and meta they read: one folder's, written into
    it again, or several runs' of one grid joined, written into --out."""
    from xdscheduler.registry import names
    from xdscheduler.report.compare import join, load

    folders = [Path(f.strip()) for f in args.saved.split(",") if f.strip()]
    if len(folders) == 1:
        return folders[0], *load(folders[0])
    cells, meta = join([load(f) for f in folders], names())
    return _unclaimed(Path(args.out), args.force), cells, meta


def _unclaimed(out: Path, force: bool) -> Path:
    """`out`, unless `force` is not given and it holds an earlier comparison (its studies may
    have taken hours, and `--from` reads them again) or any file a comparison writes."""
    from xdscheduler.report.compare import FILES

    if force:
        return out
    if (out / "compare.parquet").exists():
        raise UserError(
            f"{out} holds an earlier comparison: --force to replace it, or pick another --out"
        )
    unclaimed(out, FILES, "the comparison")
    return out


def _grid(args):
    """The grid the arguments ask for; UserError naming the first bad one."""
    from xdscheduler.registry import parse_policies
    from xdscheduler.runtime.compare import Grid

    return Grid.of(
        scenarios=_scenario_paths(args.scenarios),
        policies=parse_policies(args.policies),
        seeds=parse_seeds(args.seeds),
        loads=parse_loads(args.loads),
        hours=args.hours,
        baseline=args.baseline or DEFAULT_BASELINE,
        arrivals=args.arrivals,
        listed=not args.generated_only,
        giant_shares=parse_shares(args.giant_shares),
    )


def _run(args, grid) -> tuple:
    """The grid run: its cells and what the report says about them."""
    from xdscheduler.runtime.compare import run_grid

    with _progress_to_stderr():
        run = run_grid(grid, address=args.address, local=args.local)
    meta = {
        "grid": grid.model_dump(mode="json"),
        "command": command_line(grid, args),
        "wall_s": run.wall_s,
        "runtime": run.runtime,
        "cpus": run.cpus,
        "cells_run": len(run.cells),
        "listed_jobs": run.listed_jobs,
    }
    return run.cells, meta


def provenance(meta: dict) -> str:
    """The line above the results table: what command made it, against what, over what."""
    grid = meta["grid"]
    return (
        f"Generated by `{meta['command']}`: baseline {grid['baseline']}, offered loads "
        f"{', '.join(map(str, grid['loads']))}, {len(grid['seeds'])} seeds, "
        f"{grid['hours']:g} h of {grid['arrivals']} arrivals per study, "
        f"{meta['cells_run']} studies in {meta['wall_s'] / 60:.0f} min on {meta['cpus']} "
        f"CPUs ({meta['runtime']})"
        + (f", in {meta['runs']} runs joined (--from)." if meta.get("runs", 1) > 1 else ".")
    )


def command_line(grid, args) -> str:
    """The `xds compare` command that runs this grid again (defaults left out)."""
    from xdscheduler.registry import names

    words = ["xds", "compare", *map(str, grid.scenarios)]
    if grid.policies != names():
        words += ["--policies", ",".join(grid.policies)]
    seeds = grid.seeds
    words += [
        "--seeds",
        str(len(seeds))
        if seeds == list(range(len(seeds)))
        else ",".join(map(str, seeds)) + ("," if len(seeds) == 1 else ""),
    ]
    words += ["--loads", ",".join(map(str, grid.loads)), "--hours", f"{grid.hours:g}"]
    if grid.baseline != DEFAULT_BASELINE:
        words += ["--baseline", grid.baseline]
    if grid.arrivals != "poisson":
        words += ["--arrivals", grid.arrivals]
    if not grid.listed:
        words += ["--generated-only"]
    if grid.giant_shares is not None:
        words += ["--giant-shares", ",".join(map(str, grid.giant_shares))]
    words += ["--readme", args.readme] if args.readme else []
    return shlex.join(words)


@contextlib.contextmanager
def _progress_to_stderr():
    """The grid runner's progress lines on standard error while the command runs (where `xds`
    has not set up its own logging: then they are on it already)."""
    logger = logging.getLogger("xdscheduler")
    if logger.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # one line each, not a second through the root logger
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
