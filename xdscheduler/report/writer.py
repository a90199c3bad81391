"""A study's files: report.json (with its JSON Schema beside it), metrics.parquet, the PNG plots
and a self-contained report.html (with the resource graph of each policy).

Contract of `write_report(out_dir, report, domains, jobs, links, progress=False, segments=None,
topology=None)`:

- report: a `sim.records.Report`; written as report.json (indent 2) with NaN/inf as null, its
  schema as report.schema.json; the HTML tables take their columns from the records' fields.
- domains: policy, time_s, domain, gpus_total, gpus_busy, utilization (0–1), queue_len (the
  policy's queue at that time, repeated on each domain row), background_load.
- jobs: policy, job, arrival_s, start_s, end_s (NaN if unfinished), jct_s, queue_s, gpus,
  domains ("a+b"), placement, cross_domain_gb, replans, status.
- links: time_s, link ("a-b"), bandwidth_gbps, rtt_ms (the environment, shared by all policies).
- traffic (optional): policy, time_s, link, gbps, share, jobs: what each policy's jobs sent over
  each WAN link they crossed, per sample (`sim.metrics.traffic_table`); a table in report.html.
- segments (optional): policy, job, domain, gpus, start_s, end_s: where each job ran and when
  (`sim.metrics.segment_table`); gives gantt.png, the jobs by domain over time.
- topology (optional): {"domains": [{name, accelerator, total, lat, lon}], "links": [{a, b,
  leased_gbps, rtt_ms}]}; gives each policy's resource graph in report.html: domains filled by
  their mean share allocated, links coloured by their mean bandwidth over the lease.

metrics.parquet is one tidy table: a first column `table` says which rows are which ("domains",
"jobs", "links" or "traffic"); the other columns are the union of the tables' columns, null
where a table has no such column.
`pd.read_parquet(p).query("table == 'jobs'").dropna(axis=1, how="all")` gives one table back.
Extra columns of the inputs are kept.
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
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, SymmetricalLogLocator
from tqdm import tqdm

from xdscheduler.errors import UserError
from xdscheduler.sim.records import ClassFigures, PolicyMetrics, Relocations, Report, Swings
from xdscheduler.textfile import output_folder, write_atomic

COLUMNS = {
    "domains": [
        "policy",
        "time_s",
        "domain",
        "gpus_total",
        "gpus_busy",
        "utilization",
        "queue_len",
        "background_load",
    ],
    "jobs": [
        "policy",
        "job",
        "arrival_s",
        "start_s",
        "end_s",
        "jct_s",
        "queue_s",
        "gpus",
        "domains",
        "placement",
        "cross_domain_gb",
        "replans",
        "status",
    ],
    "links": ["time_s", "link", "bandwidth_gbps", "rtt_ms"],
    "traffic": ["policy", "time_s", "link", "gbps", "share", "jobs"],
}
PLOTS = {
    "utilization.png": "Share of each domain's accelerators busy over time, one panel per policy.",
    "jct.png": "Job completion times: share of all jobs finished within a given time (CDF).",
    "bandwidth.png": "Bandwidth of every WAN link over time (the same for every policy).",
    "queue.png": "Jobs waiting in the queue over time, per policy.",
    "gantt.png": "Where each job ran and when: every domain's accelerators stacked up, each job a "
    "bar of its colour over the time and accelerators it held (outlined: a job "
    "across domains), one panel per policy.",
}
HOURS = 1 / 3600
FILES = ("report.json", "report.schema.json", "metrics.parquet", *PLOTS, "report.html")


def write_report(
    out_dir: Path,
    report: Report,
    domains: pd.DataFrame,
    jobs: pd.DataFrame,
    links: pd.DataFrame,
    progress: bool = False,
    segments: pd.DataFrame | None = None,
    topology: dict | None = None,
    traffic: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """Write every file of the report into `out_dir`; return {file name: path}."""
    frames = {"domains": domains, "jobs": jobs, "links": links}
    if traffic is not None:
        frames["traffic"] = traffic
    for name, frame in frames.items():
        _check(name, frame)
    out = output_folder(Path(out_dir))
    summary = report_json(report)
    writers = {
        # allow_nan=False: fail here rather than write JSON that strict readers reject.
        "report.json": lambda p: p.write_text(
            json.dumps(summary, indent=2, allow_nan=False) + "\n"
        ),
        "report.schema.json": lambda p: p.write_text(
            json.dumps(Report.model_json_schema(), indent=2) + "\n"
        ),
        "metrics.parquet": lambda p: _tidy(frames).to_parquet(p, index=False),
        "utilization.png": lambda p: _save(_utilization(domains), p),
        "jct.png": lambda p: _save(_jct(jobs), p),
        "bandwidth.png": lambda p: _save(_bandwidth(links), p),
        "queue.png": lambda p: _save(_queue(domains), p),
    }
    if segments is not None:
        writers["gantt.png"] = lambda p: _save(gantt(segments, _capacity(topology, domains)), p)
    graphs = _graphs(topology, domains, links, traffic) if topology else ""
    shared = _traffic_table(traffic) if traffic is not None else ""
    # Last: the page embeds the PNGs written above.
    writers["report.html"] = lambda p: p.write_text(
        _html(summary, paths, graphs + shared), encoding="utf-8"
    )
    paths: dict[str, Path] = {}
    for name, write in tqdm(writers.items(), desc="report", unit="file", disable=not progress):
        paths[name] = write_atomic(out / name, write)  # never half a file (a full disk)
    return paths


def _check(name: str, frame) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise UserError(f"the {name} table must be a pandas DataFrame, not {type(frame).__name__}")
    missing = [c for c in COLUMNS[name] if c not in frame.columns]
    if missing:
        raise UserError(
            f"the {name} table lacks columns {', '.join(missing)}; "
            f"expected {', '.join(COLUMNS[name])}"
        )


def report_json(report: Report) -> dict:
    """report.json's content: the report as plain JSON values, NaN and infinities as null."""
    return _clean(report.model_dump(mode="python"))


def _clean(x):
    """JSON-safe: numpy values to Python, NaN and infinities to null, keys to str."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        x = x.tolist()
    if isinstance(x, list | tuple | set):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _tidy(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The three tables stacked, `table` first; an empty table still contributes its columns."""
    columns = list(dict.fromkeys(c for f in frames.values() for c in f.columns if c != "table"))
    # Empty frames are left out of concat (pandas warns on them) but keep their columns.
    parts = [
        f.drop(columns="table", errors="ignore").assign(table=n)
        for n, f in frames.items()
        if not f.empty
    ]
    tidy = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"table": []})
    return tidy.reindex(columns=["table", *columns]).astype({"table": str})


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=110)
    plt.close(fig)  # figures stay alive in pyplot until closed: a long study would leak them


def _empty(ax) -> None:
    ax.text(
        0.5,
        0.5,
        "no data",
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=14,
        color="0.4",
    )


def _legend(ax) -> None:
    # Outside the axes, so that no curve is hidden however many lines there are.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)


def _utilization(domains: pd.DataFrame):
    policies = list(dict.fromkeys(domains["policy"])) or [""]
    fig, axes = plt.subplots(
        len(policies),
        1,
        figsize=(9, 1.2 + 2.2 * len(policies)),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    # One colour per domain in every panel, so panels compare at a glance.
    colors = {d: f"C{i % 10}" for i, d in enumerate(dict.fromkeys(domains["domain"]))}
    for ax, policy in zip(axes[:, 0], policies, strict=True):
        rows = domains[domains["policy"] == policy].sort_values("time_s", kind="stable")
        for name, d in rows.groupby("domain", sort=False):
            ax.plot(
                d["time_s"] * HOURS,
                d["utilization"],
                label=str(name),
                color=colors[name],
                linewidth=1.2,
            )
        if rows.empty:
            _empty(ax)
        ax.set(title=str(policy), ylabel="utilisation (0–1)", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    if colors:  # every domain once, even one that a policy's panel lacks
        fig.legend(
            handles=[Line2D([], [], color=c, label=str(d)) for d, c in colors.items()],
            loc="outside right upper",
            fontsize=8,
            frameon=False,
            title="domain",
        )
    axes[-1, 0].set_xlabel("time (h)")
    fig.suptitle("Utilisation per domain")
    return fig


def _jct(jobs: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    shown = False
    for policy, rows in jobs.groupby("policy", sort=False):
        # Only finished jobs have a completion time; the curve tops out at their share.
        hours = np.sort(rows.loc[rows["end_s"].notna(), "jct_s"].dropna().to_numpy() * HOURS)
        if len(hours):
            ax.step(
                np.r_[0, hours],
                np.arange(len(hours) + 1) / len(rows),
                where="post",
                label=f"{policy} ({len(hours)}/{len(rows)} done)",
            )
            shown = True
    if shown:
        ax.set_xscale("symlog", linthresh=0.1)  # minutes to weeks; symlog keeps 0 in view
        ax.xaxis.set_major_locator(SymmetricalLogLocator(base=10, linthresh=0.1, subs=[1, 2, 5]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        _legend(ax)
    else:
        _empty(ax)
    ax.set(
        title="Job completion time (CDF over all jobs)",
        xlabel="completion time (h)",
        ylabel="share of jobs done",
        ylim=(0, 1.02),
    )
    ax.grid(alpha=0.3, which="both")
    return fig


NAMED_LINKS = 9  # links named in the bandwidth plot: more make a legend taller than the plot
SPREAD_FOR_LOG = 20  # links whose means differ more than this are plotted on a log scale


def _bandwidth(links: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    # the narrowest links (lowest mean), which bind jobs across them, are named; others grey
    # as floats: a study without links has an empty table of no type
    means = links.groupby("link")["bandwidth_gbps"].mean().astype(float)
    narrowest = list(means.nsmallest(NAMED_LINKS).index)
    colours = [f"C{i}" for i in range(10) if i != 7]  # the default cycle less its grey
    for name, rows in links.sort_values("time_s", kind="stable").groupby("link", sort=False):
        named = name in narrowest
        ax.plot(
            rows["time_s"] * HOURS,
            rows["bandwidth_gbps"],
            label=str(name) if named else None,
            linewidth=1 if named else 0.6,
            color=colours[narrowest.index(name)] if named else "0.75",
            zorder=2 if named else 1,
        )
    title = "WAN bandwidth per link"
    if links.empty:
        _empty(ax)
    else:
        if means.max() > SPREAD_FOR_LOG * max(means.min(), 1e-9):
            ax.set_yscale("log")  # else the narrow links, which bind, lie flat along zero
            title += ", log scale"
        else:
            ax.set_ylim(bottom=0)  # from zero, so a dip reads as its true share of the link
        _legend(ax)
        others = len(means) - len(narrowest)
        if others > 0:
            title += f" (the {len(narrowest)} narrowest named; {others} others in grey)"
    ax.set(title=title, xlabel="time (h)", ylabel="bandwidth (Gbit/s)")
    ax.grid(alpha=0.3)
    return fig


def _queue(domains: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(9, 3.5), layout="constrained")
    # queue_len repeats on every domain row of a time: one row per policy and time is enough.
    per_time = domains.drop_duplicates(["policy", "time_s"]).sort_values("time_s", kind="stable")
    for policy, rows in per_time.groupby("policy", sort=False):
        ax.step(rows["time_s"] * HOURS, rows["queue_len"], where="post", label=str(policy))
    if per_time.empty:
        _empty(ax)
    else:
        ax.set_ylim(bottom=0)
        _legend(ax)
    ax.set(title="Queue length", xlabel="time (h)", ylabel="jobs waiting")
    ax.grid(alpha=0.3)
    return fig


def _number(value) -> float | None:
    value = _clean(value)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _summary_table(policies: dict) -> str:
    columns = PolicyMetrics.columns()
    head = "".join(f"<th>{html.escape(c['heading'])}</th>" for _, c in columns)
    best = {}
    for key, c in columns:
        values = [v for row in policies.values() if (v := _number(row.get(key))) is not None]
        # A column where all agree has no winner worth marking.
        pick = min if c["lower_is_better"] else max
        best[key] = pick(values) if len(set(values)) > 1 else None
    rows = []
    for name, row in policies.items():
        cells = []
        for key, c in columns:
            value = _number(row.get(key))
            text = "–" if value is None else c["format"].format(value * c["scale"])
            if key == "jobs_completed" and value is not None and "jobs_total" in row:
                text += f" / {row['jobs_total']}"
            mark = ' class="best"' if value is not None and value == best[key] else ""
            cells.append(f"<td{mark}>{html.escape(text)}</td>")
        rows.append(f"<tr><th>{html.escape(str(name))}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"


def _swings_table(policies: dict) -> str:
    """Adjustments fired by load swings and RTT rises (dip, recovery), and apart from them the
    relocations those led to (what crossed the WAN, what was lost)."""
    blocks = {name: row["swings"] for name, row in policies.items() if row.get("swings")}
    if not blocks:
        return ""
    moves = {name: block.get("relocations") or {} for name, block in blocks.items()}
    return (
        "<h2>Adjustments on load swings and RTT rises</h2><p>The job re-planned on the "
        "domains it holds. dip: 1 − tokens trained from the trigger until recovery over "
        "what the rate before the swing would have trained; the adjustment's own dip: the "
        "same over what keeping the plan under the swing would have trained; recovery: "
        "until the job trains at min(new plan's rate, 90% of the rate before) with nothing "
        "pending.</p>"
        f"{_plain_table(blocks, Swings.columns())}"
        "<h3>Relocations to other domains</h3><p>Decided apart, when they pay for the job's "
        "time and the accelerator-seconds held idle or redoing work; lost: seconds of "
        "training paused or redone.</p>"
        f"{_plain_table(moves, Relocations.columns())}"
    )


def _classes_table(policies: dict) -> str:
    """Each policy's jobs split into those that fit the largest domain's free share and the
    giants that ask for more: what each class asked for, and what the policy did with it."""
    rows = {
        f"{name}: {cls}": figures
        for name, row in policies.items()
        for cls, figures in (row.get("classes") or {}).items()
    }
    if not rows:
        return ""
    share = next(iter(policies.values())).get("free_share_gpus")
    return (
        "<h2>Jobs that fit one domain, and giants</h2><p>A giant asks for more "
        f"accelerators than the largest domain's free share ({share or 0:.0f}: its "
        "accelerators less what other tenants held there on average while jobs arrived); "
        "it can have all it asks for only across domains. Crossing domains is worth what "
        "the giants gain, as long as the jobs that fit lose nothing.</p>"
        f"{_plain_table(rows, ClassFigures.columns(), 'policy: class')}"
    )


def _traffic_table(traffic: pd.DataFrame) -> str:
    """Per policy, each WAN link its jobs crossed: what they sent on it over the samples (the
    busier direction), at the peak as a share of the link, and the most jobs at once."""
    if traffic.empty:
        return ""
    by = traffic.groupby(["policy", "link"], sort=False)
    rows = {
        f"{policy}: {link}": {
            "mean": g["gbps"].mean(),
            "peak": g["gbps"].max(),
            "share": g["share"].max(),
            "jobs": g["jobs"].max(),
        }
        for (policy, link), g in by
    }
    columns = [
        ("mean", {"heading": "mean Gbit/s", "format": "{:.2f}", "scale": 1}),
        ("peak", {"heading": "peak Gbit/s", "format": "{:.2f}", "scale": 1}),
        ("share", {"heading": "peak share of the link (%)", "format": "{:.0f}", "scale": 100}),
        ("jobs", {"heading": "most jobs at once", "format": "{:.0f}", "scale": 1}),
    ]
    return (
        "<h2>WAN links the jobs shared</h2><p>What each policy's jobs sent over each WAN link "
        "they crossed, sampled with the network (the busier direction; mean over the samples "
        "it carried traffic). Jobs on one link share it: each finds it less what the others "
        "send, and at least an equal share.</p>"
        f"{_plain_table(rows, columns, 'policy: link')}"
    )


def _plain_table(
    rows: dict[str, dict], columns: list[tuple[str, dict]], label: str = "policy"
) -> str:
    """A row per policy of the records' columns, scaled, '–' where a value is missing."""
    head = "".join(f"<th>{html.escape(c['heading'])}</th>" for _, c in columns)

    def cell(value, c: dict) -> str:
        v = _number(value)
        return "–" if v is None else c["format"].format(v * c["scale"])

    body = "".join(
        f"<tr><th>{html.escape(str(name))}</th>"
        + "".join(f"<td>{cell(row.get(k), c)}</td>" for k, c in columns)
        + "</tr>"
        for name, row in rows.items()
    )
    return f"<table><tr><th>{html.escape(label)}</th>{head}</tr>{body}</table>"


def _capacity(topology: dict | None, domains: pd.DataFrame) -> dict[str, int]:
    """Accelerators per domain, in the scenario's order."""
    if topology:
        return {d["name"]: int(d["total"]) for d in topology["domains"]}
    return {
        str(k): int(v) for k, v in domains.groupby("domain", sort=False)["gpus_total"].max().items()
    }


def gantt(segments: pd.DataFrame, capacity: dict[str, int]):
    """Jobs by domain over time: each domain a band as tall as its accelerators, each stretch
    a job held accelerators there a bar over the accelerators it took (packed lowest first)."""
    policies = list(dict.fromkeys(segments["policy"])) or [""]
    fig, axes = plt.subplots(
        len(policies),
        1,
        figsize=(11, 1.2 + 2.6 * len(policies)),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    base = np.cumsum([0, *capacity.values()])[:-1]
    offset = dict(zip(capacity, base, strict=True))
    color = {j: plt.get_cmap("tab20")(k % 20) for k, j in enumerate(dict.fromkeys(segments["job"]))}
    for ax, policy in zip(axes[:, 0], policies, strict=True):
        rows = segments[segments["policy"] == policy]
        spread = rows.groupby(["job", "start_s"])["domain"].transform("nunique") > 1
        bars = _packed(rows.assign(spread=spread), capacity)
        if bars:
            job, dom, lo, size, start, end, cross = map(list, zip(*bars, strict=True))
            ax.barh(
                [offset[d] + a + n / 2 for d, a, n in zip(dom, lo, size, strict=True)],
                np.subtract(end, start) * HOURS,
                left=np.multiply(start, HOURS),
                height=size,
                color=[color[j] for j in job],
                edgecolor=["black" if c else "none" for c in cross],
                linewidth=0.5,
            )
        else:
            _empty(ax)
        for b in base[1:]:
            ax.axhline(b, color="0.3", linewidth=0.8)
        ax.set_yticks(base + np.array(list(capacity.values())) / 2, list(capacity))
        ax.set(title=str(policy), ylim=(0, sum(capacity.values())), ylabel="accelerators")
    axes[-1, 0].set_xlabel("time (h)")
    fig.suptitle("Jobs by domain over time")
    return fig


def _packed(rows: pd.DataFrame, capacity: dict[str, int]) -> list[tuple]:
    """Bars (job, domain, first accelerator, count, start, end, spread): each stretch on the
    lowest free accelerators of its domain at its start, split over gaps where it must be."""
    bars = []
    for domain, segs in rows.groupby("domain", sort=False):
        total = capacity.get(str(domain), 0)
        busy: list[tuple[float, int, int]] = []  # (until, first, count)
        for seg in segs.sort_values("start_s", kind="stable").itertuples():
            busy = [b for b in busy if b[0] > seg.start_s]
            need, at = int(seg.gpus), 0
            for _, first, count in [*sorted(busy, key=lambda b: b[1]), (0, total, 0)]:
                take = min(first - at, need)
                if take > 0:
                    bars.append((seg.job, domain, at, take, seg.start_s, seg.end_s, seg.spread))
                    busy.append((seg.end_s, at, take))
                    need -= take
                at = max(at, first + count)
                if need <= 0:
                    break
    return bars


def _graphs(
    topology: dict, domains: pd.DataFrame, links: pd.DataFrame, traffic: pd.DataFrame | None
) -> str:
    """Each policy's resource graph: domains filled by the mean share allocated over the study,
    links coloured by their mean bandwidth over the lease, and what the policy's jobs sent
    over each (its mean over the samples it carried traffic, as the links' table gives it)."""
    from xdscheduler.monitor.views import graph_svg

    mean_bw = links.groupby("link")["bandwidth_gbps"].mean() if not links.empty else {}
    edges = [
        {**lk, "bandwidth_gbps": float(mean_bw.get(f"{lk['a']}-{lk['b']}", lk["leased_gbps"]))}
        for lk in topology["links"]
    ]
    out = []
    for policy, rows in domains.groupby("policy", sort=False):
        busy = rows.groupby("domain")["gpus_busy"].mean()
        nodes = [
            {**d, "allocated": round(float(busy.get(d["name"], 0.0))), "up": True}
            for d in topology["domains"]
        ]
        sent = _sent(traffic, str(policy))
        mine = [
            {**e, "sent_gbps": sent.get(f"{e['a']}-{e['b']}", sent.get(f"{e['b']}-{e['a']}"))}
            for e in edges
        ]
        out.append(
            f'<figure class="graph" data-policy="{html.escape(str(policy))}">'
            f"{graph_svg(nodes, mine, title=str(policy))}</figure>"
        )
    return (
        "<h2>Resource graph</h2><p>Per policy: each domain filled by the mean share of its "
        "accelerators allocated over the study; each link by its mean bandwidth over the "
        "lease, and dashed, by the mean Gbit/s the policy's jobs sent over it while they did "
        f'(the busier direction).</p><div class="graphs">{"".join(out)}</div>'
    )


def _sent(traffic: pd.DataFrame | None, policy: str) -> dict[str, float]:
    """Per WAN link, the mean Gbit/s a policy's jobs sent over it while they did."""
    if traffic is None or traffic.empty:
        return {}
    mine = traffic[traffic["policy"] == policy]
    return {str(k): float(v) for k, v in mine.groupby("link")["gbps"].mean().items()}


def _html(summary: dict, paths: dict[str, Path], graphs: str = "") -> str:
    title = (
        f"xdscheduler study: {summary.get('scenario', '?')}, seed {summary.get('seed', '?')},"
        f" {summary.get('hours', '?')} h"
    )
    images = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(paths[name].read_bytes()).decode()}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for name, caption in PLOTS.items()
        if name in paths
    )
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1200px}"
        "table{border-collapse:collapse;font-size:14px}th,td{border:1px solid #ccc;"
        "padding:4px 8px;text-align:right}td.best{background:#d9f2d9;font-weight:bold}"
        "img{max-width:100%}figure{margin:1.5em 0}figcaption{color:#555}"
        ".graphs{display:flex;flex-wrap:wrap;gap:1em}.graphs figure{margin:0}"
    )
    jobs = f"{summary['jobs']} jobs; " if "jobs" in summary else ""
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(jobs)}best value per column in bold green.</p>"
        f"{_summary_table(summary.get('policies') or {})}"
        f"{_classes_table(summary.get('policies') or {})}"
        f"{_swings_table(summary.get('policies') or {})}{graphs}{images}</body></html>\n"
    )
