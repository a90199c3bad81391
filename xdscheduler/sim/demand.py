"""Demand planning in a study: the demand forecast's backup pools and holds for known jobs.

Once per simulated hour the controller forecasts its own demand (GPUs held by running jobs plus
GPUs asked for by queued ones, recorded every STEP_MIN minutes) with the jobs it knows:
running jobs free their accelerators when their remaining tokens are trained at today's rate,
and the scenario's own jobs (listed with announced arrival times, unlike the generated
workload) hold their minimum from their arrival. From the answer it:

- sizes each domain's backup pool: the failure-rate pool is the floor; above it, the forecast's
  headroom (97.5% quantile less the expected demand over the next hour) is held as spare nodes,
  but only out of accelerators the forecast expects to stand idle even at that quantile, so
  pools grow when the cluster is quiet and fall back to the floor when it is full;
- pre-allocates for known jobs the forecast sees arriving within the hour: from PREALLOC_LEAD_S
  before a job's arrival its minimum is held back from other jobs (largest free domains first)
  and given back the moment it arrives, so it does not queue behind jobs placed just before.

The forecaster is anything that answers a `ForecastRequest`: `forecast.service.FittedOnHistory`
in process (the default), or `POST /forecast` of the Serve application when the study runs with
`--serve` (`serving.client.ForecastClient`); both fit the same history model on the history each
request carries (once FIT_DAYS of it exist, again each simulated day; persistence with the day's
spread before), so both answer alike.
"""

from __future__ import annotations

import copy
import math
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pandas as pd

from xdscheduler.faults.failure_model import GPUS_PER_NODE
from xdscheduler.forecast.service import (
    MAX_MINUTES,
    FittedOnHistory,
    ForecastRequest,
    ForecastResponse,
    KnownJobIn,
)
from xdscheduler.forecast.structure import KnownJob
from xdscheduler.sim.records import Forecast
from xdscheduler.sim.recovery import MAX_POOL_SHARE

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine

# When a stalled job (no rate: every node it had failed, under --faults) frees its accelerators:
# the furthest a forecast request may say, beyond any horizon it looks at.
NEVER_S = MAX_MINUTES * 60

STEP_MIN = 10  # demand history resolution: the forecaster's shortest horizon
CONSULT_S = 3600.0  # the controller consults the forecast once per simulated hour
HORIZONS_MIN = (10, 60)
PREALLOC_LEAD_S = 600.0  # hold for a known job from 10 minutes before it arrives
HISTORY_DAYS = 28  # demand history sent with each consultation: what the model is fitted on


class DemandForecaster(Protocol):
    """Answers demand forecast requests (in process, or over HTTP)."""

    def answer(self, request: ForecastRequest) -> ForecastResponse: ...

    @property
    def source(self) -> str:
        """What the last answer came from, for the report."""


@dataclass
class DemandPlanner:
    """Forecast-driven pools and holds for one study's controller."""

    floor: dict[str, int]  # failure-rate pools: never below these ({}: no pools)
    known: set[str]  # jobs announced in the scenario (arrival times known)
    # The model fitted on the history sent, in process; over HTTP the Serve app keeps one per
    # `series`.
    forecaster: DemandForecaster = field(default_factory=lambda: FittedOnHistory(HORIZONS_MIN))
    seed: int = 0
    history: list[float] = field(default_factory=list)  # demand, GPUs, every STEP_MIN
    next_record_s: float = 0.0
    next_consult_s: float = 0.0
    series: str = field(default_factory=lambda: uuid.uuid4().hex)
    coming: dict[str, float] = field(default_factory=dict)  # known job -> arrival time (s)
    holds: dict[str, dict[str, int]] = field(default_factory=dict)  # job -> domain -> GPUs
    log: list[dict] = field(default_factory=list)  # every consultation
    preallocated: dict[str, dict] = field(default_factory=dict)  # job -> what was held, when

    def for_policy(self, name: str) -> DemandPlanner:
        """A fresh copy for one policy's run: a demand series of its own (a forecast service
        keeps one model per series, fitted on that series' history)."""
        mine = copy.deepcopy(self)
        mine.series = f"{self.series}-{name}"
        return mine

    @property
    def holding(self) -> dict[str, int]:
        """Accelerators held for coming known jobs, by domain."""
        out: dict[str, int] = {}
        for by_domain in self.holds.values():
            for d, n in by_domain.items():
                out[d] = out.get(d, 0) + n
        return out

    # ------------------------------------------------------------------ each step

    def step(self, eng: Engine, t: float) -> dict[str, int] | None:
        """Record demand, release holds of jobs that arrived, take holds for jobs about to;
        once an hour consult the forecast. Returns new pool targets when it consulted."""
        while t >= self.next_record_s:
            self.history.append(demand_gpus(eng))
            self.next_record_s += STEP_MIN * 60
        for name in [n for n in self.holds if _arrived(eng, n, t)]:
            self.preallocated[name]["released_s"] = t
            del self.holds[name]
        self._hold(eng, t)
        if t < self.next_consult_s:
            return None
        self.next_consult_s = t + CONSULT_S
        return self._consult(eng, t)

    def _consult(self, eng: Engine, t: float) -> dict[str, int]:
        jobs = known_jobs(eng, self.known, t, max(HORIZONS_MIN))
        req = ForecastRequest(
            history=self.history[-(1440 // STEP_MIN) * HISTORY_DAYS :],
            step_min=STEP_MIN,
            end_time=pd.Timestamp("2024-01-01") + pd.Timedelta(seconds=t),
            known_jobs=[KnownJobIn.from_known(j) for j in jobs],
            series=self.series,
            seed=self.seed,
        )
        out = self.forecaster.answer(req)
        self.coming = {j.name: t + j.start_s for j in jobs if j.start_s > 0}
        hour = out.horizons[-1]
        capacity = sum(d.total_gpus for d in eng.base_view.domains if d.name not in eng.down)
        idle95 = max(capacity - hour.hi95 - sum(self.holding.values()), 0.0)
        pools = pool_targets(eng, self.floor, min(out.backup_pool_gpus, idle95))
        self.log.append(
            {
                "time_s": t,
                "source": self.forecaster.source,
                "demand_gpus": req.history[-1],
                "mean_10m_gpus": out.horizons[0].mean,
                "mean_1h_gpus": hour.mean,
                "hi95_1h_gpus": hour.hi95,
                "known_jobs": len(jobs),
                "backup_pool_gpus": out.backup_pool_gpus,
                "preallocate_gpus": out.preallocate_gpus,
                "coming": sorted(self.coming),
                "pools_gpus": dict(pools),
            }
        )
        return pools

    def _hold(self, eng: Engine, t: float) -> None:
        """Hold a coming known job's minimum from PREALLOC_LEAD_S before it arrives."""
        for name, arrival in self.coming.items():
            if name in self.holds or arrival - t > PREALLOC_LEAD_S or arrival <= t:
                continue
            run = next((r for r in eng.pending if r.spec.name == name), None)
            if run is None:
                continue
            free = {d.name: d.free_gpus for d in eng.view.domains if d.name not in eng.down}
            take, need = {}, run.spec.gpus_min
            for d, n in sorted(free.items(), key=lambda kv: -kv[1]):
                k = min(n, need)
                if k > 0:
                    take[d], need = k, need - k
            self.holds[name] = take
            self.preallocated[name] = {
                "arrival_s": arrival,
                "held_from_s": t,
                "held_gpus": sum(take.values()),
                "wanted_gpus": run.spec.gpus_min,
                "released_s": None,
            }

    def summary(self) -> Forecast:
        pools = [sum(e["pools_gpus"].values()) for e in self.log]
        return Forecast.model_validate(
            {
                "consults": len(self.log),
                "source": sorted({e["source"] for e in self.log}),
                "pool_gpus_min": min(pools, default=0),
                "pool_gpus_max": max(pools, default=0),
                "preallocated": self.preallocated,
                "timeline": self.log,
            }
        )


def demand_gpus(eng: Engine) -> float:
    """Running + pending, as in the public traces: accelerators held by running jobs (and
    by plans being prepared) plus the minimum each queued job asks for."""
    held = sum(r.held_gpus for r in eng.active)
    return float(held + sum(r.spec.gpus_min for r in eng.queue))


def _arrived(eng: Engine, name: str, t: float) -> bool:
    return not any(r.spec.name == name and r.arrival_s > t for r in eng.pending)


def known_jobs(eng: Engine, known: set[str], t: float, horizon_min: float) -> list:
    """Running jobs free their accelerators when their tokens are trained at today's rate;
    announced jobs arriving within the horizon hold their minimum from arrival on (training
    jobs outlast the hour)."""
    out = []
    for r in eng.active:
        left = (r.tokens - r.done) / r.rate if r.rate > 0 else math.inf
        finish = max(r.paused_until - t, 0.0) + left
        out.append(KnownJob(r.spec.name, r.placed.total_gpus, min(finish, NEVER_S)))
    for r in eng.pending:
        if r.spec.name in known and 0 < r.arrival_s - t <= horizon_min * 60:
            start = r.arrival_s - t
            out.append(KnownJob(r.spec.name, r.spec.gpus_min, start + 1e6, start))
    return out


def pool_targets(eng: Engine, floor: dict[str, int], extra_gpus: float) -> dict[str, int]:
    """The failure-rate floor plus the forecast's spare, split over the domains up by size in
    whole nodes, capped at MAX_POOL_SHARE of each domain (and never below the floor)."""
    domains = [d for d in eng.base_view.domains if d.name in floor]
    total = sum(d.total_gpus for d in domains) or 1
    out = {}
    for d in domains:
        share = extra_gpus * d.total_gpus / total
        nodes = int(share // GPUS_PER_NODE)  # whole nodes only: round down, stay inside idle
        cap = max(
            floor[d.name], GPUS_PER_NODE * int(d.total_gpus * MAX_POOL_SHARE // GPUS_PER_NODE)
        )
        out[d.name] = max(floor[d.name], min(floor[d.name] + nodes * GPUS_PER_NODE, cap))
    return out
