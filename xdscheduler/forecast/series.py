"""Demand series from the public traces: Helios (Earth, Venus) and Philly CSV formats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.forecast import HORIZONS, TARGETS


@dataclass(frozen=True)
class Series:
    """A regular demand series: `values[i]` at `start + i * step_min` minutes."""

    name: str
    target: str
    values: np.ndarray
    index: pd.DatetimeIndex
    step_min: int

    @property
    def per_day(self) -> int:
        return 1440 // self.step_min

    def steps(self, horizon: str) -> int:
        return parse_horizon(horizon, self.step_min)


def parse_horizon(horizon: str, step_min: int) -> int:
    if horizon not in HORIZONS:
        raise UserError(f"unknown horizon {horizon!r}; use one of {', '.join(HORIZONS)}")
    minutes = HORIZONS[horizon]
    if minutes % step_min:
        raise UserError(f"horizon {horizon} is not a multiple of the series step ({step_min} min)")
    return minutes // step_min


def from_frame(df: pd.DataFrame, target: str, name: str = "series") -> Series:
    """Demand from a trace's own columns: occupancy = running + pending (Helios) or active
    (Philly); arrivals = submit_gpu_num (Helios Venus)."""
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; use occupancy or arrivals")
    if "time" not in df.columns:
        raise UserError(f"{name}: no 'time' column (columns: {', '.join(map(str, df.columns))})")
    time = pd.to_datetime(df["time"], errors="coerce")
    if time.isna().any():
        raise UserError(f"{name}: {int(time.isna().sum())} unreadable values in 'time'")
    y = _demand(df, target, name)
    s = pd.Series(y, index=pd.DatetimeIndex(time)).groupby(level=0).mean().sort_index()
    if len(s) < 3:
        raise UserError(f"{name}: needs at least 3 rows, got {len(s)}")
    step = pd.Timedelta(s.index.to_series().diff().median())
    step_min = max(int(step.total_seconds() // 60), 1)
    grid = pd.date_range(s.index[0], s.index[-1], freq=f"{step_min}min")
    # Gaps: occupancy holds its last value; nothing was submitted in a missing bin.
    s = s.reindex(grid)
    s = s.ffill() if target == "occupancy" else s.fillna(0.0)
    return Series(name, target, s.to_numpy(float), grid, step_min)


def _demand(df: pd.DataFrame, target: str, name: str) -> np.ndarray:
    cols = set(df.columns)
    if target == "occupancy":
        if {"running_gpu_num", "pending_gpu_num"} <= cols:
            return _numeric(df, ["running_gpu_num", "pending_gpu_num"], name).sum(axis=1)
        if "active" in cols:
            return _numeric(df, ["active"], name)[:, 0]
        need = "'running_gpu_num' and 'pending_gpu_num' (Helios) or 'active' (Philly)"
    else:
        if "submit_gpu_num" in cols:
            return _numeric(df, ["submit_gpu_num"], name)[:, 0]
        need = "'submit_gpu_num' (Helios Venus)"
    raise UserError(f"{name}: {target} needs columns {need}; found {', '.join(map(str, cols))}")


def _numeric(df: pd.DataFrame, cols: list[str], name: str) -> np.ndarray:
    out = df[cols].apply(pd.to_numeric, errors="coerce")
    if out.isna().any().any():
        raise UserError(f"{name}: non-numeric values in {', '.join(cols)}")
    return out.to_numpy(float)


def load(path: str | Path, target: str) -> Series:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a readable CSV ({err})") from None
    return from_frame(df, target, name=path.stem)


def load_lucid(path: str | Path) -> pd.Series:
    """The Lucid project's published 10-minute prediction of GPUs submitted (`pred_gpu_num`)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    df = pd.read_csv(path)
    if not {"time", "pred_gpu_num"} <= set(df.columns):
        raise UserError(f"{path}: needs columns 'time' and 'pred_gpu_num'")
    return pd.Series(df["pred_gpu_num"].to_numpy(float), index=pd.to_datetime(df["time"]))
