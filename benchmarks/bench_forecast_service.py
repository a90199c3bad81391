"""POST /forecast latency over real HTTP with Ray Serve running on 2 CPUs.

The Serve app's deployment holds history models fitted on a Helios cluster's occupancy (vc6YE
from the shared data when present, else a synthetic series); each request carries the last day of
demand, at the series' own step, and three known jobs.
Run: python -m benchmarks.bench_forecast_service
The baseline is the same pure `forecast` function called in-process (no HTTP, no Serve).
"""

from __future__ import annotations

import argparse
import http.client
import json
import time

import numpy as np
import pandas as pd

from benchmarks._table import print_table
from xdscheduler.errors import UserError
from xdscheduler.forecast import series
from xdscheduler.forecast.hybrid import Forecaster
from xdscheduler.forecast.service import ForecastRequest, KnownJobIn, forecast
from xdscheduler.network.measurements import shared_data_dir
from xdscheduler.textfile import data_stem


def demand() -> tuple[str, series.Series]:
    """Helios vc6YE ($XDS_DATA_DIR/demand, else shared/data/demand), else the folder's first
    virtual cluster, else a synthetic series (a minute a step)."""
    try:
        folder = shared_data_dir("demand", "the Helios CSVs") / "helios_earth"
        found = [folder / "vc6YE.csv", *sorted(folder.glob("vc*.csv"))]
    except UserError:
        found = []
    path = next((p for p in found if p.is_file()), None)
    if path is not None:
        return f"Helios {data_stem(path)}", series.load(path, "occupancy")
    rng = np.random.default_rng(0)
    y = np.clip(200 + np.cumsum(rng.choice([-8, 0, 8], 20 * 1440, p=[0.03, 0.94, 0.03])), 0, 400)
    idx = pd.date_range("2024-01-01", periods=len(y), freq="min")
    return "synthetic", series.Series("synthetic", "occupancy", y.astype(float), idx, 1)


def body(s: series.Series, k: int) -> ForecastRequest:
    """The day of demand ending `k` steps before the series' end, at the series' step."""
    end = len(s.values) - 1 - k
    jobs = [KnownJobIn(name=f"j{i}", gpus=8 * (i + 1), finish_min=15.0 * (i + 1)) for i in range(3)]
    return ForecastRequest(
        history=s.values[end - s.per_day + 1 : end + 1].tolist(),
        step_min=s.step_min,
        end_time=s.index[end].to_pydatetime(),
        known_jobs=jobs,
    )


def percentiles(times: list[float]) -> tuple[float, float]:
    ms = np.array(times) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    name, s = demand()
    fc = Forecaster.fit(s.values, s.index, s.step_min, "occupancy", horizons_min=(10, 60))
    reqs = [body(s, k) for k in range(args.requests)]

    local = []
    for r in reqs:
        start = time.perf_counter()
        forecast(r, fc)
        local.append(time.perf_counter() - start)

    import ray
    from ray import serve

    from xdscheduler.ray_cluster import free_port, start_local
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import application
    from xdscheduler.serving.gate import api_token, bearer

    start_local()
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    token = api_token()
    serve.run(
        application(load_scenario(default_scenario_path()), token, forecaster=fc),
        name="xds",
        route_prefix="/",
        blocking=False,
    )
    payloads = [r.model_dump_json().encode() for r in reqs]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", **bearer(token)}
    for p in payloads[:20]:  # warm-up: first requests pay for routing and imports
        conn.request("POST", "/forecast", p, headers)
        conn.getresponse().read()
    remote, status = [], set()
    for p in payloads:
        start = time.perf_counter()
        conn.request("POST", "/forecast", p, headers)
        resp = conn.getresponse()
        json.loads(resp.read())
        remote.append(time.perf_counter() - start)
        status.add(resp.status)
    serve.shutdown()
    ray.shutdown()

    (l50, l99), (r50, r99) = percentiles(local), percentiles(remote)
    print_table(
        f"POST /forecast, {name}, a day of history ({s.per_day} steps of {s.step_min} min) "
        f"+ 3 known jobs, {args.requests} requests, Ray on 2 CPUs",
        ["what", "p50 ms", "p99 ms", "p99 vs in-process"],
        [
            ["pure forecast() in-process (baseline)", l50, l99, 1.0],
            ["POST /forecast over HTTP (Serve, 1 replica)", r50, r99, r99 / l99],
        ],
        note=f"HTTP status codes: {sorted(status)}; target: p99 <= 50 ms -> "
        f"{'met' if r99 <= 50 else 'NOT met'}",
    )


if __name__ == "__main__":
    main()
