"""POST /forecast: the pure function, the schemas, and the Serve deployment over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pandas as pd
import pytest

from tests.conftest import API_TOKEN, AUTH
from xdscheduler.forecast.hybrid import Forecaster
from xdscheduler.forecast.service import ForecastRequest, forecast

PREFIX = "/fitted"  # the app serving the fitted model, beside the default one at /


def demand(days: int = 12, seed: int = 0) -> tuple[np.ndarray, pd.DatetimeIndex]:
    rng = np.random.default_rng(seed)
    n = days * 1440
    steps = rng.choice([-16, -8, 0, 8, 16], n, p=[0.01, 0.02, 0.94, 0.02, 0.01])
    y = np.clip(200 + np.cumsum(steps), 0, 400).astype(float)
    return y, pd.date_range("2024-03-01", periods=n, freq="min")


@pytest.fixture(scope="module")
def fitted() -> tuple[Forecaster, np.ndarray, pd.DatetimeIndex]:
    y, idx = demand()
    return Forecaster.fit(y, idx, 1, "occupancy", horizons_min=(10, 60)), y, idx


def request(y, idx, **kw) -> ForecastRequest:
    return ForecastRequest(history=y[-1440:].tolist(), end_time=idx[-1].to_pydatetime(), **kw)


def test_pure_forecast_with_known_jobs(fitted):
    f, y, idx = fitted
    free = forecast(request(y, idx), f)
    jobs = [{"name": "big", "gpus": 64, "finish_min": 5}]
    ending = forecast(request(y, idx, known_jobs=jobs), f)
    assert [h.horizon_min for h in free.horizons] == [10, 60]
    for a, b in zip(free.horizons, ending.horizons, strict=True):
        assert b.mean < a.mean  # a known job frees 64 GPUs in 5 minutes
        assert b.lo95 <= b.lo80 <= b.mean <= b.hi80 <= b.hi95
    assert ending.frees_min == {"big": 5.0}
    assert free.backup_pool_gpus >= 0 and free.current == y[-1]


def test_persistence_fallback_without_a_model():
    out = forecast(ForecastRequest(history=[5.0, 6.0, 7.0]), None)
    assert out.horizons[0].mean == 7.0 and out.preallocate_gpus == 0


def test_request_validation():
    with pytest.raises(ValueError):
        ForecastRequest(history=[])
    with pytest.raises(ValueError):
        ForecastRequest(history=[1.0], known_jobs=[{"name": "x", "gpus": 0, "finish_min": 1}])


def _post(body: dict, base: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{base}/forecast",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **AUTH},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, {}


def test_serve_deployment_over_http(serve_port, fitted):
    serve = pytest.importorskip("ray.serve")
    base = f"http://127.0.0.1:{serve_port}{PREFIX}"
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import application

    f, y, idx = fitted
    serve.run(
        application(load_scenario(default_scenario_path()), API_TOKEN, forecaster=f),
        name="fitted-forecast",
        route_prefix=PREFIX,
        blocking=False,
    )
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=30) as r:  # open: no token
            assert json.loads(r.read())["forecaster"] == "given"
        body = json.loads(request(y, idx).model_dump_json())
        status, out = _post(body, base)
        assert status == 200
        assert out == json.loads(forecast(request(y, idx), f).model_dump_json())
        assert _post({"history": []}, base)[0] == 422
    finally:
        serve.delete("fitted-forecast")  # only ours: other tests' apps may share the cluster


def test_known_job_in_from_a_known_job():
    from xdscheduler.forecast.service import KnownJobIn
    from xdscheduler.forecast.structure import KnownJob

    j = KnownJobIn.from_known(KnownJob("a", 32, finish_s=1800, start_s=600))
    assert (j.gpus, j.finish_min, j.start_min) == (32, 30.0, 10.0)


def _consultations(days: float = 6.0, every_min: int = 60) -> list[ForecastRequest]:
    """Hourly requests as the controller sends them: its whole 10-minute history so far."""
    y, idx = demand(days=int(np.ceil(days)), seed=3)
    y10, idx10 = y[::10], idx[::10]
    return [
        ForecastRequest(
            history=y10[:k].tolist(),
            step_min=10,
            end_time=idx10[k - 1].to_pydatetime(),
            series="study-a",
            seed=1,
        )
        for k in range(3 * 144, int(days * 144), every_min // 10)
    ]


def test_served_forecast_fits_the_model_the_controller_fits_in_process():
    from types import SimpleNamespace

    from xdscheduler.forecast.service import FIT_DAYS, FittedOnHistory, OnlineModels
    from xdscheduler.serving.app import XdsService

    route = XdsService.func_or_class.forecast  # the route itself, without Serve
    served = SimpleNamespace(forecaster=None, forecasts=OnlineModels())
    local = FittedOnHistory((10, 60))
    fitted = 0
    for req in _consultations():
        a, b = route(served, req), local.answer(req)
        assert a.model_dump_json() == b.model_dump_json()
        plain = forecast(req, None)
        if len(req.history) < FIT_DAYS * 144:
            assert a == plain  # too little history: persistence
        else:
            fitted += a.horizons[-1].mean != plain.horizons[-1].mean
    assert fitted > 0 and local.forecaster is not None
    # Another series sent to the same app gets a model of its own.
    other = req.model_copy(update={"series": "study-b", "history": req.history[: 3 * 144]})
    assert route(served, other) == forecast(other, None)


def test_online_model_refits_daily_and_when_time_goes_back():
    from xdscheduler.forecast.service import FittedOnHistory

    reqs = [r for r in _consultations(days=6.0, every_min=120) if len(r.history) >= 4 * 144]
    model, fits = FittedOnHistory((10, 60)), []
    for r in reqs:
        model.answer(r)
        fits.append(model.fitted_at)
    assert len(set(fits)) == 2  # days 4 and 5: once a day
    model.answer(reqs[0])  # a resumed client: back before the last fit
    assert model.fitted_at == pd.Timestamp(reqs[0].end_time).floor("min")


def test_the_latency_benchmark_sends_a_day_at_the_series_own_step():
    """A 10-minute trace: each request is the day before its end, 144 steps of 10 min (not
    1440 of them, ten days, said to be one a minute)."""
    from benchmarks.bench_forecast_service import body
    from xdscheduler.forecast.series import Series
    from xdscheduler.forecast.service import request_series

    y, idx = demand(days=3)
    s = Series("vc10", "occupancy", y[::10], idx[::10], 10)
    req = body(s, k=5)
    assert (len(req.history), req.step_min) == (144, 10)
    values, index = request_series(req)
    assert index.equals(s.index[-149:-5]) and np.array_equal(values, s.values[-149:-5])
