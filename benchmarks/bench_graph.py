"""The resource graph: how long an update from a report takes, how long the graph takes to become
the encoder's input, and how soon a killed domain actor shows as down in it.

Run: python -m benchmarks.bench_graph [--domains 64] [--kills 5]
Baseline, in the same run: rebuilding every node from all reports at once instead of updating
one node per report.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import ray

from benchmarks._table import print_table, time_calls
from benchmarks.bench_controller_tick import scenario
from xdscheduler.network.dynamics import Dynamics
from xdscheduler.perception.graph import ResourceGraph, padded
from xdscheduler.planner.view import ClusterView
from xdscheduler.ray_cluster import connect
from xdscheduler.rl.module import graph_data
from xdscheduler.runtime.gateway import ActorDomains
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.sim.domain import LocalDomains, accepted


def graph_rows(scn, label: str, repeats: int) -> list[list]:
    dyn = Dynamics.generate(scn, 0, 3600.0)
    reports = LocalDomains(list(scn.domains), dyn).reports(0.0)
    names = [d.name for d in scn.domains]
    graph = ResourceGraph(names)
    one = reports[0]

    def update_one():
        graph.update(one, accepted(one, 0.0)[0])

    def rebuild_all():
        fresh = ResourceGraph(names)
        for r in reports:
            fresh.update(r, accepted(r, 0.0)[0])

    view = ClusterView.from_scenario(scn).with_indicators(graph.values)
    base_x = time_calls(rebuild_all, repeats, unit_s=1e-6)
    base = np.median(base_x)
    rows = []
    for name, fn in (
        ("rebuild from all reports (baseline)", None),
        ("update from one report", update_one),
        ("to torch_geometric Data", lambda: graph_data(view)),
    ):
        x = base_x if fn is None else time_calls(fn, repeats, unit_s=1e-6)
        rows.append(
            [
                label,
                name,
                float(np.median(x)),
                float(np.percentile(x, 99)),
                float(np.median(x) / base),
            ]
        )
    if len(names) <= 8:
        x = time_calls(lambda: padded(view), repeats, unit_s=1e-6)
        rows.append(
            [
                label,
                "padded arrays (RLlib observation)",
                float(np.median(x)),
                float(np.percentile(x, 99)),
                float(np.median(x) / base),
            ]
        )
    return rows


def recognition_s(kills: int) -> list[float]:
    """Wall time from killing a domain actor to the graph marking that domain down."""
    scn = load_scenario(default_scenario_path())
    out = []
    for k in range(kills):
        domains = ActorDomains(scn, Dynamics.generate(scn, k, 3600.0))
        graph = ResourceGraph([d.name for d in scn.domains])
        victim = k % len(scn.domains)
        t, start = 0.0, time.perf_counter()
        ray.kill(domains.actors[victim])
        while graph.status()[scn.domains[victim].name] == "up":
            t += 1.0
            for d, report in zip(scn.domains, domains.reports(t), strict=True):
                if report is None:
                    graph.mark_down(d.name, t)
                else:
                    graph.update(report, accepted(report, t)[0])
        out.append(time.perf_counter() - start)
        for a in domains.actors:
            ray.kill(a)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", type=int, default=64)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    rows = graph_rows(load_scenario(default_scenario_path()), "five_domains", args.repeats)
    rows += graph_rows(scenario(args.domains, 128, 0), f"{args.domains} domains", args.repeats)
    print_table(
        "resource graph: update and conversion",
        ["scenario", "operation", "median µs", "p99 µs", "vs baseline"],
        rows,
    )
    connect(None)
    secs = recognition_s(args.kills)
    print(
        f"\nkilled domain actor shown down in the graph: median {np.median(secs):.3f} s, "
        f"max {max(secs):.3f} s over {len(secs)} kills (target: seconds)"
    )


if __name__ == "__main__":
    main()
