"""`xds compare`'s statistics and files: means over seeds with 95% confidence intervals, changes
against a baseline paired by seed, the Markdown table, the plots and the results page's section.

Input: one row per cell (scenario, load, seed, policy) with the study's figures by name.
A confidence interval is Student's t over the seeds (n − 1 degrees of freedom): mean ±
t(0.975, n − 1)·s/√n. A paired change is computed seed by seed, (policy − baseline)/|baseline|,
then averaged with the same interval; for a figure where the baseline is 0 in some cell (a
single-domain baseline's WAN bill) the plain difference is paired instead, down the whole
column. A change is significant at 95% when its interval leaves out 0 (the paired t-test at 5%).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: render to files
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats

from xdscheduler.errors import UserError
from xdscheduler.report.writer import _clean, _save
from xdscheduler.textfile import (
    checked_input,
    output_file,
    output_folder,
    read_text,
    write_atomic,
)

CONFIDENCE = 0.95
KEYS = ["scenario", "load", "policy"]


@dataclass(frozen=True)
class Figure:
    """How a figure is shown: heading, scale applied before formatting, decimals."""

    heading: str
    scale: float
    decimals: int


FIGURES = {
    "mean_jct_s": Figure("mean JCT (h)", 1 / 3600, 2),
    "mean_slowdown": Figure("slowdown", 1.0, 2),
    "useful_utilization": Figure("useful util. (%)", 100.0, 1),
    "objective": Figure("R", 1.0, 3),
    "cross_domain_cost_usd": Figure("WAN ($)", 1.0, 0),
    "jobs_completed": Figure("jobs done", 1.0, 1),
    # |predicted / true - 1| of each placement's throughput, median: the model's error as the
    # policy used it (after its corrections), in the study's ground truth
    "prediction_error_p50": Figure("pred. error (%)", 100.0, 1),
}
PLOTTED = {"compare_jct.png": "mean_jct_s", "compare_useful.png": "useful_utilization"}


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds and the half-width of its 95% interval (NaN with fewer than 2)."""

    mean: float
    half_width: float
    n: int

    @property
    def significant(self) -> bool:
        """The interval leaves out 0."""
        return self.n >= 2 and abs(self.mean) > self.half_width


def mean_ci(values) -> Estimate:
    """Mean and Student-t 95% half-width of the finite values."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if not len(x):
        return Estimate(math.nan, math.nan, 0)
    if len(x) == 1:
        return Estimate(float(x[0]), math.nan, 1)
    t = stats.t.ppf((1 + CONFIDENCE) / 2, len(x) - 1)
    return Estimate(float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(len(x))), len(x))


def _complete(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with every figure: one the studies did not give (cells saved by an older
    version) is NaN, shown as "–"."""
    return cells.assign(**{name: np.nan for name in FIGURES if name not in cells})


def summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per scenario × load × policy × figure: mean over seeds, 95% half-width, seeds counted."""
    cells, rows = _complete(cells), []
    for key, group in cells.groupby(KEYS, sort=False):
        for name in FIGURES:
            est = mean_ci(group[name].astype(float))
            rows.append(dict(zip(KEYS, key, strict=True), figure=name, mean=est.mean,
                             half_width=est.half_width, n=est.n))
    return pd.DataFrame(rows)


def paired_change(policy: pd.Series, base: pd.Series, kind: str = "relative") -> Estimate:
    """Seed-paired change of `policy` against `base` (both indexed by seed): relative,
    (policy − base)/|base|, or the plain difference."""
    both = pd.concat([policy.rename("p"), base.rename("b")], axis=1).astype(float).dropna()
    diff = both["p"] - both["b"]
    return mean_ci(diff / both["b"].abs() if kind == "relative" else diff)


def change_kinds(cells: pd.DataFrame, baseline: str) -> dict[str, str]:
    """Per figure: relative where the baseline is never 0 (nor missing) in any cell, else the
    plain difference, the same down a whole column."""
    base = cells[cells["policy"] == baseline]
    return {name: "relative" if (base[name].astype(float).fillna(0) != 0).all()
            else "difference" for name in FIGURES}


def paired(cells: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Every other policy against `baseline`, seed by seed, per scenario × load × figure."""
    cells = _complete(cells)
    kinds, rows = change_kinds(cells, baseline), []
    for (scenario, load), point in cells.groupby(["scenario", "load"], sort=False):
        base = point[point["policy"] == baseline].set_index("seed")
        for policy, group in point[point["policy"] != baseline].groupby("policy", sort=False):
            mine = group.set_index("seed")
            for name, kind in kinds.items():
                est = paired_change(mine[name], base[name], kind)
                rows.append({"scenario": scenario, "load": load, "policy": policy,
                             "figure": name, "kind": kind, "mean": est.mean,
                             "half_width": est.half_width, "n": est.n,
                             "significant": est.significant})
    return pd.DataFrame(rows, columns=[*KEYS, "figure", "kind", "mean", "half_width", "n",
                                       "significant"])


def single_domain_leaders(cells: pd.DataFrame, table: pd.DataFrame) -> pd.Series:
    """Per (scenario, load): the single-domain policy with the highest mean R."""
    single = cells.groupby("policy")["single_domain"].all()
    r = table[(table["figure"] == "objective") & table["policy"].map(single)]
    return r.loc[r.groupby(["scenario", "load"])["mean"].idxmax()].set_index(
        ["scenario", "load"])["policy"]


def headline(cells: pd.DataFrame, table: pd.DataFrame, changes: pd.DataFrame,
             baseline: str) -> str:
    """One sentence: which policy won against the baseline on R, where, and by how much."""
    seeds = cells["seed"].nunique()
    r = changes[changes["figure"] == "objective"]
    if r.empty:
        return f"Only {baseline} was run: nothing to compare it with."
    best = r.groupby("policy", sort=False)["mean"].mean().idxmax()
    mine = r[r["policy"] == best]
    top = mine.loc[mine["mean"].idxmax()]
    jct = changes[(changes["policy"] == best) & (changes["figure"] == "mean_jct_s")]
    wins = int((mine["significant"] & (mine["mean"] > 0)).sum())
    losses = int((mine["significant"] & (mine["mean"] < 0)).sum())
    return (f"**{best}**, the best of the others by mean change in R, "
            f"{_verdict(wins, losses)} **{baseline}** ({_leader_note(cells, table, baseline)}): "
            f"R significantly higher at {wins} and lower at {losses} of {len(mine)} scenario × "
            f"load points ({seeds} seeds each, 95% CIs); R {_span(mine)}, mean JCT "
            f"{_span(jct)}; the largest R change at {top['scenario']}, load "
            f"{float(top['load'])}: {_change(top, FIGURES['objective'])}.")


def _verdict(wins: int, losses: int) -> str:
    """What significant wins and losses on R add up to."""
    if wins and losses:
        return "wins and loses against"
    if wins:
        return "beats"
    return "loses to" if losses else "is not significantly different from"


def _leader_note(cells: pd.DataFrame, table: pd.DataFrame, baseline: str) -> str:
    leaders = single_domain_leaders(cells, table)
    others = leaders[leaders != baseline]
    if leaders.empty or baseline not in set(cells.loc[cells["single_domain"], "policy"]):
        return "the baseline"
    if others.empty:
        return "the strongest single-domain policy by R at every point"
    where = ", ".join(f"{p} at {n}" for p, n in others.value_counts().items())
    return (f"the strongest single-domain policy by R at {len(leaders) - len(others)} of "
            f"{len(leaders)} points; stronger: {where}")


def _span(rows: pd.DataFrame) -> str:
    lo, hi = rows["mean"].min(), rows["mean"].max()
    if rows["kind"].iloc[0] == "relative":
        return f"{lo:+.1%} to {hi:+.1%}" if len(rows) > 1 else f"{lo:+.1%}"
    return f"{lo:+,.3g} to {hi:+,.3g}" if len(rows) > 1 else f"{lo:+,.3g}"


def _change(row, fig: Figure) -> str:
    """A paired change as text: '+4.1% ± 1.2%*' (* significant at 95%)."""
    star = "*" if row["significant"] else ""
    if row["kind"] == "relative":
        half = "–" if math.isnan(row["half_width"]) else f"{row['half_width']:.1%}"
        return f"{row['mean']:+.1%} ± {half}{star}"
    return _value(row, fig, sign="+") + star


def _value(row, fig: Figure, sign: str = "") -> str:
    """A mean and its 95% half-width as text, in the figure's units: '3.21 ± 0.40'."""
    if math.isnan(row["mean"]):
        return "–"
    half = row["half_width"]
    half_text = "–" if math.isnan(half) else f"{half * fig.scale:,.{fig.decimals}f}"
    return f"{row['mean'] * fig.scale:{sign},.{fig.decimals}f} ± {half_text}"


def markdown(head: str, cells: pd.DataFrame, table: pd.DataFrame, changes: pd.DataFrame,
             meta: dict) -> str:
    """compare.md: the headline, the means per scenario × load × policy, the paired changes."""
    lines = [head, "", _setting(cells, meta), ""]
    for scenario, block in table.groupby("scenario", sort=False):
        lines += [f"**{scenario}**: means ± 95% CI half-width over seeds", ""]
        lines += _rows(block, ["load", "policy"],
                       lambda by: [_value(by.loc[n], f) for n, f in FIGURES.items()])
    if not changes.empty:
        lines += [f"**Against {meta['grid']['baseline']}**, paired by seed: mean of (policy − "
                  f"baseline) / |baseline| ± 95% CI half-width (a plain difference, without %, "
                  f"for a figure where the baseline is 0 in some cell; * significant at 95%)",
                  ""]
        lines += _rows(changes, KEYS,
                       lambda by: [_change(by.loc[n], f) for n, f in FIGURES.items()])
    return "\n".join(lines)


def _rows(frame: pd.DataFrame, keys: list[str], cells) -> list[str]:
    """A Markdown table: a row per `keys` group, the figures' cells from `cells(by figure)`."""
    heads = [f.heading for f in FIGURES.values()]
    lines = ["| " + " | ".join(keys + heads) + " |",
             "|" + "---|" * len(keys) + "---:|" * len(heads)]
    for key, group in frame.groupby(keys, sort=False):
        labels = [str(float(k)) if isinstance(k, float) else str(k) for k in key]
        lines.append("| " + " | ".join(labels + cells(group.set_index("figure"))) + " |")
    return [*lines, ""]


def _setting(cells: pd.DataFrame, meta: dict) -> str:
    """What the cells were: loads, seeds, hours, arrivals, and what was left out."""
    grid = meta["grid"]
    left = ", ".join(f"{s} {n}" for s, n in meta["listed_jobs_left_out"].items())
    scale = cells["work_scale"]
    return (f"{len(grid['seeds'])} seeds × loads {', '.join(map(str, grid['loads']))} "
            f"× {grid['hours']:g} h of arrivals ({grid['arrivals']}) per scenario. Each cell "
            f"is the scenario's generated workload alone (its listed jobs left out: {left}), "
            f"every job's work scaled by one factor ({scale.min():.2f}-{scale.max():.2f}) so "
            f"that the offered load is the target exactly; every policy of a seed meets the "
            f"same jobs and network. R is the scenario's objective (higher is better); WAN $ "
            f"the cross-domain traffic bill.")


def plot(table: pd.DataFrame, figure: str, path: Path) -> None:
    """A figure's mean against load, a line per policy with 95% CI error bars, a panel per
    scenario."""
    fig_spec = FIGURES[figure]
    rows = table[table["figure"] == figure]
    scenarios = list(dict.fromkeys(rows["scenario"]))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.5 * len(scenarios), 4.2),
                             squeeze=False, sharey=False)
    policies = list(dict.fromkeys(rows["policy"]))
    colours = {p: f"C{i % 10}" for i, p in enumerate(policies)}
    # Policies side by side around each load, so that their error bars do not hide each other.
    loads = np.unique(rows["load"])
    step = 0.25 * (np.diff(loads).min() if len(loads) > 1 else 0.2) / max(len(policies), 1)
    dodge = {p: (i - (len(policies) - 1) / 2) * step for i, p in enumerate(policies)}
    for ax, scenario in zip(axes[0], scenarios, strict=True):
        for policy, line in rows[rows["scenario"] == scenario].groupby("policy", sort=False):
            line = line.sort_values("load")
            ax.errorbar(line["load"] + dodge[policy], line["mean"] * fig_spec.scale,
                        yerr=line["half_width"].fillna(0) * fig_spec.scale, label=policy,
                        color=colours[policy], marker="o", capsize=3)
        ax.set(title=scenario, xlabel="offered load", ylabel=fig_spec.heading)
        means = rows.loc[rows["scenario"] == scenario, "mean"].to_numpy(float)
        if (means > 0).all() and means.max() > 10 * means.min():
            ax.set_yscale("log")  # a weak baseline far above would flatten all the others
        ax.grid(alpha=0.3, which="both")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # off the data
    fig.tight_layout()
    _save(fig, path)


FILES = ("compare.json", "compare.parquet", "compare.md", *PLOTTED)


def check_out(out: Path) -> Path:
    """The output folder, made, and every file `write` writes there checked writable: before
    a grid that may take an hour, not after it."""
    out = output_folder(Path(out))
    for name in FILES:
        output_file(out / name)
    return out


def write(out: Path, cells: pd.DataFrame, meta: dict) -> dict:
    """Write compare.json, compare.parquet, compare.md and the plots into `out`; return the
    JSON object (with the table's text under `markdown`)."""
    out = check_out(out)
    table = summary(cells)
    changes = paired(cells, meta["grid"]["baseline"])
    head = headline(cells, table, changes, meta["grid"]["baseline"])
    text = markdown(head, cells, table, changes, meta)
    doc = _clean({**meta, "headline": head,
                  "confidence": CONFIDENCE, "cells": cells.to_dict("records"),
                  "summary": table.to_dict("records"), "paired": changes.to_dict("records"),
                  "markdown": text})
    write_atomic(out / "compare.json", json.dumps(doc, indent=2, allow_nan=False) + "\n")
    write_atomic(out / "compare.parquet", lambda p: cells.to_parquet(p, index=False))
    write_atomic(out / "compare.md", text + "\n")
    for name, figure in PLOTTED.items():
        write_atomic(out / name, lambda p, figure=figure: plot(table, figure, p))
    return doc


META = ("grid", "command", "wall_s", "runtime", "cpus", "cells_run", "listed_jobs_left_out")
COLUMNS = (*KEYS, "seed", "single_domain", "work_scale")  # what the tables read of the cells
MAX_SAVED_BYTES = 256 << 20  # a grid of 10,000 cells is a few MB


def load(folder: Path) -> tuple[pd.DataFrame, dict]:
    """The cells and what was said about the run, saved by `write` in `folder`."""
    import pyarrow

    hint = f"(compare.json and compare.parquet, as `xds compare --out {folder}` writes)"
    if not folder.is_dir():
        raise UserError(f"--from {folder}: not a folder, so it holds no saved comparison "
                        f"{hint}")
    text = read_text(folder / "compare.json", "saved comparison", MAX_SAVED_BYTES, "JSON")
    path = checked_input(folder / "compare.parquet", "saved cells", MAX_SAVED_BYTES)
    try:
        saved = json.loads(text)
        cells = pd.read_parquet(path)
    except (OSError, ValueError, pyarrow.ArrowException) as err:
        raise UserError(f"{folder} holds no readable comparison {hint}: {err}") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("grid"), dict):
        raise UserError(f"{folder}/compare.json is not a saved comparison {hint}")
    lacking = [c for c in COLUMNS if c not in cells.columns]
    if lacking:
        raise UserError(f"{folder}/compare.parquet lacks the columns {', '.join(lacking)}")
    missing = [k for k in META if k not in saved]
    if missing:
        raise UserError(f"{folder}/compare.json lacks {', '.join(missing)}: write it again "
                        f"with this version's `xds compare`")
    return cells, {k: saved[k] for k in META}


