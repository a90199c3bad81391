"""What `POST /forecast` answers, without the server: request and response schemas, a pure
`forecast` function, and the models fitted on the requests' own history (`FittedOnHistory`, what
the controller's demand planning uses in process; one per series in `OnlineModels`, what the
Serve app holds). The route itself is in `xdscheduler.serving.app`.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, field_validator, model_validator

from xdscheduler.errors import UserError
from xdscheduler.forecast.hybrid import Forecaster, HorizonForecast
from xdscheduler.forecast.structure import KnownJob, structural_demand
from xdscheduler.scenario import MAX_DOMAIN_GPUS, MAX_DOMAINS
from xdscheduler.schema import FileModel

MAX_MINUTES = 1e7  # ~19 years: further than any plan looks
MAX_HISTORY = 100_000  # values per request (69 days of minutes)
EARLIEST, LATEST = datetime(1971, 1, 1), datetime(2200, 1, 1)  # within pandas' range


class KnownJobIn(FileModel):
    """A job the caller knows about: when it frees its accelerators, or starts holding them."""

    name: str = Field(max_length=200)
    gpus: int = Field(gt=0, le=MAX_DOMAIN_GPUS)
    # predicted minutes from now until it frees its GPUs; when a planned job starts holding them
    finish_min: float = Field(ge=0, le=MAX_MINUTES)
    start_min: float = Field(default=0.0, ge=0, le=MAX_MINUTES)

    @classmethod
    def from_known(cls, job: KnownJob) -> KnownJobIn:
        """From `structure.known_job(...)` (a scenario job, its plan, its step time)."""
        return cls(
            name=job.name, gpus=job.gpus, finish_min=job.finish_s / 60, start_min=job.start_s / 60
        )


class ForecastRequest(FileModel):
    # demand per step (accelerators), oldest first (≥ a day helps)
    history: list[Annotated[float, Field(ge=0, le=MAX_DOMAIN_GPUS * MAX_DOMAINS)]] = Field(
        min_length=1, max_length=MAX_HISTORY
    )
    step_min: int = Field(default=1, gt=0, le=1440)
    # time of the last value (default: now); ISO 8601 text in JSON
    end_time: datetime | None = Field(default=None, strict=False)
    known_jobs: list[KnownJobIn] = Field(default=[], max_length=10_000)
    # Which demand series the history is (one per controller): a model is fitted per series
    # on the history it sends, once FIT_DAYS of it exist; `seed` seeds that fit.
    series: str = Field(default="default", max_length=200)
    seed: int = Field(default=0, ge=0, lt=1 << 32)

    @field_validator("end_time")
    @classmethod
    def _end_within_calendar(cls, end: datetime | None) -> datetime | None:
        """Checked before the history's start is computed from it: year 1 minus a step would
        overflow datetime."""
        if end is not None and not EARLIEST <= end.replace(tzinfo=None) <= LATEST:
            raise ValueError(
                f"end_time {end.replace(tzinfo=None).isoformat()} must lie between "
                f"{EARLIEST:%Y} and {LATEST:%Y}"
            )
        return end

    @model_validator(mode="after")
    def _within_calendar(self) -> ForecastRequest:
        """The history's first minute lies after EARLIEST too (its last is checked above)."""
        if self.end_time is not None:
            end = self.end_time.replace(tzinfo=None)
            start = end - timedelta(minutes=self.step_min * (len(self.history) - 1))
            if start < EARLIEST:
                raise ValueError(
                    f"the history spans {start:%Y-%m-%d} to {end:%Y-%m-%d}; it "
                    f"must lie between {EARLIEST:%Y} and {LATEST:%Y}"
                )
        return self


class ForecastResponse(BaseModel):
    current: float
    horizons: list[HorizonForecast]  # a dataclass: pydantic validates and dumps it
    backup_pool_gpus: int  # headroom above the expected demand to the 97.5% quantile
    preallocate_gpus: int  # expected growth over the longest horizon: reserve ahead
    # known job → minute it frees its GPUs (None: not within the horizon; JSON has no infinity)
    frees_min: dict[str, float | None]


def forecast(
    request: ForecastRequest, forecaster: Forecaster | None, horizons_min=(10, 60)
) -> ForecastResponse:
    """Pure: a fitted `Forecaster` (or None: persistence) and a request → the forecast."""
    values, index = request_series(request)
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


def request_end(request: ForecastRequest) -> pd.Timestamp:
    """The time of the request's last value, to the minute (now where it gives none)."""
    return pd.Timestamp(request.end_time or datetime.now()).tz_localize(None).floor("min")


def request_series(request: ForecastRequest) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """The request's history as values on a time grid ending at its `end_time`."""
    values = np.asarray(request.history, float)
    index = pd.date_range(
        end=request_end(request), periods=len(values), freq=f"{request.step_min}min"
    )
    return values, index


FIT_DAYS = 4  # history needed before a model is fitted (else persistence with the day's spread)
REFIT = pd.Timedelta(days=1)  # refit once per day of the series' own time


@dataclass
class FittedOnHistory:
    """One demand series' forecaster, fitted on the history its requests carry: first once
    FIT_DAYS of it exist, then again a day later (series time), so a request answers from a
    model that saw nothing after it. The same requests give the same answers wherever this
    runs: in the controller's process or behind POST /forecast."""

    horizons_min: tuple[int, ...] = (10, 60)
    forecaster: Forecaster | None = None
    fitted_at: pd.Timestamp | None = None

    def answer(self, request: ForecastRequest) -> ForecastResponse:
        return forecast(request, self.fitted(request), self.horizons_min)

    @property
    def source(self) -> str:
        """What the last answer came from."""
        return "history model" if self.forecaster is not None else "persistence"

    def fitted(self, request: ForecastRequest) -> Forecaster | None:
        """The model to answer `request` with, refitted first when it is due."""
        if len(request.history) < FIT_DAYS * 1440 // request.step_min:
            return self.forecaster
        end = request_end(request)  # the series is built only for a refit
        # A client resumed from an earlier snapshot sends an older end: refit, never answer
        # from a model that saw its future.
        if self.fitted_at is not None and self.fitted_at <= end < self.fitted_at + REFIT:
            return self.forecaster
        values, index = request_series(request)
        try:
            self.forecaster = Forecaster.fit(
                values, index, request.step_min, "occupancy", self.horizons_min, request.seed
            )
        except UserError:  # too little variety to train on: persistence
            self.forecaster = None
        self.fitted_at = index[-1]
        return self.forecaster


@dataclass
class OnlineModels:
    """`FittedOnHistory` per demand series (a request's `series`), the most recently used
    `limit` kept. Refits take the lock; forecasts run outside it (a refit replaces the
    series' Forecaster, it never changes one in place)."""

    horizons_min: tuple[int, ...] = (10, 60)
    limit: int = 64
    models: OrderedDict = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fitted(self, request: ForecastRequest) -> Forecaster | None:
        with self.lock:
            model = self.models.pop(request.series, None) or FittedOnHistory(self.horizons_min)
            self.models[request.series] = model
            while len(self.models) > self.limit:
                self.models.popitem(last=False)
            return model.fitted(request)


def _response(current: float, out: list[HorizonForecast], known) -> ForecastResponse:
    return ForecastResponse(
        current=current,
        horizons=list(out),
        backup_pool_gpus=math.ceil(max(max(f.hi95 - f.mean for f in out), 0.0)),
        preallocate_gpus=math.ceil(max(out[-1].mean - current, 0.0)),
        frees_min={}
        if known is None
        else {name: m if math.isfinite(m) else None for name, m in known.frees.items()},
    )
