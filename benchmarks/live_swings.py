"""The single-job experiment's swings on the live cluster, measured against the model.

Run as root from the repository root (network namespaces and tc):

    python -m benchmarks.live_swings [--gbps 0.005] [--phases 8] [--phase-s 30] [--seed 0]

It brings up its own cluster of scenarios/local_three_domains.yaml (its own state file, with the
shipped plain-dp profile), submits gpt-wide (3-4 workers, more than any domain has: it runs
across domains), and once the job trains, swings every link of the cluster, both ways, as the
single-job experiment does: phase k sets each link to B0 (1 + e_k), e the study's mean-reverting
process (|e| <= 0.3, seeded; `xds bench job` draws it the same way), with `xds links set`. Per
phase: the steps the job trained over the phase's seconds (wall), the step the job itself
reports (its compute and synchronisation, without its input batches, reports and checkpoints),
the model's step at the end of the phase (`xds jobs`: the controller's estimate on the links as
its agents read them, corrected from the steps it saw) and the nominal one it was placed with,
and the model's error against both. The
bandwidth is set low (5 Mbit/s) so that the outer sync of the job's 2 MB of weights weighs in
its step: on the scenario's 0.25-1 Gbit/s links it takes milliseconds, and a swing of 30% would
show nothing. Ends with `xds down`, whatever happened.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

from benchmarks._live import PROFILE, REPO, SCENARIO, LocalCluster
from benchmarks._table import print_table
from xdscheduler.live.jobs import load_job
from xdscheduler.network.dynamics import Dynamics
from xdscheduler.report.single_job import SAMPLE_S, SWING
from xdscheduler.scenario import load_scenario

JOB = REPO / "scenarios" / "jobs" / "gpt-wide.yaml"


def job_row(cluster: LocalCluster, name: str) -> dict:
    return next(j for j in json.loads(cluster.xds("jobs", "--json"))["jobs"] if j["job"] == name)


def swing_factors(seed: int, phases: int) -> np.ndarray:
    """(phases, links) 1 + e per link of the scenario: the study's process, a sample a phase."""
    scn = load_scenario(SCENARIO)
    scn = scn.model_copy(
        update={"links": [lk.model_copy(update={"fluctuation": SWING}) for lk in scn.links]}
    )
    bw = Dynamics.generate(scn, seed, phases * SAMPLE_S, SAMPLE_S).bandwidth_gbps
    index = {d.name: i for i, d in enumerate(scn.domains)}
    return np.array(
        [
            [bw[k, index[lk.a], index[lk.b]] / lk.bandwidth_gbps for lk in scn.links]
            for k in range(phases)
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gbps", type=float, default=0.005, help="B0 of every link, Gbit/s")
    ap.add_argument("--phases", type=int, default=8)
    ap.add_argument("--phase-s", type=float, default=30.0, help="seconds each swing holds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--steps", type=int, default=2000, help="the job's steps (it is cancelled at the end)"
    )
    args = ap.parse_args()
    links = load_scenario(SCENARIO).links
    factors = swing_factors(args.seed, args.phases)
    with tempfile.TemporaryDirectory(prefix="xds-live-swings-") as tmp:
        start = time.perf_counter()
        with LocalCluster.up(Path(tmp) / "cluster.json", "--profile", str(PROFILE)) as cluster:
            rows, moves = run(cluster, Path(tmp), links, factors, args)
        wall = time.perf_counter() - start
    report(rows, args, wall)
    print()
    print_table(
        f"The controller's moves of the job ({len(moves)})",
        ["at step", "to", "step s there", "step s moved to", "saves s", "costs s"],
        moves,
        "saves: what the move was predicted to save within the controller's horizon "
        "(live.controller.MOVE_HORIZON_S); it moves when that is twice the cost",
    )


def set_links(cluster: LocalCluster, links, rates: np.ndarray) -> None:
    for lk, rate in zip(links, rates, strict=True):
        cluster.xds("links", "set", lk.a, lk.b, f"{rate:.6f}", "--both")


def wait_links(cluster: LocalCluster, gbps: float, timeout_s: float = 60.0) -> None:
    """Until every domain's agent reports each of its links at `gbps`: the controller plans
    with what they report, and a job placed before would be placed on the old rates."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        domains = json.loads(cluster.xds("domains", "--json"))["domains"]
        rates = [r["rate_gbps"] for d in domains for r in d.get("links", [])]
        if rates and all(abs(r / gbps - 1) < 0.02 for r in rates):
            return
        time.sleep(1.0)
    raise RuntimeError(f"the agents never reported the links at {gbps} Gbit/s: {rates}")


def run(
    cluster: LocalCluster, tmp: Path, links, factors: np.ndarray, args
) -> tuple[list[dict], list[list]]:
    """The job placed on B0 everywhere, then one row per phase of swings."""
    set_links(cluster, links, np.full(len(links), args.gbps))
    wait_links(cluster, args.gbps)
    spec = {**load_job(str(JOB)).model_dump(), "name": "gpt-swing", "steps": args.steps}
    (tmp / "job.yaml").write_text(yaml.safe_dump(spec))
    cluster.xds("submit", str(tmp / "job.yaml"))
    row = before = wait(cluster, "gpt-swing", lambda r: r["step"] >= 10)
    rows = []
    try:
        for k, f in enumerate(factors):
            rates = args.gbps * f
            set_links(cluster, links, rates)
            time.sleep(3.0)  # the agents read the buckets every second; the first steps settle
            first, t0 = job_row(cluster, "gpt-swing"), time.monotonic()
            time.sleep(args.phase_s)
            last, t1 = job_row(cluster, "gpt-swing"), time.monotonic()
            steps = last["step"] - first["step"]
            # since the last phase's end: a restart may straddle the phase's first seconds
            moved = last["attempts"] != before["attempts"] or last["domains"] != before["domains"]
            before = last
            rows.append(
                {
                    "phase": k,
                    "gbps": float(rates.mean()),
                    "min_gbps": float(rates.min()),
                    "steps": steps,
                    "measured_s": (t1 - t0) / steps if steps else None,
                    "own_s": last["measured_step_s"],
                    "model_s": last["corrected_step_s"],
                    "predicted_s": first["corrected_step_s"],
                    "nominal_s": last["predicted_step_s"],
                    "domains": last["domains"],
                    "moved": moved,
                }
            )
    finally:
        moves = why_moved(cluster, "gpt-swing")
        cluster.xds("cancel", "gpt-swing")
    print(f"placed on {row['domains']} ({row['plan']})", file=sys.stderr)
    return rows, moves


def why_moved(cluster: LocalCluster, name: str) -> list[list]:
    """Each time the controller set the job moving: at what step, where to, the step times
    it compared, and what it expected to save against what moving costs."""
    events = json.loads(cluster.xds("logs", name, "--json"))["events"]
    kinds = Counter(e["event"] for e in events)
    print("the job's events: " + ", ".join(f"{k} {n}" for k, n in kinds.items()), file=sys.stderr)
    return [
        [
            e["at_step"],
            "+".join(e["domains"]),
            f"{e['from_step_s']:.3f}",
            f"{e['step_s']:.3f}",
            f"{e['gain_s']:.1f}",
            f"{e['cost_s']:.1f}",
        ]
        for e in events
        if e["event"] == "moving"
    ]


def wait(cluster: LocalCluster, name: str, until, timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = job_row(cluster, name)
        if until(row):
            return row
        time.sleep(1.0)
    raise RuntimeError(f"{name} never got there: {row}")


def off(model_s: float | None, measured_s: float | None) -> float | None:
    """model / measured - 1; None where either is missing."""
    return None if not (model_s and measured_s) else model_s / measured_s - 1


def known(x: float | None) -> float:
    """`x` of a row with both times (the rows of `ok`), where `off` is never None."""
    assert x is not None
    return x


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}%"


def report(rows: list[dict], args, wall_s: float) -> None:
    table = [
        [
            r["phase"],
            f"{1000 * r['gbps']:.2f}",
            f"{1000 * r['min_gbps']:.2f}",
            r["steps"],
            r["measured_s"] or "–",
            r["own_s"] or "–",
            r["predicted_s"] or "–",
            pct(off(r["predicted_s"], r["own_s"])),
            r["model_s"] or "–",
            pct(off(r["model_s"], r["measured_s"])),
            r["nominal_s"] or "–",
            "+".join(r["domains"]) + (" (moved)" if r["moved"] else ""),
        ]
        for r in rows
    ]
    ok = [
        r
        for r in rows
        if r["measured_s"] and r["own_s"] and r["model_s"] and r["predicted_s"] and not r["moved"]
    ]
    wall_err = [abs(known(off(r["model_s"], r["measured_s"]))) for r in ok]
    ahead_err = [abs(known(off(r["predicted_s"], r["own_s"]))) for r in ok]
    # the forecast to beat: the last phase's step again, on the same placement
    same = [(a, b) for a, b in itertools.pairwise(rows) if b in ok and a["own_s"]]
    again_err = [abs(known(off(a["own_s"], b["own_s"]))) for a, b in same]
    outside = [1 - r["own_s"] / r["measured_s"] for r in ok]
    corr = (
        np.corrcoef([r["min_gbps"] for r in ok], [r["measured_s"] for r in ok])[0, 1]
        if len(ok) > 2
        else float("nan")
    )
    print_table(
        f"gpt-wide across domains while every link swings as {1000 * args.gbps:g} Mbit/s x "
        f"(1 + e), |e| <= {SWING:.0%}, {args.phases} phases of {args.phase_s:g} s, seed "
        f"{args.seed} ({wall_s / 60:.1f} min with the cluster's start and stop)",
        [
            "phase",
            "mean Mbit/s",
            "min Mbit/s",
            "steps",
            "wall s/step",
            "job's own s/step",
            "predicted s/step",
            "predicted vs own",
            "model s/step",
            "model vs wall",
            "nominal s/step",
            "domains",
        ],
        table,
        "wall: the phase's seconds over the steps trained in them; own: the step the job "
        "reports (compute and synchronisation, whole DiLoCo rounds, the median of its recent "
        "ones: what the model predicts and the controller corrects from); predicted: the "
        "controller's step for the placement on the phase's links as read, 3 s into the "
        "phase, from what it learnt before (a forecast: no step of the phase seen); model: "
        "the same at the phase's end, corrected from its steps. Over "
        f"{len(ok)} phases without a move: median |predicted/own - 1| "
        f"{100 * np.median(ahead_err):.1f}% (the last phase's own step again: "
        f"{100 * np.median(again_err) if again_err else float('nan'):.1f}% over {len(same)}), "
        f"|model/wall - 1| {100 * np.median(wall_err):.1f}%; "
        f"the run's time outside its steps (input batches, reports, checkpoints every "
        f"few steps) a median {100 * np.median(outside):.1f}% of wall; correlation of the "
        f"narrowest link's rate with the wall step {corr:+.2f}"
        if ok
        else "no phase measured",
    )


if __name__ == "__main__":
    main()
