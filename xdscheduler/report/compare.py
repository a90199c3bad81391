"""`xds compare`'s statistics and files: means over seeds with 95% confidence intervals, changes
against a baseline paired by seed, the Markdown tables, the plots and the results page's section.

Input: one row per cell (scenario, giant share, load, seed, policy) with the study's figures by
name; the giant share is NaN in a cell of the workload as drawn. Every figure is also split
into the jobs that fit the largest domain's free share and the giants that ask for more
(`fit_...`, `giant_...`): crossing domains is worth what the giants gain, as long as the jobs
that fit lose nothing, and the tables and the headline say both.
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
from functools import partial
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
KEYS = ["scenario", "giant_share", "load", "policy"]
CLASSES = {"giant": "giants", "fit": "jobs that fit"}


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
    "objective_work": Figure("R (work)", 1.0, 3),
    "objective": Figure("R (per job)", 1.0, 3),
    "cross_domain_cost_usd": Figure("WAN ($)", 1.0, 0),
    "jobs_completed": Figure("jobs done", 1.0, 1),
    "jobs_never_started": Figure("never started", 1.0, 1),
    # |predicted / true - 1| of each placement's throughput, median: the model's error as the
    # policy used it (after its corrections), in the study's ground truth
    "prediction_error_p50": Figure("pred. error (%)", 100.0, 1),
}
# The fit/giant split (run_cell's `fit_...` and `giant_...` figures), in a table of its own.
CLASS_FIGURES = {
    "giant_jobs": Figure("giants", 1.0, 1),
    "giant_gpu_time_share": Figure("giants' GPU-time (%)", 100.0, 1),
    "giant_mean_jct_s": Figure("giants' JCT (h)", 1 / 3600, 2),
    "giant_never_started": Figure("giants never started", 1.0, 1),
    "giant_unfinished": Figure("giants unfinished", 1.0, 1),
    "giant_crossed": Figure("giants across", 1.0, 1),
    "fit_mean_jct_s": Figure("fits' JCT (h)", 1 / 3600, 2),
    "fit_never_started": Figure("fits never started", 1.0, 1),
    "fit_crossed": Figure("fits across", 1.0, 1),
}
ALL_FIGURES = FIGURES | CLASS_FIGURES
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
    """The cells with every figure and key: one the studies did not give (cells saved by an
    older version) is NaN, shown as "–"; a cell of the workload as drawn has no giant share."""
    return cells.assign(
        **{name: np.nan for name in [*ALL_FIGURES, "giant_share"] if name not in cells}
    )


def summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per scenario × giant share × load × policy × figure: mean over seeds, 95% half-width,
    seeds counted."""
    cells, rows = _complete(cells), []
    for key, group in cells.groupby(KEYS, sort=False, dropna=False):
        for name in ALL_FIGURES:
            est = mean_ci(group[name].astype(float))
            rows.append(
                dict(
                    zip(KEYS, key, strict=True),
                    figure=name,
                    mean=est.mean,
                    half_width=est.half_width,
                    n=est.n,
                )
            )
    return pd.DataFrame(rows)


def paired_change(policy: pd.Series, base: pd.Series, kind: str = "relative") -> Estimate:
    """Seed-paired change of `policy` against `base` (both indexed by seed): relative,
    (policy − base)/|base|, or the plain difference."""
    both = pd.concat([policy.rename("p"), base.rename("b")], axis=1).astype(float).dropna()
    diff = both["p"] - both["b"]
    return mean_ci(diff / both["b"].abs() if kind == "relative" else diff)


def change_kinds(cells: pd.DataFrame, baseline: str) -> dict[str, str]:
    """Per figure: relative where the baseline is never 0 in any cell that has the figure (a
    cell without giants has no giants' JCT), else the plain difference, down a whole column."""
    base = cells[cells["policy"] == baseline]
    return {
        name: "relative" if (base[name].astype(float).dropna() != 0).all() else "difference"
        for name in ALL_FIGURES
    }


def paired(cells: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Every other policy against `baseline`, seed by seed, per scenario × giant share × load ×
    figure."""
    cells = _complete(cells)
    kinds, rows = change_kinds(cells, baseline), []
    points = cells.groupby(KEYS[:-1], sort=False, dropna=False)
    for (scenario, share, load), point in points:
        base = point[point["policy"] == baseline].set_index("seed")
        for policy, group in point[point["policy"] != baseline].groupby("policy", sort=False):
            mine = group.set_index("seed")
            for name, kind in kinds.items():
                est = paired_change(mine[name], base[name], kind)
                rows.append(
                    {
                        "scenario": scenario,
                        "giant_share": share,
                        "load": load,
                        "policy": policy,
                        "figure": name,
                        "kind": kind,
                        "mean": est.mean,
                        "half_width": est.half_width,
                        "n": est.n,
                        "significant": est.significant,
                    }
                )
    return pd.DataFrame(
        rows, columns=[*KEYS, "figure", "kind", "mean", "half_width", "n", "significant"]
    )


def single_domain_leaders(cells: pd.DataFrame, table: pd.DataFrame) -> pd.Series:
    """Per (scenario, giant share, load): the single-domain policy with the highest mean R
    (work)."""
    single = cells.groupby("policy")["single_domain"].all()
    r = table[(table["figure"] == "objective_work") & table["policy"].map(single)]
    r = r.assign(giant_share=r["giant_share"].fillna(-1.0))  # a key idxmax can group on
    return r.loc[r.groupby(KEYS[:-1])["mean"].idxmax()].set_index(KEYS[:-1])["policy"]


def best_crossing(cells: pd.DataFrame, changes: pd.DataFrame) -> str | None:
    """The policy across domains with the best mean change in R (work), if one was run."""
    single = cells.groupby("policy")["single_domain"].all()
    r = changes[(changes["figure"] == "objective_work") & ~changes["policy"].map(single)]
    r = r.dropna(subset=["mean"])
    return None if r.empty else str(r.groupby("policy", sort=False)["mean"].mean().idxmax())


def headline(cells: pd.DataFrame, table: pd.DataFrame, changes: pd.DataFrame, baseline: str) -> str:
    """Sentences: which policy won against the baseline on R (work), where, and by how much;
    then what the best policy across domains did to the giants and to the jobs that fit, or,
    where the grid fixes the giants' share, its change in mean JCT along that share."""
    seeds = cells["seed"].nunique()
    r = changes[changes["figure"] == "objective_work"].dropna(subset=["mean"])
    if r.empty:
        return f"Only {baseline} was run: nothing to compare it with."
    best = r.groupby("policy", sort=False)["mean"].mean().idxmax()
    mine = r[r["policy"] == best]
    top = mine.loc[mine["mean"].idxmax()]
    jct = changes[(changes["policy"] == best) & (changes["figure"] == "mean_jct_s")]
    wins = int((mine["significant"] & (mine["mean"] > 0)).sum())
    losses = int((mine["significant"] & (mine["mean"] < 0)).sum())
    text = (
        f"**{best}**, the best of the others by mean change in R (work), "
        f"{_verdict(wins, losses)} **{baseline}** ({_leader_note(cells, table, baseline)}):"
        f" R (work) significantly higher at {wins} and lower at {losses} of {len(mine)} "
        f"{_points(changes)} ({seeds} seeds each, 95% CIs); R (work) {_span(mine)}, mean "
        f"JCT {_span(jct)}; the largest R (work) change at {_where(top)}: "
        f"{_change(top, FIGURES['objective_work'])}."
    )
    crossing = best_crossing(cells, changes)
    if crossing is None:
        return text
    mine = changes[changes["policy"] == crossing]
    drawn, fixed = mine[mine["giant_share"].isna()], mine[mine["giant_share"].notna()]
    if not drawn.empty:
        text += " " + _classes_sentence(cells, drawn, crossing, baseline)
    if not fixed.empty:
        text += " " + _curve_sentence(fixed, crossing, baseline)
    return text


def _points(changes: pd.DataFrame) -> str:
    return (
        "scenario × load points"
        if changes["giant_share"].isna().all()
        else "scenario × giant share × load points"
    )


def _where(row) -> str:
    share = "" if pd.isna(row["giant_share"]) else f"{row['giant_share']:.0%} in giants, "
    return f"{row['scenario']}, {share}load {float(row['load'])}"


def _classes_sentence(
    cells: pd.DataFrame, changes: pd.DataFrame, policy: str, baseline: str
) -> str:
    """Per scenario: the giants' count and share, and the change in mean JCT of the giants and
    of the jobs that fit, at each load."""
    parts = []
    for scenario, rows in changes.groupby("scenario", sort=False):
        mine = cells[
            (cells["scenario"] == scenario)
            & cells["giant_share"].isna()
            & (cells["policy"] == policy)
        ]
        head = (
            f"on {scenario} its {mine['giant_jobs'].mean():.1f} giants a study "
            f"({mine['giant_gpu_time_share'].mean():.0%} of the offered GPU-time)"
        )
        giants = _by_load(rows[rows["figure"] == "giant_mean_jct_s"])
        fits = _by_load(rows[rows["figure"] == "fit_mean_jct_s"])
        parts.append(f"{head}: {giants}; the jobs that fit: {fits}")
    return (
        f"Where crossing pays: {policy}'s change in mean JCT against {baseline}, by load: "
        + "; ".join(parts)
        + "."
    )


def _curve_sentence(changes: pd.DataFrame, policy: str, baseline: str) -> str:
    """Per scenario and share of the offered GPU-time in giants: the range over loads of the
    change in mean JCT of all jobs, and how many were significant."""
    parts = []
    for scenario, rows in changes.groupby("scenario", sort=False):
        jct = rows[rows["figure"] == "mean_jct_s"]
        said = []
        for share, at in jct.groupby("giant_share"):
            sig = int(at["significant"].sum())
            verdict = ": crossing ties" if share == 0 and not sig else ""
            said.append(
                f"with {share:.0%} of the offered GPU-time in giants {_span(at)} "
                f"(significant at {sig} of {len(at)} loads{verdict})"
            )
        parts.append(f"on {scenario}, " + ", ".join(said))
    return (
        f"As a curve, {policy}'s change in mean JCT of all jobs against {baseline}: "
        + "; ".join(parts)
        + "."
    )


def _by_load(rows: pd.DataFrame) -> str:
    """Paired changes at each load: '0.6: −31.0% ± 6.1%*, 0.8: ...'."""
    if rows.empty or rows["mean"].isna().all():
        return "none"
    return ", ".join(
        f"{float(r['load'])}: {_change(r, ALL_FIGURES[r['figure']])}" for _, r in rows.iterrows()
    )


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
        return "the strongest single-domain policy by R (work) at every point"
    where = ", ".join(f"{p} at {n}" for p, n in others.value_counts().items())
    return (
        f"the strongest single-domain policy by R (work) at {len(leaders) - len(others)} "
        f"of {len(leaders)} points; stronger: {where}"
    )


def _span(rows: pd.DataFrame) -> str:
    rows = rows.dropna(subset=["mean"])
    if rows.empty:
        return "–"
    lo, hi = rows["mean"].min(), rows["mean"].max()
    if rows["kind"].iloc[0] == "relative":
        return f"{lo:+.1%} to {hi:+.1%}" if len(rows) > 1 else f"{lo:+.1%}"
    return f"{lo:+,.3g} to {hi:+,.3g}" if len(rows) > 1 else f"{lo:+,.3g}"


def _change(row, fig: Figure) -> str:
    """A paired change as text: '+4.1% ± 1.2%*' (* significant at 95%)."""
    star = "*" if row["significant"] else ""
    if math.isnan(row["mean"]):
        return "–"
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


# The paired changes of the split shown: what crossing did to each class.
CLASS_CHANGES = (
    "giant_mean_jct_s",
    "giant_never_started",
    "giant_unfinished",
    "fit_mean_jct_s",
    "fit_never_started",
)


def markdown(
    head: str, cells: pd.DataFrame, table: pd.DataFrame, changes: pd.DataFrame, meta: dict
) -> str:
    """compare.md: the headline, the setting, the means per scenario × (giant share) × load ×
    policy, the fit/giant split, and the paired changes of both."""
    keys = (["giant_share"] if table["giant_share"].notna().any() else []) + ["load", "policy"]
    lines = [head, "", _setting(cells, meta), ""]
    for scenario, block in table.groupby("scenario", sort=False):
        lines += [f"**{scenario}**: means ± 95% CI half-width over seeds", ""]
        lines += _rows(block, keys, FIGURES, lambda by, f: _value(by.loc[f[0]], f[1]))
        lines += [
            f"**{scenario}**, jobs that fit the largest domain's free share and giants "
            f"that ask for more: means ± 95% CI half-width over seeds",
            "",
        ]
        lines += _rows(block, keys, CLASS_FIGURES, lambda by, f: _value(by.loc[f[0]], f[1]))
    if not changes.empty:
        lines += [
            f"**Against {meta['grid']['baseline']}**, paired by seed: mean of (policy − "
            f"baseline) / |baseline| ± 95% CI half-width (a plain difference, without %, "
            f"for a figure where the baseline is 0 in some cell; * significant at 95%)",
            "",
        ]
        keys = ["scenario", *keys]
        lines += _rows(changes, keys, FIGURES, lambda by, f: _change(by.loc[f[0]], f[1]))
        lines += [f"**Against {meta['grid']['baseline']}, by class**, paired by seed as above", ""]
        lines += _rows(
            changes,
            keys,
            {k: CLASS_FIGURES[k] for k in CLASS_CHANGES},
            lambda by, f: _change(by.loc[f[0]], f[1]),
        )
    return "\n".join(lines)


def _rows(frame: pd.DataFrame, keys: list[str], figures: dict[str, Figure], cell) -> list[str]:
    """A Markdown table: a row per `keys` group, a column per figure, each cell
    `cell(group by figure, (name, figure))`."""
    heads = [f.heading for f in figures.values()]
    labels_of = {"giant_share": "giants' share"}
    lines = [
        "| " + " | ".join([labels_of.get(k, k) for k in keys] + heads) + " |",
        "|" + "---|" * len(keys) + "---:|" * len(heads),
    ]
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        labels = [_label(k, v) for k, v in zip(keys, key, strict=True)]
        by = group.set_index("figure")
        lines.append("| " + " | ".join(labels + [cell(by, f) for f in figures.items()]) + " |")
    return [*lines, ""]


def _label(key: str, value) -> str:
    if key == "giant_share":
        return "as drawn" if pd.isna(value) else f"{value:.0%}"
    return str(float(value)) if isinstance(value, float) else str(value)


def _setting(cells: pd.DataFrame, meta: dict) -> str:
    """What the cells were: loads, seeds, hours, arrivals, what the workload held, what a
    giant is, and how unfinished jobs count."""
    grid = meta["grid"]
    shares = grid.get("giant_shares")
    scale = cells["work_scale"]
    if shares:
        giant = cells["giant_scale"].dropna()
        giant_range = f"{giant.min():.2f}-{giant.max():.2f}" if len(giant) else "none"
        workload = (
            f"Each cell fixes the share of the offered accelerator-time in giants "
            f"({', '.join(f'{x:.0%}' for x in shares)}): the generated jobs that fit "
            f"one domain, their work scaled by one factor ({scale.min():.2f}-"
            f"{scale.max():.2f}), and the generator's own giants (from further draws of "
            f"the seed where it drew too few), scaled by another ({giant_range}); the "
            f"scenarios' listed jobs are left out."
        )
    else:
        listed = meta.get("listed_jobs") or {}
        held = (
            f"the scenario's listed jobs ({', '.join(f'{s} {n}' for s, n in listed.items())})"
            f" and its generated workload"
            if grid.get("listed", True)
            else "the scenario's generated workload alone (--generated-only)"
        )
        workload = (
            f"Each cell holds {held}, every job's work scaled by one factor "
            f"({scale.min():.2f}-{scale.max():.2f}) so that the offered load is the "
            f"target exactly."
        )
    free = (
        cells.groupby("scenario", sort=False)["free_share_gpus"].mean()
        if "free_share_gpus" in cells
        else pd.Series(dtype=float)
    )
    giants = ", ".join(f"{s} {v:.0f}" for s, v in free.items())
    return (
        f"{len(grid['seeds'])} seeds × loads {', '.join(map(str, grid['loads']))} "
        f"× {grid['hours']:g} h of arrivals ({grid['arrivals']}) per scenario. {workload} "
        f"Sizes and arrival times are kept; every policy of a seed meets the same jobs and "
        f"network. A giant asks for more accelerators than the largest domain's free share "
        f"(its accelerators less what other tenants hold there on average while jobs "
        f"arrive: {giants or '–'}). R (work) is the scenario's objective with each job's "
        f"efficiency weighted by its work; R (per job), its plain mean over jobs, as "
        f"before (kept for one release); higher is better. An unfinished job counts the "
        f"least JCT it could still reach, its time so far plus its remaining work at its "
        f"ideal speed: a lower bound, kind to a policy that never starts it, so the jobs "
        f"never started are counted beside. WAN $ is the cross-domain traffic bill."
    )


def plot(table: pd.DataFrame, figure: str, path: Path) -> None:
    """A figure's mean against load, a line per policy with 95% CI error bars, a panel per
    scenario (and giant share)."""
    fig_spec = ALL_FIGURES[figure]
    rows = table[table["figure"] == figure]
    panels = list(
        dict.fromkeys(zip(rows["scenario"], rows["giant_share"].fillna(-1.0), strict=True))
    )
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False, sharey=False
    )
    policies = list(dict.fromkeys(rows["policy"]))
    colours = {p: f"C{i % 10}" for i, p in enumerate(policies)}
    # Policies side by side around each load, so that their error bars do not hide each other.
    loads = np.unique(rows["load"])
    step = 0.25 * (np.diff(loads).min() if len(loads) > 1 else 0.2) / max(len(policies), 1)
    dodge = {p: (i - (len(policies) - 1) / 2) * step for i, p in enumerate(policies)}
    for ax, (scenario, share) in zip(axes[0], panels, strict=True):
        mine = rows[(rows["scenario"] == scenario) & (rows["giant_share"].fillna(-1.0) == share)]
        for policy, line in mine.groupby("policy", sort=False):
            line = line.sort_values("load")
            ax.errorbar(
                line["load"] + dodge[policy],
                line["mean"] * fig_spec.scale,
                yerr=line["half_width"].fillna(0) * fig_spec.scale,
                label=policy,
                color=colours[policy],
                marker="o",
                capsize=3,
            )
        title = scenario if share < 0 else f"{scenario}, {share:.0%} of GPU-time in giants"
        ax.set(title=title, xlabel="offered load", ylabel=fig_spec.heading)
        means = mine["mean"].to_numpy(float)
        means = means[np.isfinite(means)]
        if len(means) and (means > 0).all() and means.max() > 10 * means.min():
            ax.set_yscale("log")  # a weak baseline far above would flatten all the others
        ax.grid(alpha=0.3, which="both")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # off the data
    fig.tight_layout()
    _save(fig, path)


FILES = (
    "compare.json",
    "compare.parquet",
    "compare.md",
    *PLOTTED,
    "compare_classes.png",
    "compare_giants.png",
)


def check_out(out: Path) -> Path:
    """The output folder, made, and every file `write` writes there checked writable: before
    a grid that may take an hour, not after it."""
    out = output_folder(Path(out))
    for name in FILES:
        output_file(out / name)
    return out


def plot_classes(table: pd.DataFrame, path: Path) -> None:
    """The giants' and the fitting jobs' mean JCT against load, a line per policy, a column
    of panels per scenario: where crossing pays, and what it costs the others."""
    rows = table[table["giant_share"].isna()]
    scenarios = list(dict.fromkeys(rows["scenario"]))
    figures = ("giant_mean_jct_s", "fit_mean_jct_s")
    fig, axes = plt.subplots(2, len(scenarios), figsize=(5.5 * len(scenarios), 8), squeeze=False)
    policies = list(dict.fromkeys(rows["policy"]))
    for col, scenario in enumerate(scenarios):
        for row, figure in enumerate(figures):
            ax, spec = axes[row][col], ALL_FIGURES[figure]
            mine = rows[(rows["scenario"] == scenario) & (rows["figure"] == figure)]
            for i, policy in enumerate(policies):
                line = mine[mine["policy"] == policy].sort_values("load")
                ax.errorbar(
                    line["load"] + 0.004 * (i - len(policies) / 2),
                    line["mean"] * spec.scale,
                    yerr=line["half_width"].fillna(0) * spec.scale,
                    label=policy,
                    color=f"C{i % 10}",
                    marker="o",
                    capsize=3,
                )
            ax.set(
                title=f"{scenario}: {spec.heading}", xlabel="offered load", ylabel="mean JCT (h)"
            )
            means = mine["mean"].to_numpy(float)
            means = means[np.isfinite(means)]
            if len(means) and (means > 0).all() and means.max() > 10 * means.min():
                ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    _save(fig, path)


def plot_curve(changes: pd.DataFrame, policy: str, baseline: str, path: Path) -> None:
    """Gain against the share of the offered GPU-time in giants: `policy`'s change in mean JCT
    against `baseline` (all jobs; and the giants alone), a line per load with 95% CIs, a panel
    per scenario."""
    rows = changes[(changes["policy"] == policy) & changes["giant_share"].notna()]
    scenarios = list(dict.fromkeys(rows["scenario"]))
    figures = {"mean_jct_s": "all jobs", "giant_mean_jct_s": "the giants"}
    fig, axes = plt.subplots(
        len(figures), len(scenarios), figsize=(5.5 * len(scenarios), 8), squeeze=False, sharex=True
    )
    for col, scenario in enumerate(scenarios):
        for row, (figure, who) in enumerate(figures.items()):
            ax = axes[row][col]
            mine = rows[(rows["scenario"] == scenario) & (rows["figure"] == figure)]
            for i, (load, line) in enumerate(mine.groupby("load")):
                line = line.sort_values("giant_share")
                ax.errorbar(
                    100 * line["giant_share"] + 0.3 * (i - 1.5),
                    100 * line["mean"],
                    yerr=100 * line["half_width"].fillna(0),
                    marker="o",
                    capsize=3,
                    label=f"load {load:g}",
                    color=f"C{i % 10}",
                )
            ax.axhline(0, color="black", lw=0.8)
            ax.set(
                title=f"{scenario}: {who}",
                xlabel="share of offered GPU-time in giants (%)",
                ylabel=f"mean JCT, {policy} vs {baseline} (%)",
            )
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    _save(fig, path)


def write(out: Path, cells: pd.DataFrame, meta: dict) -> dict:
    """Write compare.json, compare.parquet, compare.md and the plots into `out`; return the
    JSON object (with the table's text under `markdown`)."""
    out = check_out(out)
    cells = _complete(cells)
    baseline = meta["grid"]["baseline"]
    table = summary(cells)
    changes = paired(cells, baseline)
    head = headline(cells, table, changes, baseline)
    text = markdown(head, cells, table, changes, meta)
    doc = _clean(
        {
            **meta,
            "headline": head,
            "confidence": CONFIDENCE,
            "cells": cells.to_dict("records"),
            "summary": table.to_dict("records"),
            "paired": changes.to_dict("records"),
            "markdown": text,
        }
    )
    write_atomic(out / "compare.json", json.dumps(doc, indent=2, allow_nan=False) + "\n")
    write_atomic(out / "compare.parquet", lambda p: cells.to_parquet(p, index=False))
    write_atomic(out / "compare.md", text + "\n")
    for name, figure in PLOTTED.items():
        write_atomic(out / name, partial(plot, table, figure))
    if table["giant_share"].isna().any():
        write_atomic(out / "compare_classes.png", lambda p: plot_classes(table, p))
    crossing = best_crossing(cells, changes)
    if crossing is not None and changes["giant_share"].notna().any():
        write_atomic(
            out / "compare_giants.png", lambda p: plot_curve(changes, crossing, baseline, p)
        )
    return doc


META = ("grid", "command", "wall_s", "runtime", "cpus", "cells_run", "listed_jobs")
COLUMNS = (*KEYS, "seed", "single_domain", "work_scale")  # what the tables read of the cells
MAX_SAVED_BYTES = 256 << 20  # a grid of 10,000 cells is a few MB


def load(folder: Path) -> tuple[pd.DataFrame, dict]:
    """The cells and what was said about the run, saved by `write` in `folder`."""
    import pyarrow

    hint = f"(compare.json and compare.parquet, as `xds compare --out {folder}` writes)"
    if not folder.is_dir():
        raise UserError(f"--from {folder}: not a folder, so it holds no saved comparison {hint}")
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
        raise UserError(
            f"{folder}/compare.json lacks {', '.join(missing)}: write it again "
            f"with this version's `xds compare`"
        )
    runs = {"runs": saved["runs"]} if "runs" in saved else {}  # a join's, of earlier runs
    return cells, {k: saved[k] for k in META} | runs


def join(saved: list[tuple[pd.DataFrame, dict]], order: list[str]) -> tuple[pd.DataFrame, dict]:
    """Comparisons of one grid, each of its own policies (a policy added later, run alone),
    as one: their cells together, the policies in `order` (the registry's) where it names
    them, the first's baseline, the time and studies summed, and no command yet (the report
    names the one that runs them as one). UserError where the grids differ in anything but
    their policies (the jobs their scenarios listed included), or a policy is in two."""
    (_, meta), *rest = saved
    grid, policies = _grid_of(meta), list(meta["grid"]["policies"])
    for i, (_, other) in enumerate(rest, 2):
        if (theirs := _grid_of(other)) != grid:
            differ = sorted(k for k in grid.keys() | theirs.keys() if grid.get(k) != theirs.get(k))
            raise UserError(
                f"--from: comparison {i} ran another grid than the first ({', '.join(differ)} "
                "differ); only comparisons of the same scenarios, listed jobs, loads, seeds and "
                "hours join"
            )
        twice = [p for p in other["grid"]["policies"] if p in policies]
        if twice:
            raise UserError(
                f"--from: {', '.join(twice)} ran in comparison {i} and in an earlier one; "
                "join comparisons of different policies"
            )
        policies += other["grid"]["policies"]
    rank = {p: i for i, p in enumerate(order)}
    policies.sort(key=lambda p: rank.get(p, len(rank)))
    metas = [m for _, m in saved]
    return _in_run_order(pd.concat([c for c, _ in saved], ignore_index=True), policies), {
        **meta,
        "grid": {**meta["grid"], "policies": policies},
        "command": None,
        "wall_s": sum(m["wall_s"] for m in metas),
        "runtime": "+".join(dict.fromkeys(m["runtime"] for m in metas)),
        "cpus": max(m["cpus"] for m in metas),
        "cells_run": sum(m["cells_run"] for m in metas),
        "runs": sum(m.get("runs", 1) for m in metas),
    }


def _grid_of(meta: dict) -> dict:
    """What two runs must share to join: their grid but the policies, and the jobs their
    scenarios listed (a scenario file edited between the runs lists others)."""
    grid = {k: v for k, v in meta["grid"].items() if k not in ("policies", "baseline")}
    return grid | {"listed jobs": meta["listed_jobs"]}


def _in_run_order(cells: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """Cells in the order one run of all `policies` gives them (scenario, giant share, load,
    seed, then policy), which the tables keep: scenarios, shares and loads as first met."""

    def met(column: str) -> pd.Series:
        values = cells[column].fillna(-1.0) if column == "giant_share" else cells[column]
        return values.map({v: i for i, v in enumerate(dict.fromkeys(values))})

    keys = pd.DataFrame({c: met(c) for c in ("scenario", "giant_share", "load")})
    rank = {p: i for i, p in enumerate(policies)}
    keys["seed"], keys["policy"] = cells["seed"], cells["policy"].map(rank)
    return cells.loc[keys.sort_values(list(keys.columns), kind="stable").index].reset_index(
        drop=True
    )
