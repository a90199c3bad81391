import json
import math

import numpy as np
import pandas as pd
import pytest

from xdscheduler.errors import UserError
from xdscheduler.report.writer import write_report
from xdscheduler.sim.reconfig import summary as swing_summary
from xdscheduler.sim.records import PolicyMetrics, PolicyReport, Report

POLICIES = ("planner", "single-<domain>")  # "<" checks that the page escapes names
FILES = {
    "report.json",
    "report.schema.json",
    "metrics.parquet",
    "utilization.png",
    "jct.png",
    "bandwidth.png",
    "queue.png",
    "report.html",
}
FIGURES = {  # what each policy's row says; the rest of its record is zero or missing
    POLICIES[0]: {
        "mean_jct_s": np.float64(3602.5),
        "useful_utilization": 0.5,
        "jobs_completed": 4,
        "jobs_total": 5,
        "objective": float("nan"),
        "free_share_gpus": 460.8,
        "classes": {
            "fit": {
                "jobs": 4,
                "gpu_time_share": 0.25,
                "mean_jct_s": 3600.0,
                "work_efficiency": 0.9,
                "mean_queue_s": 60.0,
                "never_started": 0,
                "unfinished": 0,
                "crossed": 0,
            },
            "giant": {
                "jobs": 1,
                "gpu_time_share": 0.75,
                "mean_jct_s": 18000.0,
                "work_efficiency": 0.3,
                "mean_queue_s": 7200.0,
                "never_started": 1,
                "unfinished": 1,
                "crossed": 0,
            },
        },
    },
    POLICIES[1]: {
        "mean_jct_s": 4000.0,
        "useful_utilization": 0.4,
        "jobs_completed": 3,
        "jobs_total": 5,
        "objective": 0.2,
    },
}


def policy(figures: dict) -> PolicyReport:
    """A policy's record: `figures`, zero counts and totals, no other figures."""
    fields = PolicyMetrics.model_fields
    empty = {
        k: [] if k == "domains_down" else 0 if f.annotation in (int, float) else None
        for k, f in fields.items()
        if f.is_required()
    }
    return PolicyReport(**{**empty, **figures}, single_domain=False, swings=swing_summary([]))


def frames():
    times = [0.0, 1800.0, 3600.0, 5400.0]
    domains = pd.DataFrame(
        [
            {
                "policy": p,
                "time_s": t,
                "domain": d,
                "gpus_total": 64,
                "gpus_busy": 16 * (k + 1),
                "utilization": 0.25 * (k + 1),
                "queue_len": int(t // 1800),
                "background_load": 0.1,
            }
            for p in POLICIES
            for t in times
            for k, d in enumerate(("jjj", "imn", "ohio"))
        ]
    )
    jobs = pd.DataFrame(
        [
            {
                "policy": p,
                "job": f"j{i}",
                "arrival_s": 0.0,
                "start_s": 60.0 * i,
                "end_s": 3600.0 * (i + 1) if i < 4 else np.nan,
                "jct_s": 3600.0 * (i + 1) if i < 4 else np.nan,
                "queue_s": 60.0 * i,
                "gpus": 8,
                "domains": "jjj+imn",
                "placement": "pipeline",
                "cross_domain_gb": 1.5,
                "replans": 0,
                "status": "completed" if i < 4 else "running",
            }
            for p in POLICIES
            for i in range(5)
        ]
    )
    links = pd.DataFrame(
        [
            {"time_s": t, "link": link, "bandwidth_gbps": 5.0 + k, "rtt_ms": 20.0}
            for t in times
            for k, link in enumerate(("jjj-imn", "imn-ohio"))
        ]
    )
    summary = Report(
        scenario="s",
        seed=np.int64(1),
        hours=2.0,
        jobs=5,
        offered_load=0.9,
        background_load=0.1,
        runtime="local",
        weights={"efficiency": 1.0, "utilization": 0.0, "cost": 0.0},
        policies={p: policy(FIGURES[p]) for p in POLICIES},
        comparison={"baseline": None, "policies": {}},
    )
    return summary, domains, jobs, links


def test_every_file_is_written_and_reads_back(tmp_path):
    summary, domains, jobs, links = frames()
    (tmp_path / "notes.txt").write_text("mine")
    paths = write_report(tmp_path, summary, domains, jobs, links)
    assert set(paths) == FILES and all(p.stat().st_size > 0 for p in paths.values())
    assert (tmp_path / "notes.txt").read_text() == "mine"  # other files are left alone
    back = json.loads((tmp_path / "report.json").read_text())
    assert back["seed"] == 1 and back["hours"] == 2.0
    for name, row in FIGURES.items():
        for key, value in row.items():
            expected = value if isinstance(value, dict) or not math.isnan(value) else None
            assert back["policies"][name][key] == expected
    Report.model_validate(back)  # the file reads back as the typed report
    schema = json.loads((tmp_path / "report.schema.json").read_text())
    assert "cross_domain_cost_usd" in schema["$defs"]["PolicyReport"]["properties"]
    tidy = pd.read_parquet(tmp_path / "metrics.parquet")
    assert tidy["table"].value_counts().to_dict() == {"domains": 24, "jobs": 10, "links": 8}
    got = tidy[tidy["table"] == "jobs"].reset_index(drop=True)[jobs.columns]
    pd.testing.assert_frame_equal(got, jobs, check_dtype=False)
    page = (tmp_path / "report.html").read_text()
    assert page.count('<img alt="') == 4 and page.count("data:image/png;base64,") == 4
    assert "planner" in page and "single-&lt;domain&gt;" in page and "<domain>" not in page
    # the fit/giant split, JCT in hours, its share of the offered GPU-time in %
    assert (
        "free share (461" in page
        and "<th>planner: giant</th><td>1</td><td>75.0</td><td>5.00</td>" in page
    )


def test_empty_tables_still_give_a_report(tmp_path):
    summary, domains, jobs, links = frames()
    paths = write_report(tmp_path / "new", summary, domains.iloc[:0], jobs.iloc[:0], links.iloc[:0])
    assert set(paths) == FILES and all(p.stat().st_size > 0 for p in paths.values())
    assert pd.read_parquet(paths["metrics.parquet"]).empty


def test_a_study_without_links_gets_a_report(tmp_path):
    """One domain, no links: the links table is empty and of no type (it crashed the plot)."""
    summary, domains, jobs, links = frames()
    paths = write_report(
        tmp_path / "new", summary, domains, jobs, pd.DataFrame(columns=links.columns)
    )
    assert set(paths) == FILES


@pytest.mark.parametrize("frame", ["domains", "jobs", "links"])
def test_a_missing_column_is_named(tmp_path, frame):
    summary, domains, jobs, links = frames()
    tables = {"domains": domains, "jobs": jobs, "links": links}
    tables[frame] = tables[frame].drop(columns=["time_s" if frame != "jobs" else "jct_s"])
    with pytest.raises(UserError, match=f"{frame} table lacks columns (time_s|jct_s)"):
        write_report(tmp_path, summary, **tables)
    assert not any(tmp_path.iterdir())  # checked before anything is written


def test_the_swings_block_gets_its_own_table(tmp_path):
    from xdscheduler.costmodel.plan import Plan
    from xdscheduler.planner.placement import Placement
    from xdscheduler.planner.space import SINGLE
    from xdscheduler.sim.reconfig import Relocation, Swing

    summary, domains, jobs, links = frames()
    # reference 100 tok/s; 5 s at 100, then 1 s paused: dip 1 - 500 / 600, recovery 6 s
    s = Swing(
        "j0",
        "load",
        "make-before-break",
        0.0,
        100.0,
        100.0,
        150.0,
        0.0,
        5.0,
        1.0,
        end_s=6.0,
        tokens=500.0,
    )
    p = Placement("j2", SINGLE, (1,), (8,), Plan(dp=8))
    moves = [
        Relocation(
            "j2",
            "rtt",
            "checkpoint",
            0.0,
            p,
            900.0,
            700.0,
            65.0,
            0.0,
            112.0,
            2.2,
            2e3,
            3e3,
            1e4,
            2e4,
            phase="done",
            lost_s=765.0,
            lost_gpu_s=7200.0,
        ),
        Relocation(
            "j3",
            "grow",
            "transfer",
            0.0,
            p,
            0.0,
            90.0,
            5.0,
            90.0,
            112.0,
            2.2,
            2e3,
            3e3,
            1e4,
            2e4,
            phase="done",
        ),
    ]
    block = swing_summary([s, Swing("j1", "grow", "restart", 0.0, 1.0, 1.0, 2.0, 0.0)], moves=moves)
    assert block.count == 1 and block.dip_p50 == pytest.approx(1 / 6)
    assert block.recovery_s_max == 6.0
    assert block.relocations.model_dump() == {  # the grow-fired one is not a swing's
        "count": 1,
        "switched": 1,
        "cancelled": 0,
        "by_checkpoint": 1,
        "by_transfer": 0,
        "transfer_s_p50": 700.0,
        "transfer_s_max": 700.0,
        "lost_s_p50": 765.0,
        "lost_s_max": 765.0,
        "lost_gpu_h": 2.0,
        "wan_gb": 112.0,
        "wan_cost_usd": 2.2,
    }
    summary.policies["planner"].swings = block
    write_report(tmp_path, summary, domains, jobs, links)
    page = (tmp_path / "report.html").read_text()
    assert "Adjustments on load swings and RTT rises" in page and "16.7%" in page
    assert "Relocations to other domains" in page and "765" in page
    assert (
        json.loads((tmp_path / "report.json").read_text())["policies"]["planner"]["swings"][
            "fallbacks_to_restart"
        ]
        == 0
    )


def test_a_plot_of_many_links_names_the_narrowest_on_a_log_scale():
    """36 links from 0.05 to 200 Gbit/s: a legend of each would be taller than the plot, and
    the narrow links, which bind jobs, would lie flat along zero."""
    from xdscheduler.report.writer import NAMED_LINKS, _bandwidth

    base = np.geomspace(0.05, 200, 36)
    links = pd.DataFrame(
        [
            {"time_s": t, "link": f"l{i}", "bandwidth_gbps": b * (1 + 0.1 * np.sin(t + i))}
            for i, b in enumerate(base)
            for t in range(0, 3600, 300)
        ]
    )
    ax = _bandwidth(links).axes[0]
    named = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(named) == sorted(f"l{i}" for i in range(NAMED_LINKS))  # the narrowest
    assert ax.get_yscale() == "log" and "27 others in grey" in ax.get_title()
    few = _bandwidth(links[links["link"].isin(["l30", "l31"])]).axes[0]
    assert few.get_yscale() == "linear" and len(few.get_legend().get_texts()) == 2
