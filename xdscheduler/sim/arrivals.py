"""Arrival processes replayed from public cluster traces, in place of the generator's Poisson.

What each trace can give, and what is taken from it (the job sizes and run times always come
from the workload generator; only when jobs arrive, or how many, comes from the trace):

- **Helios** (SenseTime, Earth cluster, May 2020, MIT; `demand/helios_earth/vc6YE.csv`): one
  row a minute with the jobs running and pending in a virtual cluster. A job's submission shows
  as a rise of `total_job_num`, so the positive minute-to-minute changes are the arrival
  counts (a lower bound: a minute in which one job ends and another arrives shows neither).
  vc6YE is the largest virtual cluster (208 GPUs) and the one with the most jobs of 8 GPUs or
  more (about 32 a day), the closest to the multi-node training jobs studied here. Its
  arrivals are bursty: half its hours have none.
- **Philly** (Microsoft, Oct-Dec 2017; `demand/philly_node_sequence.csv`): active nodes a
  minute. The positive changes of the active-node count are nodes newly taken: the arrival
  of demand, weighted by size rather than counted in jobs. The hour-to-hour variation is
  milder (coefficient of variation ~0.4) than Helios's.
- **Acme** (Shanghai AI Lab, Seren and Kalos, 2023, CC BY 4.0;
  `workload/acme_cluster_summary.csv`): summary statistics only, no times, so no shape over
  time can be replayed: arrivals stay uniform in time (Poisson). What the summary does give is
  the intensity of its cluster: the accelerator-seconds of all its GPU jobs over their number.
  The study offers its target load with that many accelerator-seconds per job, so as many jobs
  arrive as the trace's mean job would need (Kalos: ~268,000 GPU-s a job against ~231,000 of
  the generator's multi-node jobs, so 14% fewer, 16% larger jobs). The trace's mean counts its
  single-GPU jobs too, which the generator leaves out: read Acme cells with that in mind.

A study shorter than the trace gets a window of it (whole hours, starting where the seed says,
among windows with no gap in the record and at least one arrival); a longer one gets the whole
trace stretched over it. The number of arrivals is set by the target load, not by the trace:
its shape says when they come. Given their number, the times are drawn from the window's rate
(an inhomogeneous Poisson process conditioned on its count): a minute with three arrivals in
the trace is three times as likely to receive each job as a minute with one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.forecast.csvfile import numbers, read_csv, timestamps
from xdscheduler.forecast.series import MAX_GPUS, regular
from xdscheduler.network.measurements import data_file, data_files, shared_data_dir
from xdscheduler.textfile import data_stem, numeric_column, read_frame

ARRIVALS = ("poisson", "philly", "helios", "acme")
HELIOS_VC = "vc6YE"
HELIOS = Path("demand") / "helios_earth" / f"{HELIOS_VC}.csv"
PHILLY = Path("demand") / "philly_node_sequence.csv"
ACME = Path("workload") / "acme_cluster_summary.csv"
STEP_S = 60.0  # both time-stamped traces have a row a minute
SOURCES = {
    "helios": f"Helios Earth {HELIOS_VC} (SenseTime, MIT), rises of total_job_num a minute",
    "philly": "Philly (Microsoft, 2017), rises of active nodes a minute",
    "acme": "Acme (Shanghai AI Lab, CC BY 4.0), accelerator-seconds per GPU job",
}


@dataclass(frozen=True)
class Replay:
    """A real arrival process: a rate over time (`rate`, one value a `step_s`, NaN where the
    trace has no record) or, for a trace without times, an intensity (`gpu_s_per_job`)."""

    kind: str
    source: str
    rate: np.ndarray | None = None
    start: pd.Timestamp | None = None
    step_s: float = STEP_S
    gpu_s_per_job: float | None = None


def data_root() -> Path:
    """The folder of public measurements (its `demand/` and `workload/`)."""
    return shared_data_dir("demand", "the Helios and Philly traces").parent


def load_replay(kind: str, cluster: str = "kalos", root: Path | None = None) -> Replay | None:
    """The arrival process `kind` (None for the generator's own Poisson arrivals); `cluster`:
    the Acme row whose intensity to take."""
    if kind not in ARRIVALS:
        raise UserError(f"unknown arrival process {kind!r}; use one of {', '.join(ARRIVALS)}")
    if kind == "poisson":
        return None
    root = Path(root) if root else data_root()
    if kind == "acme":
        intensity = acme_gpu_s_per_job(data_file(root / ACME), cluster)
        return Replay(kind, SOURCES[kind], gpu_s_per_job=intensity)
    path = _helios(root) if kind == "helios" else data_file(root / PHILLY)
    column = "total_job_num" if kind == "helios" else "active"
    rate, start, step_s = _rises(path, column)
    source = SOURCES[kind].replace(HELIOS_VC, data_stem(path))
    return Replay(kind, source, rate, start, step_s)


def _helios(root: Path) -> Path:
    """Helios's vc6YE where the folder has it, else its first virtual cluster."""
    path = data_file(root / HELIOS)
    others = data_files(path.parent, "vc*.csv")
    return path if path.exists() or not others else others[0]


def _present(path: Path) -> Path:
    if not path.exists():
        raise UserError(
            f"{path} is missing: the public data folder must hold it (see shared/data/README.md)"
        )
    return path


def _read(path: Path, columns: list[str]) -> pd.DataFrame:
    frame = read_frame(_present(path), "arrival trace")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: no column {', '.join(missing)}")
    return frame


def _rises(path: Path, column: str) -> tuple[np.ndarray, pd.Timestamp, float]:
    """Positive changes of `column` a step, read as a demand forecast reads its trace (on a
    grid of the trace's own step), NaN across gaps in the record; and the step in seconds."""
    where = str(path)
    frame = read_csv(_present(path), "arrival trace", [("time", column)])
    values = numbers(frame, column, where, high=MAX_GPUS)
    series, step_min = regular(timestamps(frame, "time", where), values, where)
    rate = np.clip(np.diff(series.to_numpy()), 0, None)  # NaN: no record
    if not np.nansum(rate) > 0:
        raise UserError(f"{path}: {column} never rises: the trace holds no arrival to replay")
    return rate, series.index[0], step_min * 60.0


def acme_gpu_s_per_job(path: Path, cluster: str) -> float:
    """Accelerator-seconds of the Acme cluster's GPU jobs (completed, cancelled, failed) over
    their number."""
    frame = _read(
        path, ["id", "gpu_job_num", "complete_gpu_time", "cancel_gpu_time", "fail_gpu_time"]
    )
    row = frame[frame["id"].astype(str).str.lower() == cluster.lower()]
    if row.empty:
        raise UserError(f"{path}: no cluster {cluster!r} (has {', '.join(map(str, frame['id']))})")
    spent = ["complete_gpu_time", "cancel_gpu_time", "fail_gpu_time"]
    time_s = np.array([numeric_column(row, c, path).iloc[0] for c in spent])
    jobs = float(numeric_column(row, "gpu_job_num", path).iloc[0])
    if not (np.all(time_s >= 0) and time_s.sum() > 0 and jobs > 0):
        raise UserError(
            f"{path}: cluster {cluster!r} needs GPU jobs and their GPU time, none missing or "
            f"negative (gpu_job_num {jobs:g}, {', '.join(spent)} {time_s.tolist()})"
        )
    return float(time_s.sum() / jobs)


@dataclass(frozen=True)
class Window:
    """The part of a trace a study replays, as a rate per step of `step_s` from its start."""

    rate: np.ndarray
    step_s: float
    label: str


def window(replay: Replay, hours: float, rng: np.random.Generator) -> Window:
    """`hours` of the trace from a whole hour the seed picks, or the whole trace stretched over
    `hours` where the study is longer than the trace."""
    rate, start, steps = replay.rate, replay.start, round(hours * 3600 / replay.step_s)
    if rate is None or start is None:
        raise ValueError(f"{replay.kind}: a trace without times has no window to replay")
    if steps >= len(rate):
        stretched = hours * 3600 / len(rate)
        return Window(
            np.nan_to_num(rate),
            stretched,
            f"{replay.kind}: the whole trace from {start:%Y-%m-%d %H:%M}, "
            f"stretched ×{stretched / replay.step_s:.3g}",
        )
    starts = _valid_starts(rate, steps, round(3600 / replay.step_s))
    if not len(starts):
        raise UserError(
            f"{replay.kind}: no {hours:g}-hour window of the trace has a full record and an arrival"
        )
    first = int(rng.choice(starts))
    begin = start + pd.Timedelta(seconds=first * replay.step_s)
    return Window(
        rate[first : first + steps],
        replay.step_s,
        f"{replay.kind}: {hours:g} h from {begin:%Y-%m-%d %H:%M}",
    )


def _valid_starts(rate: np.ndarray, steps: int, stride: int) -> np.ndarray:
    """Window starts, every `stride` steps, whose window has no gap and a positive rate."""
    gaps = np.concatenate([[0], np.cumsum(np.isnan(rate))])
    mass = np.concatenate([[0.0], np.cumsum(np.nan_to_num(rate))])
    starts = np.arange(0, len(rate) - steps + 1, stride)
    ok = (gaps[starts + steps] == gaps[starts]) & (mass[starts + steps] > mass[starts])
    return starts[ok]


def arrival_times_s(win: Window, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` arrival times (sorted, seconds from the study's start) drawn from the window's rate:
    a step in proportion to its rate, then a uniform time inside it."""
    steps = rng.choice(len(win.rate), size=n, p=win.rate / win.rate.sum())
    return np.sort((steps + rng.uniform(size=n)) * win.step_s)
