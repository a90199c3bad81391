"""The Serve app under load: 20 concurrent clients against one, in three configurations
measured in the same run, and where the time of one request goes.

Each client is a closed loop (its next request leaves when its last one is answered) over
one keep-alive connection, all in one asyncio loop (aiohttp) so that the clients themselves
cost the cores little. Bodies: the agent steps met in seeded decision states of the default
scenario (`POST /policy/act`) and a day of one-minute demand history with known jobs
(`POST /forecast`). Configurations, each on a Ray of its own started in a child process
(Serve's processes read their ingress settings when they start):
  baseline    one replica answering HTTP itself, each agent step's forward pass alone (as
              `xds serve` served before batching)
  batched     the same, agent steps in flight batched into one forward pass (`xds serve`)
  2 replicas  batched, autoscaled from 1 to 2 replicas behind Serve's HAProxy ingress
              (`xds serve --replicas 2`); measured once the second replica serves
  2 replicas behind Serve's proxy  the same behind Serve's own proxy actor (a Ray that
              `xds serve` did not start, as with --address), once the second replica serves
The baseline of each row is one client on the same configuration; "vs baseline" compares 20
clients' throughput with the baseline configuration's, measured in this run.
Run: python -m benchmarks.bench_endpoint_load [--clients 20] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from datetime import datetime

import numpy as np

from benchmarks._table import print_table, time_calls
from xdscheduler.forecast.service import ForecastRequest, KnownJobIn
from xdscheduler.rl.agents import upper_options
from xdscheduler.rl.candidates import choices, upper_observation
from xdscheduler.rl.pareto import fixed_states
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.schemas import act_body

TARGET_P99_MS = {"/policy/act": 100.0, "/forecast": 200.0}
CONFIGS = {
    "baseline": {"batch": 1, "replicas": 1},
    "batched": {"batch": 32, "replicas": 1},
    "2 replicas": {"batch": 32, "replicas": 2},
    "2 replicas behind Serve's proxy": {"batch": 32, "replicas": 2, "proxy": True},
}


def act_bodies(scn, n_states: int) -> list[bytes]:
    out = []
    for job, view, now in fixed_states(n_states):
        ch = choices(job, view, scn.weights, now)
        if ch is not None and len(ch.groups) > 1:
            out.append(
                json.dumps(
                    act_body("upper", upper_observation(ch, 1), upper_options(ch), job.name)
                ).encode()
            )
    return out


def forecast_bodies(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    minutes = np.arange(1440)
    out = []
    for i in range(n):
        demand = 400 + 150 * np.sin(2 * np.pi * (minutes + 37 * i) / 1440)
        demand += rng.normal(0, 20, minutes.size)
        jobs = [
            KnownJobIn(
                name=f"j{k}", gpus=int(rng.integers(8, 64)), finish_min=float(rng.uniform(0, 120))
            )
            for k in range(8)
        ]
        out.append(
            ForecastRequest(
                history=np.round(demand, 1).tolist(),
                known_jobs=jobs,
                series=f"s{i % 4}",
                end_time=datetime(2026, 1, 5, 12, 0, 0),
            )
            .model_dump_json()
            .encode()
        )
    return out


async def load(
    url: str, path: str, bodies: list[bytes], clients: int, seconds: float, headers: dict
) -> tuple[np.ndarray, int]:
    """Latencies (ms) of every request answered in `seconds`, and how many were not 200."""
    import aiohttp

    latencies, failed = [], 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=clients)

    async def client(session, k: int) -> None:
        nonlocal failed
        for body in itertools.cycle(bodies[k % len(bodies) :] + bodies[: k % len(bodies)]):
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


def replica_cpu_s() -> dict[int, float]:
    """CPU seconds each of the app's replica processes has used so far."""
    import psutil

    return {
        p.pid: p.info["cpu_times"].user + p.info["cpu_times"].system
        for p in psutil.process_iter(["cmdline", "cpu_times"])
        if "XdsService" in " ".join(p.info["cmdline"] or []) and p.info["cpu_times"]
    }


def cpu_since(before: dict[int, float]) -> float:
    """CPU seconds the replicas used since `before` (a replica started since counts whole)."""
    return sum(t - before.get(pid, 0.0) for pid, t in replica_cpu_s().items())


def wait_for_replicas(
    n: int, url: str, bodies: list[bytes], headers: dict, timeout_s: float = 120
) -> None:
    """Keep 20 clients on /policy/act until `n` replicas run (autoscaling adds them)."""
    from ray import serve
    from ray.serve.schema import ReplicaState

    from xdscheduler.serving.app import APP_NAME

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        asyncio.run(load(url, "/policy/act", bodies, 20, 3.0, headers))
        states = serve.status().applications[APP_NAME].deployments["XdsService"].replica_states
        if states.get(ReplicaState.RUNNING, 0) >= n:
            return
    raise SystemExit(f"autoscaling did not reach {n} replicas within {timeout_s:.0f} s")


def measure(config: str, clients: int, seconds: float) -> dict:
    """In a child process: serve `config` on a Ray of its own and load it; the figures."""
    from ray import serve

    from xdscheduler.ray_cluster import free_port
    from xdscheduler.serving.app import APP_NAME, start
    from xdscheduler.serving.gate import api_token, bearer

    scn = load_scenario(default_scenario_path())
    token = api_token()
    headers = {"Content-Type": "application/json", **bearer(token)}
    options = dict(CONFIGS[config])
    if options.pop("proxy", False):
        from xdscheduler.ray_cluster import start_local

        start_local()  # a Ray already running: `start` deploys behind its proxy
    url = start(None, None, scn, port=free_port(), token=token, **options)
    bodies = {"/policy/act": act_bodies(scn, 60), "/forecast": forecast_bodies(16)}
    if CONFIGS[config]["replicas"] > 1:
        wait_for_replicas(CONFIGS[config]["replicas"], url, bodies["/policy/act"], headers)
    out = {}
    for path, body in bodies.items():
        asyncio.run(load(url, path, body, 4, 2.0, headers))  # warm
        for n, secs in ((1, seconds / 2), (clients, seconds)):
            cpu, client_cpu = replica_cpu_s(), time.process_time()
            x, failed = asyncio.run(load(url, path, body, n, secs, headers))
            out[f"{path} {n}"] = {
                "requests": len(x),
                "req_s": len(x) / secs,
                "failed": failed,
                "p50_ms": float(np.percentile(x, 50)),
                "p99_ms": float(np.percentile(x, 99)),
                "replica_cpu_ms": cpu_since(cpu) / len(x) * 1000,
                "client_cpu_ms": (time.process_time() - client_cpu) / len(x) * 1000,
            }
    serve.delete(APP_NAME)
    return out


def in_process_ms(scn, bodies: list[bytes]) -> dict[str, float]:
    """Median ms of an agent step's forward pass (alone, and per step in a batch of 20) and
    of the whole route through the app's ASGI interface in this process (no HTTP, no Serve,
    no batching)."""
    from xdscheduler.rl.agents import Agents
    from xdscheduler.serving.app import XdsService, app
    from xdscheduler.serving.gate import TOKEN_ENV, api_token
    from xdscheduler.serving.inprocess import in_process
    from xdscheduler.serving.schemas import ActRequest, observation_arrays

    agents = Agents(scn.weights)
    space = agents.modules["upper"].observation_space
    obs = [
        observation_arrays(ActRequest.model_validate_json(b).observation.model_dump(), space)
        for b in bodies[:20]
    ]
    token = os.environ.get(TOKEN_ENV) or api_token()
    in_process(app, XdsService, scn.model_dump(), token, batch=1)
    loop = asyncio.new_event_loop()

    async def route(body: bytes) -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/policy/act",
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {token}".encode()),
            ],
        }

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            assert message.get("status", 200) == 200, message

        await app(scope, receive, send)

    cycle = itertools.cycle(bodies)
    return {
        "forward, one step": float(
            np.median(time_calls(lambda: agents.logits("upper", obs[0]), 200))
        ),
        "forward, a step of a batch of 20": float(
            np.median(time_calls(lambda: agents.batch_logits([("upper", o) for o in obs]), 50))
        )
        / len(obs),
        "the route in process (ASGI, no HTTP)": float(
            np.median(time_calls(lambda: loop.run_until_complete(route(next(cycle))), 300))
        ),
    }


def measured(config: str, clients: int, seconds: float, tries: int = 2) -> dict | str:
    """`measure(config)` in a child process; tried again once where Ray failed to start (a
    loaded machine's GCS can miss its start deadline). Why it failed, where it did: the other
    configurations are still reported."""
    for _ in range(tries):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_endpoint_load",
                "--config",
                config,
                "--clients",
                str(clients),
                "--seconds",
                str(seconds),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        print(f"{config}: failed, {why}", file=sys.stderr)
    return why


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated, of {', '.join(CONFIGS)} (default: all)",
    )
    ap.add_argument("--config", choices=list(CONFIGS), help=argparse.SUPPRESS)  # a child's
    args = ap.parse_args()
    if args.config:
        print(json.dumps(measure(args.config, args.clients, args.seconds)))
        return

    load_before = os.getloadavg()[0]
    named = [c.strip() for c in args.configs.split(",")]
    if unknown := [c for c in named if c not in CONFIGS]:
        raise SystemExit(f"--configs: no configuration {unknown[0]!r}; one of {', '.join(CONFIGS)}")
    asked = [c for c in CONFIGS if c in named]
    if "baseline" not in asked:
        asked.insert(0, "baseline")  # every row's ratio is against it
    outcome = {config: measured(config, args.clients, args.seconds) for config in asked}
    load_after = os.getloadavg()[0]
    failed = {c: why for c, why in outcome.items() if isinstance(why, str)}
    results = {c: f for c, f in outcome.items() if not isinstance(f, str)}
    if "baseline" in failed:
        raise SystemExit(f"baseline: {failed['baseline']}")

    rows = []
    for path in TARGET_P99_MS:
        base = results["baseline"][f"{path} {args.clients}"]["req_s"]
        for config, figures in results.items():
            one, many = figures[f"{path} 1"], figures[f"{path} {args.clients}"]
            for n, f in ((1, one), (args.clients, many)):
                verdict = (
                    "" if n == 1 else ("meets" if f["p99_ms"] <= TARGET_P99_MS[path] else "MISSES")
                )
                rows.append(
                    [
                        f"{path}, {config}, {n} client{'s' * (n > 1)}",
                        f["requests"],
                        f["req_s"],
                        f["req_s"] / one["req_s"],
                        "" if n == 1 else f["req_s"] / base,
                        f["p50_ms"],
                        f["p99_ms"],
                        f["replica_cpu_ms"],
                        f["failed"],
                        verdict,
                    ]
                )
    print_table(
        f"Serve app under load: closed-loop clients on loopback, {os.cpu_count()} "
        f"cores, load average {load_before:.2f} before, {load_after:.2f} after",
        [
            "route, configuration, clients",
            "requests",
            "req/s",
            "vs 1 client",
            "vs baseline",
            "p50 ms",
            "p99 ms",
            "replica CPU ms/req",
            "not 200",
            "p99 target",
        ],
        rows,
    )
    for config, why in failed.items():
        print(f"{config}: not measured ({why})")

    scn = load_scenario(default_scenario_path())
    parts = in_process_ms(scn, act_bodies(scn, 60))
    act = "/policy/act"
    times = [[name, ms] for name, ms in parts.items()]
    for config in [c for c in ("baseline", "batched") if c in results]:
        for n in (1, args.clients):
            f = results[config][f"{act} {n}"]
            times.append(
                [
                    f"{config}, {n} client{'s' * (n > 1)}: replica CPU per request",
                    f["replica_cpu_ms"],
                ]
            )
    f = results.get("batched", results["baseline"])[f"{act} 1"]
    times += [
        ["one client: HTTP round trip (p50)", f["p50_ms"]],
        ["one client: the client's own CPU per request", f["client_cpu_ms"]],
    ]
    print()
    print_table(
        "Where one POST /policy/act's time goes (ms; in process: medians)", ["part", "ms"], times
    )


if __name__ == "__main__":
    main()
