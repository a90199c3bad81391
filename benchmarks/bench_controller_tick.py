"""One controller tick at scale: 64 domain actors × 128 nodes × 8 accelerators.

A tick gathers every domain's report (12 indicators and its link samples), rebuilds the view,
and decides for the queue. Run: python -m benchmarks.bench_controller_tick [--domains N]
The baseline is the same tick with the domains as plain objects (no actor calls).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._table import print_table
from xdscheduler.network.dynamics import Dynamics
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.domain import LocalDomains
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs

TYPES = ["H100-SXM", "H800", "A800", "H20", "Ascend-910B", "A100-80GB", "MI300X", "H200"]
MODELS = ["llama2-7b", "llama3-8b", "llama2-13b", "llama2-70b", "gpt3-175b"]


def scenario(domains: int, nodes: int, queued: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    doc = {
        "name": f"bench_{domains}x{nodes}",
        "domains": [
            {
                "name": f"d{i}",
                "location": {"city": f"c{i}"},
                "nodes": [{"accelerator": TYPES[i % len(TYPES)], "count": nodes}],
                "intra_domain_gbps": 400,
            }
            for i in range(domains)
        ],
        "links": [
            {
                "a": f"d{i}",
                "b": f"d{j}",
                "bandwidth_gbps": float(rng.uniform(1, 10)),
                "rtt_ms": float(rng.uniform(3, 40)),
            }
            for i in range(domains)
            for j in range(i + 1, domains)
            if rng.random() < 0.2
        ],
        "jobs": [
            {
                "name": f"job{k}",
                "model": MODELS[k % len(MODELS)],
                "global_batch": 1024,
                "tokens": 1e12,
                "gpus": {"min": 64, "max": 512},
            }
            for k in range(queued)
        ],
    }
    return parse_scenario(doc)


def tick_times(engine: Engine, ticks: int = 3) -> list[float]:
    """Seconds of each of the first ticks, five minutes of simulated time apart."""
    out = []
    for k in range(ticks):
        start = time.perf_counter()
        engine.step(300.0 * k)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument(
        "--queued",
        type=int,
        default=24,
        help="queued jobs (the planner decides for 8 of them per tick)",
    )
    args = parser.parse_args()
    scn = scenario(args.domains, args.nodes, args.queued)
    dyn = Dynamics.generate(scn, 0, 3600.0)

    def engine(domains) -> Engine:  # every job arrives at 0: queued at the first tick
        return Engine(StudyInputs(scn, scn.jobs, dyn, 1.0), PlannerPolicy(scn.weights), domains)

    local = engine(LocalDomains(scn.domains, dyn))
    local_s = float(np.median(tick_times(local)))

    import ray

    from xdscheduler.ray_cluster import start_local
    from xdscheduler.runtime.gateway import ActorDomains

    start_local()
    start = time.perf_counter()
    actors = ActorDomains(scn, dyn)
    ray.get([a.ping.remote() for a in actors.actors])
    startup_s = time.perf_counter() - start
    on_ray = engine(actors)
    ticks = tick_times(on_ray)
    tick_s = float(np.median(ticks))
    reports_s = min(_reports_time(actors, 300.0 * k) for k in range(1, 4))
    gpus = args.domains * args.nodes * 8
    print_table(
        f"Controller tick, {args.domains} domains x {args.nodes} nodes x 8 ({gpus:,} "
        f"accelerators), {args.queued} queued jobs",
        ["what", "seconds", "vs local"],
        [
            ["tick, domains as plain objects (baseline), median of 3", local_s, 1.0],
            ["tick, domains as Ray actors, median of 3", tick_s, tick_s / local_s],
            ["  slowest of the 3 ticks on Ray", max(ticks), max(ticks) / local_s],
            ["  gather all 64 reports", reports_s, reports_s / local_s],
            ["actor start-up (once)", startup_s, startup_s / local_s],
        ],
        note=f"placed {sum(r.placement is not None for r in on_ray.runs)} of {args.queued} "
        f"jobs in 3 ticks; target: tick <= 1 s -> {'met' if tick_s <= 1.0 else 'NOT met'}",
    )
    ray.shutdown()


def _reports_time(actors, t: float) -> float:
    start = time.perf_counter()
    actors.reports(t)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
