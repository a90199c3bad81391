"""`POST /forecast`: request/response schemas, a pure `forecast` function, and a thin Ray
Serve deployment (FastAPI ingress) that holds the fitted history models.

Run: serve.run(ForecastDeployment.bind(forecaster), name="forecast", route_prefix="/forecast")
then POST /forecast and GET /forecast/healthz.
"""

# No `from __future__ import annotations` here: FastAPI reads the handler's real types.
import math
from datetime import datetime

import numpy as np
import pandas as pd
from fastapi import FastAPI
from pydantic import BaseModel, Field
from ray import serve

from xdscheduler.forecast.hybrid import Forecaster, HorizonForecast
from xdscheduler.forecast.structure import KnownJob, structural_demand


class JobIn(BaseModel):
    name: str
    gpus: int = Field(gt=0)
    finish_min: float = Field(ge=0)  # predicted minutes from now until it frees its GPUs
    start_min: float = Field(default=0.0, ge=0)  # when a planned job starts holding them

    @classmethod
    def from_known(cls, job: KnownJob) -> "JobIn":
        """From `structure.known_job(...)` (a scenario job, its plan, its step time)."""
        return cls(
            name=job.name, gpus=job.gpus, finish_min=job.finish_s / 60, start_min=job.start_s / 60
        )


class ForecastRequest(BaseModel):
    history: list[float] = Field(min_length=1)  # demand per step, oldest first (≥ a day helps)
    step_min: int = Field(default=1, gt=0)
    end_time: datetime | None = None  # time of the last value (default: now)
    known_jobs: list[JobIn] = []


class ForecastResponse(BaseModel):
    current: float
    horizons: list[HorizonForecast]  # a dataclass: pydantic validates and dumps it
    backup_pool_gpus: int  # headroom above the expected demand to the 97.5% quantile
    preallocate_gpus: int  # expected growth over the longest horizon: reserve ahead
    frees_min: dict[str, float]  # known job → minute it frees its GPUs (inf: not in horizon)


def forecast(
    request: ForecastRequest, forecaster: Forecaster | None, horizons_min=(10, 60)
) -> ForecastResponse:
    """Pure: a fitted `Forecaster` (or None: persistence) and a request → the forecast."""
    values = np.asarray(request.history, float)
    end = pd.Timestamp(request.end_time or datetime.now()).tz_localize(None)
    index = pd.date_range(end=end.floor("min"), periods=len(values), freq=f"{request.step_min}min")
    jobs = [
        KnownJob(j.name, j.gpus, j.finish_min * 60, j.start_min * 60) for j in request.known_jobs
    ]
    longest = max(forecaster.models) if forecaster and forecaster.models else max(horizons_min)
    known = structural_demand(jobs, longest, request.step_min) if jobs else None
    if forecaster is not None and forecaster.models and forecaster.step_min == request.step_min:
        out = forecaster.forecast(values, index, known)
    else:
        out = Forecaster(request.step_min).persistence(values, horizons_min, known)
    return _response(float(values[-1]), out, known)


def _response(current: float, out: list[HorizonForecast], known) -> ForecastResponse:
    return ForecastResponse(
        current=current,
        horizons=list(out),
        backup_pool_gpus=math.ceil(max(max(f.hi95 - f.mean for f in out), 0.0)),
        preallocate_gpus=math.ceil(max(out[-1].mean - current, 0.0)),
        frees_min=known.frees if known is not None else {},
    )


class _PrefixRoot:
    """ASGI: serve POST /forecast itself (the prefix's root) rather than a 307 to /forecast/,
    which clients do not follow for POST."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path", "") == scope.get("root_path") != "":
            scope = {**scope, "path": scope["path"] + "/", "raw_path": None}
        await self.app(scope, receive, send)


app = FastAPI(title="xdscheduler forecast")
app.add_middleware(_PrefixRoot)


@serve.deployment(ray_actor_options={"num_cpus": 0.25})
@serve.ingress(app)
class ForecastDeployment:
    """Holds a Forecaster fitted on the controller's demand history (or none: persistence)."""

    def __init__(self, forecaster: Forecaster | None = None):
        # Fitted by the caller (on the controller's demand history): no training per request.
        self.forecaster = forecaster

    @app.post("/")
    def post_forecast(self, request: ForecastRequest) -> ForecastResponse:
        return forecast(request, self.forecaster)

    @app.get("/healthz")
    def healthz(self) -> dict:
        return {"ok": True, "fitted": bool(self.forecaster and self.forecaster.models)}
