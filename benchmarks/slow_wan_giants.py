"""Giants behind slow links: does every job larger than a domain start, and how soon?

The planner spreads a giant (a job no domain can hold) only on a placement that keeps KEEP_MFU of
the efficiency it would reach inside one domain, a floor that falls as the giant waits (divided
by its response ratio). On slow links no spread may keep it on arrival; a floor that never fell
would leave such a giant queued for ever, which `greedy-cross-domain` never does. This runs the
scenario with every link's bandwidth divided by `--slower` (both directions; RTT, swings and
price as they are) and prints, per load, each policy's giants never started and its giants' and
fitting jobs' mean JCT against `planner-single-domain`, paired by seed.

    python -m benchmarks.slow_wan_giants [--scenario scenarios/skyplane_six_regions.yaml]
        [--slower 50] [--seeds 10] [--loads 0.8,1.2] [--hours 12] [--local] [--out DIR]

~2 min for the defaults on 2 cores (Ray), ~10 min with --local.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from benchmarks._compare import by_cell, change_cell, run_compare, scenario_variant
from benchmarks._table import print_table

log = logging.getLogger("benchmarks.slow_wan_giants")
BASELINE = "planner-single-domain"
POLICIES = (BASELINE, "planner", "greedy-cross-domain")


def slower_wan(path: Path, factor: float, out: Path) -> Path:
    """The scenario with every link's bandwidth divided by `factor`, written to `out`."""

    def slower(link: dict) -> dict:
        keys = ("bandwidth_gbps", "bandwidth_gbps_ba")
        return link | {k: link[k] / factor for k in keys if link.get(k) is not None}

    return scenario_variant(path, out, f"wan_{factor:g}x_slower", slower)


def rows_of(doc: dict) -> list[list]:
    paired, summary = by_cell(doc)
    rows = []
    for load in doc["grid"]["loads"]:
        for policy in POLICIES:
            mean = summary[(load, policy, "giant_never_started")]["mean"]
            changes = [
                change_cell(paired[(load, policy, f)]) if policy != BASELINE else "–"
                for f in ("giant_mean_jct_s", "fit_mean_jct_s")
            ]
            rows.append([f"{load:g}", policy, f"{mean:.1f}", *changes])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/skyplane_six_regions.yaml")
    ap.add_argument("--slower", type=float, default=50.0, help="divide every link's bandwidth")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--loads", default="0.8,1.2")
    ap.add_argument("--hours", type=float, default=12.0)
    ap.add_argument("--local", action="store_true", help="no Ray: the studies in this process")
    ap.add_argument("--out", help="keep the comparison here (default: a temporary folder)")
    args = ap.parse_args()
    if args.slower <= 0:
        ap.error(f"--slower must be positive, got {args.slower:g}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        path = slower_wan(Path(args.scenario), args.slower, out)
        log.info("links %g x slower: %s", args.slower, path)
        doc = run_compare(
            path, list(POLICIES), args.seeds, args.loads, args.hours, out / "compare", args.local
        )
    print_table(
        f"giants behind slow links: {Path(args.scenario).stem}, every link {args.slower:g}x "
        f"slower; against {BASELINE}, paired by seed, ± 95% CI over {args.seeds} seeds "
        f"(* significant); {time.perf_counter() - start:.0f} s",
        ["load", "policy", "giants never started", "giants' JCT", "fits' JCT"],
        rows_of(doc),
        "a giant never started is charged its remaining work at ideal speed after the "
        "study's end (a lower bound)",
    )


if __name__ == "__main__":
    main()
