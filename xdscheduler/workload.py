"""A generated stream of LLM training jobs whose sizes and run times follow published statistics.

Source: the Acme trace of Shanghai AI Lab's LLM clusters, Seren and Kalos (Hu et al.,
"Characterization of Large Language Model Development in the Datacenter", NSDI 2024; trace
summary CC BY 4.0). Per GPU job: mean and median GPUs, run and queue time, and the share of
jobs that complete, are cancelled or fail.

Where the public data folder holds the trace's summary (`workload/acme_cluster_summary.csv`,
one row per cluster), a cluster's GPUs per job and run times are read from its row, so any
cluster the file has can be named; the figures below are the fallback for Seren and Kalos
(the file's own, so a study gives the same jobs with or without it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from xdscheduler.catalog import MODELS
from xdscheduler.costmodel.plan import Precision
from xdscheduler.errors import UserError
from xdscheduler.network.measurements import data_file, shared_data_dir
from xdscheduler.scenario import GpuRequest, Job
from xdscheduler.textfile import numeric_column, read_frame

ACME = {
    "seren": {
        "mean_gpus": 5.68,
        "median_gpus": 1.0,
        "mean_run_s": 1414.335,
        "median_run_s": 122.0,
        "mean_queue_s": 445.984,
        "median_queue_s": 1.0,
        "max_gpus": 1024,
        "complete": 0.497,
        "cancel": 0.075,
        "fail": 0.429,
    },
    "kalos": {
        "mean_gpus": 26.77,
        "median_gpus": 1.0,
        "mean_run_s": 1259.689,
        "median_run_s": 124.0,
        "mean_queue_s": 214.179,
        "median_queue_s": 17.0,
        "max_gpus": 1024,
        "complete": 0.541,
        "cancel": 0.062,
        "fail": 0.397,
    },
}
SUMMARY = Path("workload") / "acme_cluster_summary.csv"
# the summary's column of each figure the generator draws from
COLUMNS = {
    "mean_gpus": "avg_gpu_num",
    "median_gpus": "med_gpu_num",
    "mean_run_s": "avg_run_time_gpu",
    "median_run_s": "med_run_time_gpu",
    "max_gpus": "max_gpu",
}
NEEDED = ("mean_gpus", "median_gpus", "mean_run_s", "median_run_s")  # max_gpus: none unbounded
SIZE_EXPONENT = 0.3  # assumption: run time grows as (gpus/8)^0.3 (bigger runs train longer)
RUN_LIMITS_S = (600.0, 3 * 86400.0)  # a training job runs 10 minutes to 3 days here
MFU = 0.40  # the model FLOP utilisation a run time is translated into tokens with
PEAK_TFLOPS = 989.4  # an H100-class accelerator, unless the cluster's mean is given
TENANTS = ("lab-a", "lab-b", "lab-c", "lab-d")


@dataclass(frozen=True)
class JobStats:
    """What jobs are drawn from: GPUs and run time per job (lognormal, by mean and median),
    and the largest job."""

    mean_gpus: float
    median_gpus: float
    mean_run_s: float
    median_run_s: float
    max_gpus: float = math.inf


def summary_path() -> Path | None:
    """The Acme summary of the public data folder; None where there is none."""
    try:
        folder = shared_data_dir("workload", "the Acme job statistics")
    except UserError:
        return None
    path = data_file(folder / SUMMARY.name)
    return path if path.exists() else None


def job_stats(cluster: str, path: Path | None = None) -> JobStats:
    """`cluster`'s statistics: its row of the summary at `path` (default: the data folder's)
    where there is one, the shipped figures for what the row lacks or where there is none."""
    path = path or summary_path()
    names: list[str] = []
    found: dict[str, float] = {}
    if path is not None:
        frame = _summary(path, path.stat().st_mtime_ns)
        if "id" not in frame.columns:
            raise UserError(f"{path}: no column id (the cluster each row describes)")
        names = [str(n) for n in frame["id"]]
        found = _row_stats(frame[frame["id"].astype(str).str.lower() == cluster.lower()], path)
    stats = {**ACME.get(cluster.lower(), {}), **found}
    if not stats:
        shipped = ", ".join(c for c in ACME if c not in {n.lower() for n in names})
        raise UserError(
            f"unknown cluster {cluster!r}: {path} has {', '.join(names)}; shipped: {shipped}"
            if path
            else f"unknown cluster {cluster!r}: known {shipped}; another needs its row in "
            f"{SUMMARY} of the public data folder"
        )
    missing = [COLUMNS[f] for f in NEEDED if f not in stats]
    if missing:
        raise UserError(f"{path}: cluster {cluster!r} has no {', '.join(missing)}")
    for mean, median in (("mean_gpus", "median_gpus"), ("mean_run_s", "median_run_s")):
        if not stats[mean] > stats[median] > 0:  # a lognormal's mean is above its median
            raise UserError(
                f"{path}: cluster {cluster!r}: {COLUMNS[mean]} ({stats[mean]:g}) must be above "
                f"{COLUMNS[median]} ({stats[median]:g}), and that above 0"
            )
    return JobStats(**{f: stats[f] for f in COLUMNS if f in stats})


@cache  # read once per version of the file: asked whenever a study is sized or drawn
def _summary(path: Path, _mtime_ns: int) -> pd.DataFrame:
    return read_frame(path, "job-statistics summary")


def _row_stats(row, path: Path) -> dict[str, float]:
    """The figures a cluster's row of the summary gives (none where the row or a cell is empty)."""
    if row.empty:
        return {}
    values = {f: numeric_column(row, c, path).iloc[0] for f, c in COLUMNS.items() if c in row}
    return {f: float(v) for f, v in values.items() if np.isfinite(v)}


def _lognormal(median: float, mean: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this median and mean."""
    return math.log(median), math.sqrt(2 * math.log(mean / median))


def _model_for(gpus: int, rng: np.random.Generator) -> str:
    if gpus <= 32:
        return str(rng.choice(["llama2-7b", "llama3-8b"]))
    if gpus <= 128:
        return "llama2-13b"
    if gpus <= 512:
        return str(rng.choice(["llama2-70b", "llama3-70b"]))
    return "gpt3-175b"


def _sizes_and_runs(
    rng: np.random.Generator, n: int, stats: JobStats, low: int, high: int
) -> tuple[np.ndarray, np.ndarray]:
    """GPU requests (powers of two in [low, high]) and run times for n jobs.

    The lognormal of all GPU jobs is truncated to multi-node sizes: this study schedules
    distributed training, the many single-GPU debugging jobs of the trace are left out.
    """
    norm = NormalDist()
    mu, sigma = _lognormal(stats.median_gpus, stats.mean_gpus)
    lo, hi = norm.cdf((math.log(low) - mu) / sigma), norm.cdf((math.log(high) - mu) / sigma)
    quantiles = np.array([norm.inv_cdf(u) for u in rng.uniform(lo, hi, n)])
    gpus = np.exp(mu + sigma * quantiles)
    gpus = np.clip(2 ** np.round(np.log2(gpus)), low, high).astype(int)
    mu_t, sigma_t = _lognormal(stats.median_run_s, stats.mean_run_s)
    runs = rng.lognormal(mu_t, sigma_t, n) * (gpus / 8) ** SIZE_EXPONENT
    return gpus, np.clip(runs, *RUN_LIMITS_S)


def _limits(total_gpus: int, cluster: str, min_gpus: int) -> tuple[JobStats, int]:
    """The cluster's statistics and the largest request (a power of two) that both the trace's
    largest job and a cluster of `total_gpus` allow."""
    stats = job_stats(cluster)
    if stats.max_gpus < min_gpus:
        raise UserError(
            f"no job of {min_gpus} accelerators or more to draw: {cluster}'s largest "
            f"takes {stats.max_gpus:g}"
        )
    high = 2 ** int(math.log2(max(min(stats.max_gpus, total_gpus), 1)))
    if high < min_gpus:
        raise UserError(f"a cluster of {total_gpus} accelerators cannot hold jobs of {min_gpus}")
    return stats, high


def gpu_s_per_job(total_gpus: int, seed: int, cluster: str = "kalos", min_gpus: int = 8) -> float:
    """Expected accelerator-seconds of one generated job: what `generate_jobs` divides the
    offered accelerator-time by to set how many jobs arrive (a probe of 20,000 draws)."""
    stats, high = _limits(total_gpus, cluster, min_gpus)
    return _probe(stats, seed, min_gpus, high)


@cache  # a pure function of its arguments, asked when a study is sized and when it is drawn
def _probe(stats: JobStats, seed: int, low: int, high: int) -> float:
    probe_g, probe_t = _sizes_and_runs(np.random.default_rng(seed + 1), 20000, stats, low, high)
    return float(np.mean(probe_g * probe_t))


def mean_jobs(
    hours: float,
    total_gpus: int,
    seed: int,
    load: float = 0.9,
    cluster: str = "kalos",
    min_gpus: int = 8,
) -> float:
    """How many jobs `generate_jobs` draws on average (it draws a Poisson count of this mean):
    known before any is drawn, to size a study."""
    return load * total_gpus * (hours * 3600) / gpu_s_per_job(total_gpus, seed, cluster, min_gpus)


def generate_jobs(
    hours: float,
    total_gpus: int,
    seed: int,
    load: float = 0.9,
    cluster: str = "kalos",
    min_gpus: int = 8,
    peak_tflops: float = PEAK_TFLOPS,
    tenants: tuple[str, ...] = TENANTS,
    dtype: Precision | None = None,
) -> list[Job]:
    """Jobs arriving over `hours`, offering `load` × the cluster's accelerator-time, each of
    one of `tenants` (uniformly), each training in `dtype` (None: the planner's default).

    A job's tokens are what its accelerators would train in its run time at 40% of
    `peak_tflops` (the cluster's mean accelerator), so a run time means the same work
    whatever accelerators the cluster has.
    """
    stats, high = _limits(total_gpus, cluster, min_gpus)
    rng = np.random.default_rng(seed)
    horizon_s = hours * 3600
    n = rng.poisson(load * total_gpus * horizon_s / _probe(stats, seed, min_gpus, high))
    arrivals = np.sort(rng.uniform(0, horizon_s, n))
    gpus, runs = _sizes_and_runs(rng, n, stats, min_gpus, high)
    jobs = []
    for i in range(n):
        model = _model_for(int(gpus[i]), rng)
        params = MODELS[model].params
        tokens_per_gpu_s = MFU * peak_tflops * 1e12 / (6 * params)
        batch = 512 if params < 10e9 else (1024 if params < 100e9 else 1536)
        jobs.append(
            Job(
                name=f"gen-{i:04d}",
                model=model,
                global_batch=batch,
                tokens=float(runs[i] * gpus[i] * tokens_per_gpu_s),
                tenant=tenants[int(rng.integers(len(tenants)))],
                priority=int(rng.integers(0, 3)),
                arrival_s=float(arrivals[i]),
                gpus=GpuRequest(min=max(min_gpus, int(gpus[i]) // 4), max=int(gpus[i])),
                dtype=dtype,
            )
        )
    return jobs
