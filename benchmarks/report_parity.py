"""Report parity: the same `xds run` at another commit and in this working tree, figure for figure.

Run: python -m benchmarks.report_parity [--ref COMMIT] [--local]
The reference commit (default: the one before the study engine was split) is checked out into a
temporary git worktree and run from there; both runs get the same arguments, and every figure of
their report.json is compared (timings aside: wall time, decision milliseconds, the runtime).
Keys renamed since the reference are mapped (see RENAMED). Exit status 1 when any figure differs
by more than 1e-9 relative.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._table import print_table

REPO = Path(__file__).resolve().parents[1]
BEFORE_SPLIT = "ba84618"  # the last commit with the one-class engine
RUNS = {
    "xds run --seed 7": ["--seed", "7"],
    "xds run --seed 7 --faults 1 --hours 6": ["--seed", "7", "--faults", "1", "--hours", "6"],
}
TIMING = ("wall_s", "decision_ms_p50", "decision_ms_p99", "runtime")  # the machine's, not ours
RENAMED = {"cross_domain_cost": "cross_domain_cost_usd", "wan_cost": "wan_cost_usd"}


def flat(x, path: str = "") -> dict[str, object]:
    """Every figure of a JSON value by its path; keys renamed since mapped to their new names."""
    if isinstance(x, dict):
        return {
            k: v
            for key, value in x.items()
            for k, v in flat(value, f"{path}.{RENAMED.get(key, key)}").items()
        }
    if isinstance(x, list):
        return {k: v for i, value in enumerate(x) for k, v in flat(value, f"{path}[{i}]").items()}
    return {path: x}


def _pairs(expected, got):
    """(path, figure then, figure now) of every figure of either, timings aside."""
    a, b = flat(expected), flat(got)
    return [
        (k, a.get(k), b.get(k))
        for k in sorted(a.keys() | b.keys())
        if k.rsplit(".", 1)[-1] not in TIMING
    ]


def _numbers(*values) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def differences(expected, got, rel: float = 1e-9) -> list[str]:
    """Figures that differ by more than `rel` relative (a figure missing and a null are alike),
    timings aside."""
    return [
        f"{k}: {x!r} then, {y!r} now"
        for k, x, y in _pairs(expected, got)
        if x != y and not (_numbers(x, y) and math.isclose(x, y, rel_tol=rel, abs_tol=1e-12))
    ]


def largest_deviation(expected, got) -> float:
    """The largest relative difference between figures present in both."""
    return max(
        (
            abs(x - y) / max(abs(x), abs(y))
            for _, x, y in _pairs(expected, got)
            if _numbers(x, y) and x != y
        ),
        default=0.0,
    )


def run(source: Path, args: list[str], out: Path) -> float:
    """`xds run ARGS --out OUT` with the package at `source`; seconds it took."""
    env = {**os.environ, "PYTHONPATH": str(source), "RAY_USAGE_STATS_ENABLED": "0"}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "xdscheduler.cli", "run", *args, "--out", str(out)],
        cwd=source,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default=BEFORE_SPLIT, help="the commit to compare against")
    ap.add_argument("--local", action="store_true", help="both runs without Ray (same figures)")
    args = ap.parse_args()
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="xds-parity-") as tmp:
        ref = Path(tmp) / "ref"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(ref), args.ref],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        try:
            for k, (name, argv) in enumerate(RUNS.items()):
                argv = [*argv, "--local"] if args.local else argv
                then_s = run(ref, argv, Path(tmp) / f"then{k}")
                now_s = run(REPO, argv, Path(tmp) / f"now{k}")
                then, now = (
                    json.loads((Path(tmp) / f"{w}{k}" / "report.json").read_text())
                    for w in ("then", "now")
                )
                diff = differences(then, now)
                failed += diff
                rows.append(
                    [name, len(flat(now)), len(diff), largest_deviation(then, now), then_s, now_s]
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(ref)],
                cwd=REPO,
                check=False,
                capture_output=True,
            )
    print_table(
        f"report.json figures: {args.ref} against this working tree"
        + (" (no Ray)" if args.local else " (on Ray)"),
        ["run", "figures", "different", "largest relative deviation", "then s", "now s"],
        rows,
        note="different: beyond 1e-9 relative; timings aside",
    )
    for line in failed[:20]:
        print(line)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
