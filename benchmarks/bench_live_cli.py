"""How fast `xds jobs` answers on a running live cluster: the command as a user types it (over
HTTP, `xdscheduler.live.client`), against `curl` of the same route (the floor: one request, no
Python), and against the way it asked before, as a Ray driver of the cluster (join, one actor
call, leave). Each is run `--repeats` times in turn; the table gives the median and the worst
wall time of a whole process, and each one's ratio to curl's median.

    python -m benchmarks.bench_live_cli [--state FILE] [--repeats 10]

It uses the cluster the state file records (default: XDS_CLUSTER, else ~/.xds/cluster.json);
with `--up` it starts `scenarios/local_three_domains.yaml` itself (as root) and stops it after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._live import maybe_up
from benchmarks._table import print_table
from xdscheduler.live.client import default_state_path

REPO = Path(__file__).resolve().parents[1]
RAY_DRIVER = """
from xdscheduler.live import cluster
state = cluster.connect()
from xdscheduler.live import controller
rows = controller.ask(controller.controller(state).list_jobs)
cluster.disconnect()
print(len(rows))
"""


def timed(cmd: list[str], env: dict, repeats: int) -> np.ndarray:
    out = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        out[i] = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd[:4])} failed: {done.stderr[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", help="the cluster's state file")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--up", action="store_true", help="start a local cluster for the run")
    args = ap.parse_args(argv)
    xds = [sys.executable, "-m", "xdscheduler"]
    scratch = tempfile.mkdtemp(prefix="bench-live-cli-")
    state = (
        Path(args.state)
        if args.state
        else (Path(scratch) / "cluster.json" if args.up else default_state_path())
    )
    env = {**os.environ, "XDS_CLUSTER": str(state)}
    try:
        with maybe_up(state, args.up):
            recorded = json.loads(state.read_text())
            curl = [
                "curl",
                "-sf",
                "-o",
                "/dev/null",
                "-H",
                f"Authorization: Bearer {recorded['api_token']}",
                f"{recorded['api']}/jobs",
            ]
            runs = {
                "curl GET /jobs": timed(curl, env, args.repeats),
                "xds jobs": timed([*xds, "jobs"], env, args.repeats),
                "xds jobs --json": timed([*xds, "jobs", "--json"], env, args.repeats),
                "as a Ray driver (before)": timed(
                    [sys.executable, "-c", RAY_DRIVER], env, max(args.repeats // 3, 1)
                ),
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    floor = float(np.median(runs["curl GET /jobs"]))
    rows = [
        [name, len(t), float(np.median(t)), float(t.max()), float(np.median(t)) / floor]
        for name, t in runs.items()
    ]
    print_table(
        f"`xds jobs` on a running live cluster ({os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f})",
        ["command", "runs", "median (s)", "worst (s)", "x curl"],
        rows,
        f"xds jobs: {np.median(runs['xds jobs']):.2f} s median, "
        f"{np.median(runs['xds jobs']) / floor:.0f} x curl's {floor * 1000:.0f} ms; "
        f"as a Ray driver it took {np.median(runs['as a Ray driver (before)']):.1f} s",
    )


if __name__ == "__main__":
    main()
