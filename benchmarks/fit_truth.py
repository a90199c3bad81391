"""Fit the distributions of the study's ground truth to public measurements, and write them.

Run: python -m benchmarks.fit_truth [--data DIR] [--out xdscheduler/sim/truth_params.py]

Prints what it fitted and writes the parameters, with their provenance, to the package
(`xdscheduler/sim/truth_params.py`), so studies draw their truth without the data; `sim.truth`
says how each is used. DIR holds the public measurements (`wan/`, `steptime/`; default
$XDS_DATA_DIR or shared/data beside the repository; a fit whose folder is missing keeps the
shipped parameters and says so); the calibration's residuals come from
`benchmarks/published_runs.csv`, which is in the repository.

- speed: log residuals ln(published / model) of the cost model on the Megatron-LM/NeMo runs
  the calibration compares (the shipped constants). Their spread is split, by a one-way
  random-effects analysis over deployments (one source on one accelerator type: one cluster,
  one software release), into the part deployments share across their configurations
  (between-deployment: the per-domain factor) and the rest (the accelerator type's bias), so a
  domain's total factor has the residuals' own spread.
- goodput: ln(2022-11 / 2022-01) of the Skyplane iperf3 throughput, pair by pair (per-pair
  medians, PREMIUM tier), as a Laplace distribution (maximum likelihood: the median and the mean
  absolute deviation from it); it has the snapshots' heavy tails (most pairs within a few per
  cent, a tenth off by 30% or more), which a normal fit would spread over every link. The
  GCP-to-GCP pairs are left out: all of them ran ~4x faster in 2022-11 (median 4.9 -> 18.9
  Gbit/s), a change of GCP's per-VM limits rather than drift of a link's goodput.
- jitter: a synchronous step waits for its slowest worker, so a PAI job's step time is the
  largest of its workers' mini-batch times at each iteration; its slowdown is the mean step
  over the median step (the model predicts a typical step; throughput follows the mean), at
  least 1. ln(slowdown) is fitted as an exponential (maximum likelihood: its mean) over the
  four jobs published: few, so a rough prior.
"""

from __future__ import annotations

import argparse
import pprint
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._table import print_table
from benchmarks.calibrate import HERE, in_family
from xdscheduler.costmodel.calibration import errors, load_runs
from xdscheduler.costmodel.constants import DEFAULT
from xdscheduler.errors import UserError
from xdscheduler.network.measurements import (
    THROUGHPUT_FILES,
    data_files,
    load_wan,
    shared_data_dir,
)
from xdscheduler.sim.truth_params import PARAMS as SHIPPED
from xdscheduler.textfile import data_stem, numeric_column, read_frame, write_atomic

OUT = HERE.parent / "xdscheduler" / "sim" / "truth_params.py"
# A PAI job's file: job_1_norm.csv as published, pai_minibatch_job_1_norm.csv as shared, ...
PAI_JOB = re.compile(r"(?:\w*_)?job_(\d+)(?:_norm)?\.csv(?:\.gz)?", re.IGNORECASE)
MAX_NORM = 1000  # the dataset's mini-batch times are normalised to 0-1000
SAME_PROVIDER_STEP = ("gcp", "gcp")  # left out of the goodput fit (see the docstring)


def between_sd(groups: list[np.ndarray]) -> float:
    """Standard deviation of the group effect in a one-way random-effects model (ANOVA
    estimator for unequal group sizes; 0 where the groups differ no more than by chance)."""
    n = np.array([len(g) for g in groups], dtype=float)
    total, k = n.sum(), len(groups)
    grand = np.concatenate(groups).mean()
    ms_between = sum(len(g) * (g.mean() - grand) ** 2 for g in groups) / (k - 1)
    ms_within = sum(((g - g.mean()) ** 2).sum() for g in groups) / (total - k)
    n0 = (total - (n**2).sum() / total) / (k - 1)
    return float(np.sqrt(max((ms_between - ms_within) / n0, 0.0)))


def speed_params(runs_csv: Path = HERE / "published_runs.csv") -> dict:
    """Per-domain compute speed: the calibration's log residuals, split type / deployment."""
    runs, _ = load_runs(runs_csv)
    kept = [(r, e) for r, e in zip(runs, errors(runs, DEFAULT), strict=True) if in_family(r)]
    residual = np.array([-np.log1p(e) for _, e in kept])  # ln(published / model)
    deployment: dict[tuple, list[float]] = {}
    for (r, _), x in zip(kept, residual, strict=True):
        deployment.setdefault((r.source, r.gpu.name), []).append(x)
    sigma = float(residual.std(ddof=1))
    domain_sigma = min(between_sd([np.array(v) for v in deployment.values()]), sigma)
    return {
        "mu": float(residual.mean()),
        "sigma": sigma,
        "type_sigma": float(np.sqrt(sigma**2 - domain_sigma**2)),
        "domain_sigma": domain_sigma,
        "configurations": len(residual),
        "deployments": len(deployment),
        "source": "benchmarks/published_runs.csv, Megatron-LM/NeMo rows, against the "
        "shipped cost-model constants (benchmarks.calibrate)",
    }


def goodput_params(wan_dir: Path) -> dict:
    """Per-link WAN goodput: Laplace fit of the log ratio of the newest Skyplane snapshot over
    the earliest."""
    wan = load_wan(wan_dir)
    if wan.gbps_later is None:
        raise UserError(
            f"{wan_dir}: one throughput grid ({wan.throughput_files[0].name}); the goodput fit "
            f"compares two, {THROUGHPUT_FILES} at two dates"
        )
    first, later = wan.first_date, wan.later_date
    ratio = np.log(wan.gbps_later / wan.gbps).replace([np.inf, -np.inf], np.nan).dropna()
    provider = [ratio.index.get_level_values(i).str.split(":").str[0] for i in (0, 1)]
    step = (provider[0] == SAME_PROVIDER_STEP[0]) & (provider[1] == SAME_PROVIDER_STEP[1])
    x = ratio[~step].to_numpy()
    if not len(x):
        raise UserError(
            f"{wan_dir}: no region pair measured in both {first} and {later}"
            + (f" but the {int(step.sum())} gcp->gcp ones, left out" if step.any() else "")
            + ": the goodput fit compares a pair's throughput across the two grids"
        )
    loc = float(np.median(x))
    return {
        "loc": loc,
        "scale": float(np.abs(x - loc).mean()),
        "pairs": len(x),
        "left_out": int(step.sum()),
        "source": f"Skyplane iperf3 throughput grids {first} and {later} (wan/), per-pair "
        "medians of throughput_received, gcp->gcp pairs left out",
    }


def pai_slowdown(path: Path) -> float:
    """A PAI job's mean step over its median step; its step is its slowest worker's."""
    frame = read_frame(path, "PAI mini-batch times")
    if not {"time", "batch_time_norm"} <= set(frame.columns):
        raise UserError(f"{path}: needs the columns time and batch_time_norm")
    times = numeric_column(frame, "batch_time_norm", path)
    outside = ~times.between(0, MAX_NORM, inclusive="right")  # an empty cell too
    if outside.any():
        row = outside.idxmax()
        shown = "empty" if pd.isna(times[row]) else f"{times[row]:g}"
        raise UserError(
            f"{path}: row {row + 2}, batch_time_norm: {shown} is not a mini-batch time on the "
            f"dataset's scale (above 0, at most {MAX_NORM})"
        )
    step = times.groupby(frame["time"]).max()
    if len(step) < 2:
        raise UserError(f"{path}: {len(step)} iteration(s): a slowdown needs at least 2")
    return float(step.mean() / step.median())


def jitter_params(steptime_dir: Path) -> dict:
    """Per-job jitter: an exponential fit of ln(slowdown) over the PAI jobs."""
    jobs = pai_jobs(steptime_dir)
    slowdown = {data_stem(p).removesuffix("_norm"): pai_slowdown(p) for p in jobs.values()}
    logs = np.log(np.maximum(list(slowdown.values()), 1.0))
    first = next(iter(jobs.values())).name
    named = PAI_JOB.fullmatch(first)
    assert named is not None  # pai_jobs keeps only the files whose names match
    numbers = "-".join(dict.fromkeys(str(n) for n in (min(jobs), max(jobs))))
    return {
        "mean_log": float(logs.mean()),
        "jobs": slowdown,
        "source": "Alibaba PAI 2020 mini-batch times "
        f"(steptime/{first[: named.start(1)]}{numbers})",
    }


def pai_jobs(steptime_dir: Path) -> dict[int, Path]:
    """The PAI jobs' files in `steptime_dir` by job number, in its order."""
    jobs: dict[int, Path] = {}
    for path in data_files(steptime_dir, "*.csv"):
        if match := PAI_JOB.fullmatch(path.name):
            number = int(match[1])
            if number in jobs:
                raise UserError(
                    f"{steptime_dir}: job {number} is in both {jobs[number].name} and "
                    f"{path.name}: keep one"
                )
            jobs[number] = path
    if not jobs:
        raise UserError(
            f"{steptime_dir}: no PAI job (job_<n>_norm.csv, as published, or with a prefix: "
            "pai_minibatch_job_<n>_norm.csv)"
        )
    return dict(sorted(jobs.items()))


def finite(params, where: str = "") -> None:
    """UserError naming the first fitted figure that is not a finite number: a module holding
    one (nan, inf) would not even import."""
    if isinstance(params, dict):
        for key, value in params.items():
            finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(params, float) and not np.isfinite(params):
        raise UserError(f"the fit gave {where} = {params}: the data cannot fit it; nothing written")


# The fits from measurements in the data folder, by the subfolder each reads
FROM_DATA = {"goodput": ("wan", goodput_params), "jitter": ("steptime", jitter_params)}


def fit(data_dir: Path, skipped: dict[str, str] | None = None) -> dict:
    """Every fit; one whose subfolder `data_dir` lacks keeps the shipped parameters, and why
    goes to `skipped` (a folder holding none of them is refused)."""
    if not any((data_dir / sub).is_dir() for sub, _ in FROM_DATA.values()):
        raise UserError(f"{data_dir} holds neither wan/ nor steptime/: nothing to fit")
    params = {"speed": speed_params()}
    for name, (sub, fit_one) in FROM_DATA.items():
        if (data_dir / sub).is_dir():
            params[name] = fit_one(data_dir / sub)
        else:
            params[name] = SHIPPED[name]
            if skipped is not None:
                skipped[name] = f"no {sub}/ folder in {data_dir}: the shipped fit is kept"
    return params


def render(params: dict) -> str:
    """The parameters module's text."""
    lead = "PARAMS = "
    lines = pprint.pformat(params, width=100 - len(lead), sort_dicts=False).splitlines()
    body = "\n".join([lead + lines[0]] + [" " * len(lead) + line for line in lines[1:]])
    return (
        '"""The ground truth\'s distributions, fitted to public measurements (`sim.truth` '
        "draws from them).\n\nGenerated by `python -m benchmarks.fit_truth`: fit again "
        'rather than edit.\n"""\n\n' + body + "\n"
    )


def default_data() -> Path:
    """The shared data folder: the one holding steptime/, else wan/ (`fit` skips the other)."""
    try:
        return shared_data_dir("steptime", "the PAI mini-batch times", "pass --data DIR or ").parent
    except UserError:
        return shared_data_dir("wan", "the Skyplane CSVs", "pass --data DIR or ").parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help="the folder holding wan/ and steptime/ (default: the shared data)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    skipped: dict[str, str] = {}
    try:
        params = fit(args.data or default_data(), skipped)
        finite(params)
    except UserError as err:
        sys.exit(f"fit_truth: {err}")
    s, g, j = params["speed"], params["goodput"], params["jitter"]
    print_table(
        "Ground truth fitted to public measurements",
        ["factor", "distribution", "n"],
        [
            [
                "speed, type",
                f"lognormal(mu={s['mu']:.4f}, sigma={s['type_sigma']:.4f})",
                s["configurations"],
            ],
            ["speed, domain", f"lognormal(0, sigma={s['domain_sigma']:.4f})", s["deployments"]],
            [
                "WAN goodput",
                f"exp(Laplace(loc={g['loc']:.4f}, scale={g['scale']:.4f}))",
                g["pairs"],
            ],
            [
                "jitter",
                f"exp(Exponential(mean={j['mean_log']:.4f})), jobs: "
                + ", ".join(f"{v:.3f}" for v in j["jobs"].values()),
                len(j["jobs"]),
            ],
        ],
        note=f"residual sigma {s['sigma']:.4f} = type and domain together; "
        f"{g['left_out']} gcp->gcp pairs left out",
    )
    for name, why in skipped.items():
        print(f"skipped the {name} fit: {why}")
    write_atomic(args.out, render(params))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
