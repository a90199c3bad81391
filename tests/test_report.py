import json

import numpy as np
import pandas as pd
import pytest

from xdscheduler.errors import UserError
from xdscheduler.report.writer import write_report


def frames():
    times = np.arange(0, 7200, 600.0)
    domains = pd.DataFrame([
        {"policy": p, "time_s": t, "domain": d, "gpus_total": 64, "gpus_busy": 32,
         "utilization": 0.5, "queue_len": 2, "background_load": 0.1}
        for p in ("planner", "single-domain") for t in times for d in ("a", "b", "c")])
    jobs = pd.DataFrame([
        {"policy": p, "job": f"j{i}", "arrival_s": 0.0, "start_s": 10.0 * i,
         "end_s": 3600.0 + i, "jct_s": 3600.0 + i, "queue_s": 10.0 * i, "gpus": 8,
         "domains": "a", "placement": "single", "cross_domain_gb": 0.0, "replans": 0,
         "status": "completed"} for p in ("planner", "single-domain") for i in range(5)])
    links = pd.DataFrame([{"time_s": t, "link": link, "bandwidth_gbps": 5.0, "rtt_ms": 20.0}
                          for t in times for link in ("a-b", "b-c")])
    summary = {"scenario": "s", "seed": 1, "hours": 2.0, "policies": {
        "planner": {"mean_jct_s": 3602.0, "avg_utilization": 0.5, "objective": float("nan")},
        "single-domain": {"mean_jct_s": 4000.0, "avg_utilization": 0.4, "objective": 0.2}}}
    return summary, domains, jobs, links


def test_every_file_is_written_and_reads_back(tmp_path):
    summary, domains, jobs, links = frames()
    paths = write_report(tmp_path, summary, domains, jobs, links)
    assert all(p.stat().st_size > 0 for p in paths.values())
    back = json.loads((tmp_path / "report.json").read_text())
    assert back["policies"]["planner"]["mean_jct_s"] == 3602.0
    assert back["policies"]["planner"]["objective"] is None  # NaN is not JSON
    tidy = pd.read_parquet(tmp_path / "metrics.parquet")
    assert (tidy["table"] == "jobs").sum() == 10 and (tidy["table"] == "links").sum() == 24
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "single-domain" in page


def test_empty_tables_still_give_a_report(tmp_path):
    summary, domains, jobs, links = frames()
    write_report(tmp_path, summary, domains.iloc[:0], jobs.iloc[:0], links.iloc[:0])
    assert (tmp_path / "jct.png").stat().st_size > 0


def test_a_missing_column_is_named(tmp_path):
    summary, domains, jobs, links = frames()
    with pytest.raises(UserError, match="jobs table lacks columns jct_s"):
        write_report(tmp_path, summary, domains, jobs.drop(columns="jct_s"), links)
