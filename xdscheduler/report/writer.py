"""A study's files: report.json, metrics.parquet, four PNG plots and a self-contained report.html.

metrics.parquet is one tidy table: a `table` column says which rows are which ("domains":
time series per domain and policy, "jobs": one row per job and policy, "links": bandwidth and
RTT per link over time); the other columns are those of that table, empty elsewhere.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: render to files
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from xdscheduler.errors import UserError

COLUMNS = {
    "domains": ["policy", "time_s", "domain", "gpus_total", "gpus_busy", "utilization",
                "queue_len", "background_load"],
    "jobs": ["policy", "job", "arrival_s", "start_s", "end_s", "jct_s", "queue_s", "gpus",
             "domains", "placement", "cross_domain_gb", "replans", "status"],
    "links": ["time_s", "link", "bandwidth_gbps", "rtt_ms"],
}
# Summary columns: key, heading, scale, format, whether lower is better.
SUMMARY = [
    ("mean_jct_s", "mean JCT (h)", 1 / 3600, "{:.2f}", True),
    ("p95_jct_s", "p95 JCT (h)", 1 / 3600, "{:.2f}", True),
    ("makespan_s", "makespan (h)", 1 / 3600, "{:.1f}", True),
    ("avg_utilization", "utilisation", 1, "{:.1%}", False),
    ("mean_queue_s", "mean queue (h)", 1 / 3600, "{:.2f}", True),
    ("jobs_completed", "jobs done", 1, "{:.0f}", False),
    ("cross_domain_gb", "WAN traffic (GB)", 1, "{:,.0f}", True),
    ("cross_domain_cost", "WAN cost ($)", 1, "{:,.0f}", True),
    ("decision_ms_p50", "decision p50 (ms)", 1, "{:.1f}", True),
    ("decision_ms_p99", "decision p99 (ms)", 1, "{:.1f}", True),
    ("objective", "objective R", 1, "{:.3f}", False),
]
PLOTS = {
    "utilization.png": "Accelerators busy in each domain over time, per policy.",
    "jct.png": "Job completion times: the share of jobs done within a given time.",
    "bandwidth.png": "Bandwidth of every WAN link over time (the same for every policy).",
    "queue.png": "Jobs waiting in the queue over time, per policy.",
}


def _check(name: str, frame: pd.DataFrame) -> None:
    missing = [c for c in COLUMNS[name] if c not in frame.columns]
    if missing:
        raise UserError(f"the {name} table lacks columns {', '.join(missing)}")


def _clean(x):
    """JSON-safe: numpy scalars to Python, NaN and infinities to null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_report(out_dir: Path, summary: dict, domains: pd.DataFrame, jobs: pd.DataFrame,
                 links: pd.DataFrame, progress: bool = False) -> dict[str, Path]:
    """Write every file of the report into `out_dir`; return {name: path}."""
    for name, frame in (("domains", domains), ("jobs", jobs), ("links", links)):
        _check(name, frame)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report.json": out / "report.json", "metrics.parquet": out / "metrics.parquet"}
    paths["report.json"].write_text(json.dumps(_clean(summary), indent=2) + "\n")
    tidy = pd.concat([f.assign(table=n) for n, f in (("domains", domains), ("jobs", jobs),
                                                      ("links", links)) if not f.empty],
                     ignore_index=True) if len(domains) + len(jobs) + len(links) else \
        pd.DataFrame(columns=["table"])
    tidy.to_parquet(paths["metrics.parquet"], index=False)
    figures = {"utilization.png": _utilization(domains), "jct.png": _jct(jobs),
               "bandwidth.png": _bandwidth(links), "queue.png": _queue(domains)}
    for name, fig in figures.items():
        paths[name] = out / name
        fig.savefig(paths[name], dpi=110, bbox_inches="tight")
        plt.close(fig)
    paths["report.html"] = out / "report.html"
    paths["report.html"].write_text(_html(summary, paths))
    return paths


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)


def _utilization(domains: pd.DataFrame):
    policies = list(dict.fromkeys(domains["policy"])) or [""]
    fig, axes = plt.subplots(len(policies), 1, figsize=(9, 2.4 * len(policies)), sharex=True,
                             sharey=True, squeeze=False)
    for ax, policy in zip(axes[:, 0], policies, strict=True):
        rows = domains[domains["policy"] == policy]
        for name, d in rows.groupby("domain", sort=False):
            ax.plot(d["time_s"] / 3600, d["utilization"], label=name, linewidth=1.2)
        if rows.empty:
            _empty(ax, "samples")
        ax.set(title=policy, ylabel="busy share", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    if not domains.empty:
        axes[0, 0].legend(ncol=6, fontsize=8, loc="lower right")
    axes[-1, 0].set_xlabel("time (h)")
    fig.suptitle("Utilisation per domain")
    return fig


def _jct(jobs: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(8, 4))
    for policy, rows in jobs.groupby("policy", sort=False):
        hours = np.sort(rows["jct_s"].dropna().to_numpy() / 3600)
        if len(hours):
            ax.step(hours, np.arange(1, len(hours) + 1) / len(rows), where="post", label=policy)
    if jobs["jct_s"].dropna().empty:
        _empty(ax, "completed jobs")
    else:
        ax.set_xscale("log")
        ax.legend()
    ax.set(title="Job completion time (CDF over all jobs)", xlabel="completion time (h)",
           ylabel="share of jobs done", ylim=(0, 1.02))
    ax.grid(alpha=0.3, which="both")
    return fig


def _bandwidth(links: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, rows in links.groupby("link", sort=False):
        ax.plot(rows["time_s"] / 3600, rows["bandwidth_gbps"], label=name, linewidth=1)
    if links.empty:
        _empty(ax, "links")
    else:
        ax.legend(ncol=5, fontsize=8)
    ax.set(title="WAN bandwidth over time", xlabel="time (h)", ylabel="bandwidth (Gbit/s)")
    ax.grid(alpha=0.3)
    return fig


def _queue(domains: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(8, 3.5))
    per_time = domains.drop_duplicates(["policy", "time_s"])
    for policy, rows in per_time.groupby("policy", sort=False):
        ax.step(rows["time_s"] / 3600, rows["queue_len"], where="post", label=policy)
    if per_time.empty:
        _empty(ax, "samples")
    else:
        ax.legend()
    ax.set(title="Queue length", xlabel="time (h)", ylabel="jobs waiting")
    ax.grid(alpha=0.3)
    return fig


def _summary_table(policies: dict) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, *_ in SUMMARY)
    best = {}
    for key, _, _, _, lower in SUMMARY:
        values = [v[key] for v in policies.values()
                  if isinstance(v.get(key), int | float) and math.isfinite(v[key])]
        best[key] = (min if lower else max)(values) if values else None
    rows = []
    for name, row in policies.items():
        cells = []
        for key, _, scale, fmt, _ in SUMMARY:
            value = row.get(key)
            ok = isinstance(value, int | float) and math.isfinite(value)
            text = fmt.format(value * scale) if ok else "–"
            mark = ' class="best"' if ok and value == best[key] and len(policies) > 1 else ""
            cells.append(f"<td{mark}>{html.escape(text)}</td>")
        rows.append(f"<tr><th>{html.escape(name)}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"


def _html(summary: dict, paths: dict[str, Path]) -> str:
    title = (f"xdscheduler study: {summary.get('scenario', '')}, seed {summary.get('seed', '')},"
             f" {summary.get('hours', '')} h of arrivals")
    images = "".join(
        f"<figure><img alt=\"{html.escape(name)}\" src=\"data:image/png;base64,"
        f"{base64.b64encode(paths[name].read_bytes()).decode()}\">"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for name, caption in PLOTS.items())
    style = ("body{font-family:sans-serif;margin:2em;max-width:1100px}"
             "table{border-collapse:collapse;font-size:14px}th,td{border:1px solid #ccc;"
             "padding:4px 8px;text-align:right}td.best{background:#d9f2d9;font-weight:bold}"
             "img{max-width:100%}figure{margin:1.5em 0}figcaption{color:#555}")
    jobs = summary.get("jobs", "")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(str(jobs))} jobs; best value per column in green.</p>"
            f"{_summary_table(summary.get('policies', {}))}{images}</body></html>\n")
