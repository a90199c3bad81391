"""The Serve app under load: 20 concurrent clients on loopback, against one client.

Each client is a closed loop (its next request leaves when its last one is answered) over
one keep-alive connection, all in one asyncio loop (aiohttp) so that the clients themselves
cost the 2 cores little. Bodies: the agent steps met in seeded decision states of the default
scenario (`POST /policy/act`) and a day of one-minute demand history with known jobs
(`POST /forecast`). The baseline, measured in the same run, is one client alone.
Run: python -m benchmarks.bench_endpoint_load [--clients 20] [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time

import numpy as np

from benchmarks._table import print_table
from xdscheduler.forecast.service import ForecastRequest, KnownJobIn
from xdscheduler.ray_cluster import free_port
from xdscheduler.rl.agents import upper_options
from xdscheduler.rl.candidates import choices, upper_observation
from xdscheduler.rl.pareto import fixed_states
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.gate import api_token, bearer
from xdscheduler.serving.schemas import act_body

TARGET_P99_MS = {"/policy/act": 100.0, "/forecast": 200.0}


def act_bodies(scn, n_states: int) -> list[bytes]:
    out = []
    for job, view, now in fixed_states(n_states):
        ch = choices(job, view, scn.weights, now)
        if ch is not None and len(ch.groups) > 1:
            out.append(json.dumps(act_body("upper", upper_observation(ch, 1), upper_options(ch),
                                           job.name)).encode())
    return out


def forecast_bodies(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    minutes = np.arange(1440)
    out = []
    for i in range(n):
        demand = 400 + 150 * np.sin(2 * np.pi * (minutes + 37 * i) / 1440)
        demand += rng.normal(0, 20, minutes.size)
        jobs = [KnownJobIn(name=f"j{k}", gpus=int(rng.integers(8, 64)),
                           finish_min=float(rng.uniform(0, 120))) for k in range(8)]
        out.append(ForecastRequest(history=np.round(demand, 1).tolist(), known_jobs=jobs,
                                   series=f"s{i % 4}", end_time="2026-01-05T12:00:00")
                   .model_dump_json().encode())
    return out


async def load(url: str, path: str, bodies: list[bytes], clients: int, seconds: float,
               headers: dict) -> tuple[np.ndarray, int]:
    """Latencies (ms) of every request answered in `seconds`, and how many were not 200."""
    import aiohttp

    latencies, failed = [], 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=clients)

    async def client(session, k: int) -> None:
        nonlocal failed
        for body in itertools.cycle(bodies[k % len(bodies):] + bodies[:k % len(bodies)]):
            if time.perf_counter() > deadline:
                return
            start = time.perf_counter()
            async with session.post(url + path, data=body, headers=headers) as r:
                await r.read()
                failed += r.status != 200
            latencies.append((time.perf_counter() - start) * 1000)

    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session, k) for k in range(clients)))
    return np.array(latencies), failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--states", type=int, default=60)
    args = ap.parse_args()

    from ray import serve

    from xdscheduler.serving.app import APP_NAME, start

    scn = load_scenario(default_scenario_path())
    token = api_token()
    headers = {"Content-Type": "application/json", **bearer(token)}
    url = start(None, None, scn, port=free_port(), token=token)
    bodies = {"/policy/act": act_bodies(scn, args.states), "/forecast": forecast_bodies(16)}
    rows = []
    for path, body in bodies.items():
        asyncio.run(load(url, path, body, 4, 2.0, headers))  # warm the replicas
        one_p99 = None
        for clients, seconds in ((1, args.seconds / 3), (args.clients, args.seconds)):
            x, failed = asyncio.run(load(url, path, body, clients, seconds, headers))
            p50, p99 = np.percentile(x, [50, 99])
            one_p99 = one_p99 or p99  # the baseline: one client
            label = "1 client (baseline)" if clients == 1 else f"{clients} clients"
            verdict = "" if clients == 1 else "meets" if p99 <= TARGET_P99_MS[path] else "MISSES"
            rows.append([f"{path}, {label}", len(x), len(x) / seconds, p50, p99, p99 / one_p99,
                         failed, verdict])
    serve.delete(APP_NAME)
    print_table(f"Serve app under load, {scn.name}: closed-loop clients on loopback",
                ["route, clients", "requests", "req/s", "p50 ms", "p99 ms", "p99 vs 1 client",
                 "not 200", "p99 target"],
                rows)


if __name__ == "__main__":
    main()
