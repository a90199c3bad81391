"""Hybrid demand: the history model for demand nobody announced, known jobs for the rest, and
prediction intervals from conformal quantiles of validation residuals."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from xdscheduler.forecast.history import QUANTILES, Ensemble, HistoryModel, fit_history, scale_of
from xdscheduler.forecast.structure import StructuralDemand


@dataclass(frozen=True)
class HorizonForecast:
    horizon_min: int
    mean: float  # mean demand (GPUs) over the horizon
    lo80: float
    hi80: float
    lo95: float
    hi95: float
    history_mean: float
    known_mean: float


def combine(
    history_mean: float,
    unit: float,
    rel_q: dict[float, float],
    known_now: float,
    known_mean: float,
    horizon_min: int,
) -> HorizonForecast:
    """Known jobs are part of today's demand: keep the history model's view of the others
    (history − known now) and add what the known jobs will hold (their ends are known).
    `rel_q`: interval quantiles in units of `unit` around the mean."""
    mean = max(history_mean - known_now + known_mean, known_mean, 0.0)
    q = {k: max(mean + v * unit, known_mean, 0.0) for k, v in rel_q.items()}
    lo95, lo80, hi80, hi95 = (q.get(k, mean) for k in QUANTILES)
    return HorizonForecast(
        horizon_min,
        mean,
        min(lo80, mean),
        max(hi80, mean),
        min(lo95, mean),
        max(hi95, mean),
        history_mean,
        known_mean,
    )


@dataclass
class Forecaster:
    """History models fitted per horizon; forecasts from a recent window of the series."""

    step_min: int
    models: dict[int, HistoryModel | Ensemble] = field(default_factory=dict)  # minutes → model

    @classmethod
    def fit(
        cls,
        values: np.ndarray,
        index: pd.DatetimeIndex,
        step_min: int,
        target: str,
        horizons_min=(10, 60),
        seed: int = 0,
        others=(),
        fitted: dict | None = None,
    ) -> Forecaster:
        """`others`: (values, index, end) of sibling series (e.g. other domains) to pool.
        Horizons share their direct models (an occupancy hour blends in the 10 minutes'),
        also with earlier calls on the same data that passed the same `fitted` dict."""
        fitted = {} if fitted is None else fitted
        models = {
            hm: fit_history(
                values,
                index,
                step_min,
                max(hm // step_min, 1),
                target,
                seed=seed,
                others=others,
                fitted=fitted,
            )
            for hm in horizons_min
        }
        return cls(step_min, models)

    def forecast(
        self, values: np.ndarray, index: pd.DatetimeIndex, known: StructuralDemand | None = None
    ) -> list[HorizonForecast]:
        """One forecast per fitted horizon, from the end of `values`."""
        out = []
        for hm, model in sorted(self.models.items()):
            point, unit = model.predict_last(values, index[-1])
            known_now = float(known.held[0]) if known is not None else 0.0
            known_mean = known.mean(model.h) if known is not None else 0.0
            out.append(combine(point, unit, model.rel_quantiles, known_now, known_mean, hm))
        return out

    def persistence(
        self, values: np.ndarray, horizons_min, known: StructuralDemand | None = None
    ) -> list[HorizonForecast]:
        """No model fitted: the last value, with intervals from the day's variability."""
        scale = float(scale_of(values, 1440 // self.step_min)[-1])
        spread = float(np.std(values[-(1440 // self.step_min) :])) / scale
        rel = dict(
            zip(
                QUANTILES,
                (-1.96 * spread, -1.28 * spread, 1.28 * spread, 1.96 * spread),
                strict=True,
            )
        )
        known_now = float(known.held[0]) if known is not None else 0.0
        return [
            combine(
                float(values[-1]),
                scale,
                rel,
                known_now,
                known.mean(hm // self.step_min) if known is not None else 0.0,
                hm,
            )
            for hm in horizons_min
        ]
