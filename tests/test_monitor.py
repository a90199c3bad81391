"""The operator's view: the live state of a study, its Prometheus metrics, the dashboard in a
real headless browser, the alert rules and Grafana queries, and the report's graph and Gantt."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import API_TOKEN, AUTH, REPO, small_scenario
from xdscheduler.monitor.live import live_state
from xdscheduler.monitor.metrics import StudyMetrics
from xdscheduler.monitor.views import fragments, graph_svg, link_color
from xdscheduler.registry import make_policy
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs

ARTIFACTS = REPO / "test-artifacts"
REPLICA_SIDE = {"xds_endpoint_latency_seconds"}  # measured by the Serve replica, not the board


def readme_metrics() -> set[str]:
    """The metric families docs/operations.md lists (its table rows start with | `xds_...`)."""
    text = (REPO / "docs" / "operations.md").read_text()
    return set(re.findall(r"^\| `(xds_[a-z_]+)`", text, flags=re.M))


def families(text: str) -> dict:
    """Parsed exposition by the name as exposed (counters with `_total`)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name + ("_total" if fam.type == "counter" else "")] = fam
    return out


@pytest.fixture(scope="module")
def engine():
    scn = small_scenario()
    jobs = study_jobs(scn, 2, 3)
    inputs = StudyInputs.of_cell(scn, jobs, 3, 2)
    eng = Engine(inputs, make_policy("planner", scn.weights))
    eng.run(until_s=3600)
    return eng


def test_the_live_state_is_plain_json_of_what_runs_now(engine):
    state = json.loads(json.dumps(live_state(engine, "planner"), allow_nan=False))
    assert [d["name"] for d in state["domains"]] == ["east", "west", "north"]
    for d in state["domains"]:
        assert 0 <= d["allocated"] <= d["total"] and len(d["indicators"]) == 12
    running = [j for j in state["jobs"] if j["state"] == "running"]
    assert running, "an hour into a loaded study something runs"
    for j in running:
        assert j["measured_step_s"] > 0 and j["predicted_step_s"] > 0 and 0 <= j["progress"] < 1
        assert sum(j["domains"].values()) == j["gpus"]
    assert {(lk["a"], lk["b"]) for lk in state["links"]} == {
        ("east", "west"),
        ("east", "north"),
        ("west", "north"),
    }
    assert state["decisions_total"] == len(state["decisions"]) == len(engine.recorder.decisions)
    later = live_state(engine, "planner", decisions_from=len(engine.recorder.decisions) - 1)
    assert [d["index"] for d in later["decisions"]] == [len(engine.recorder.decisions) - 1]


def test_the_board_metrics_cover_the_readme_families_with_plausible_values(engine):
    listed = readme_metrics()
    assert len(listed) >= 25, "docs/operations.md lists the metric families"
    state = live_state(engine, "planner")
    metrics = StudyMetrics({"planner": state})
    metrics.observe("planner", state["decisions"])
    found = families(metrics.text().decode())
    assert listed - REPLICA_SIDE <= set(found), sorted(listed - REPLICA_SIDE - set(found))
    assert set(found) - {n for n in found if n.startswith("xds_")} == set()
    check_plausible(found, state)


def check_plausible(found: dict, state: dict) -> None:
    for name, fam in found.items():
        for s in fam.samples:
            assert math.isfinite(s.value) and s.value >= 0, (name, s)
            if name.endswith("_ratio"):
                assert s.value <= 1.0 + 1e-9, (name, s)
    capacity = {
        s.labels["domain"]: s.value for s in found["xds_domain_capacity_accelerators"].samples
    }
    assert capacity == {d["name"]: d["total"] for d in state["domains"]}
    for s in found["xds_domain_allocated_accelerators"].samples:
        assert s.value <= capacity[s.labels["domain"]]
    leased = {
        (s.labels["a"], s.labels["b"]): s.value
        for s in found["xds_link_leased_bandwidth_bytes_per_second"].samples
    }
    for s in found["xds_link_bandwidth_bytes_per_second"].samples:
        assert 0 < s.value <= 1.5 * leased[(s.labels["a"], s.labels["b"])]
    assert all(0 < s.value < 3600 for s in found["xds_job_measured_step_seconds"].samples)
    count = next(
        s.value for s in found["xds_decision_latency_seconds"].samples if s.name.endswith("_count")
    )
    assert count >= 1
    assert any(s.value > 0 for s in found["xds_job_steps_per_second"].samples)


def test_the_graph_draws_each_domain_and_link_coloured_by_bandwidth_over_lease():
    domains = [
        {
            "name": n,
            "accelerator": "H100-SXM",
            "total": t,
            "allocated": a,
            "up": up,
            "lat": None,
            "lon": None,
        }
        for n, t, a, up in (("a", 64, 32, True), ("b", 16, 0, True), ("c", 8, 0, False))
    ]
    links = [
        {"a": "a", "b": "b", "bandwidth_gbps": 9.5, "leased_gbps": 10, "rtt_ms": 5},
        {"a": "a", "b": "c", "bandwidth_gbps": 5.0, "leased_gbps": 10, "rtt_ms": 9},
    ]
    svg = graph_svg(domains, links)
    assert re.findall(r'data-domain="(\w)"', svg) == ["a", "b", "c"]
    assert re.findall(r'data-link="([\w-]+)"', svg) == ["a-b", "a-c"]
    strokes = re.findall(r'data-link="[\w-]+"[^>]*>\s*<line[^>]*stroke="(#\w+)"', svg)
    assert strokes == [link_color(0.95), link_color(0.5)] and link_color(0.5) != link_color(0.8)
    assert 'data-domain="c" data-up="0"' in svg
    assert "data-sent" not in svg and "the jobs sent" not in svg


def test_the_graph_draws_what_jobs_sent_over_a_link_as_wide_as_its_share():
    """A link with traffic gets a dashed line over it (its width grows with the share of the
    lease sent) and a label; a link without stays as it was."""
    domains = [
        {"name": n, "accelerator": "H100-SXM", "total": 8, "allocated": 0, "up": True}
        for n in "abc"
    ]
    links = [
        {"a": "a", "b": "b", "bandwidth_gbps": 10, "leased_gbps": 10, "rtt_ms": 5},
        {"a": "a", "b": "c", "bandwidth_gbps": 10, "leased_gbps": 10, "rtt_ms": 5},
    ]
    busy = [{**links[0], "sent_gbps": 7.5}, {**links[1], "sent_gbps": 2.5}]
    svg = graph_svg(domains, busy)
    assert re.findall(r'data-link="([\w-]+)"[^>]*data-sent="([\d.]+)"', svg) == [
        ("a-b", "7.500"),
        ("a-c", "2.500"),
    ]
    widths = [float(w) for w in re.findall(r'stroke="#6a1b9a"[^>]*stroke-width="([\d.]+)"', svg)]
    assert widths == pytest.approx([1.0 + 5.0 * 0.75, 1.0 + 5.0 * 0.25], abs=0.05)
    assert "sent 7.5" in svg
    assert "the jobs sent" in svg  # the legend says what the dashes are
    quiet = graph_svg(domains, [{**links[0], "sent_gbps": None}, links[1]])
    assert "data-sent" not in quiet


def test_the_dashboard_sections_show_running_jobs_and_the_queue(engine):
    state = live_state(engine, "planner")
    parts = fragments(state)
    running = {j["name"] for j in state["jobs"] if j["state"] == "running"}
    shown = set(re.findall(r'data-job="([^"]+)" data-state="running"', parts["jobs"]))
    assert shown == running
    assert "nobody waits" in parts["queue"] or 'data-job="' in parts["queue"]
    assert parts["decisions"].count("<li") == min(len(state["decisions"]), 50)


def test_the_report_shows_each_policy_graph_and_the_jobs_by_domain(tmp_path):
    from xdscheduler.runtime.study import run_study

    scn = small_scenario()
    run_study(scn, ["planner-single-domain", "planner"], 2, 3, tmp_path, local=True)
    page = (tmp_path / "report.html").read_text()
    assert 'alt="gantt.png"' in page and (tmp_path / "gantt.png").stat().st_size > 10_000
    graphs = re.findall(
        r'<figure class="graph" data-policy="([^"]+)">(.*?)</figure>', page, flags=re.S
    )
    assert [p for p, _ in graphs] == ["planner-single-domain", "planner"]
    for _, svg in graphs:
        assert re.findall(r'data-domain="(\w+)"', svg) == ["east", "west", "north"]


def test_segments_never_hold_more_than_a_domain_has():
    import numpy as np

    from xdscheduler.runtime.study import run_here
    from xdscheduler.sim.metrics import segment_table

    scn = small_scenario()
    jobs = study_jobs(scn, 6, 5)
    dyn = study_dynamics(scn, 5, 6)
    res = run_here(StudyInputs(scn, jobs, dyn, 6), make_policy("planner", scn.weights))
    seg = segment_table(res)
    assert set(seg["job"]) == {r.name for r in res.jobs if r.start_s is not None}
    assert (seg["end_s"] > seg["start_s"]).all()
    for d in scn.domains:
        rows = seg[seg["domain"] == d.name]
        for t in np.unique(rows["start_s"]):
            held = rows[(rows["start_s"] <= t) & (rows["end_s"] > t)]["gpus"].sum()
            # make-before-break holds the old and the new plan for a while
            assert held <= 2 * d.gpus
    ends = seg.groupby("job")["end_s"].max()
    for r in res.jobs:
        if r.end_s is not None:
            assert ends[r.name] == pytest.approx(r.end_s)


# ------------------------------------------------------------------ rules and dashboards


def exported_names(engine) -> set[str]:
    state = live_state(engine, "planner")
    metrics = StudyMetrics({"planner": state})
    metrics.observe("planner", state["decisions"])
    names = set()
    for fam in text_string_to_metric_families(metrics.text().decode()):
        names |= {s.name for s in fam.samples}
    return names | {"xds_endpoint_latency_seconds_bucket"}


def selectors(expr: str) -> set[str]:
    return set(re.findall(r"\b(xds_[a-z_]+)\b", expr))


def test_the_alert_rules_parse_and_use_exported_metrics(engine):
    promql = pytest.importorskip("promql_parser", reason="promql-parser is in the dev extras")
    path = REPO / "deploy" / "prometheus" / "alerts.yml"
    doc = yaml.safe_load(path.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {
        "XdsDomainDown",
        "XdsLinkBelowLease",
        "XdsJobSlowerThanPredicted",
        "XdsQueueWaitOverAnHour",
    }
    names = exported_names(engine)
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        promql.parse(r["expr"])  # raises on a syntax error
        assert re.fullmatch(r"\d+[smh]", r["for"])
        assert selectors(r["expr"]) <= names, r["expr"]
        assert r["labels"]["severity"] in {"warning", "critical"}
    if shutil.which("promtool"):  # the real checker where Prometheus is installed
        done = subprocess.run(
            ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_grafana_dashboard_queries_parse_and_use_exported_metrics(engine):
    promql = pytest.importorskip("promql_parser", reason="promql-parser is in the dev extras")
    dash = json.loads((REPO / "deploy" / "grafana" / "xdscheduler.json").read_text())
    names = exported_names(engine)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    for e in exprs:
        promql.parse(e)
        assert selectors(e) <= names, e


# ------------------------------------------------------------------ a live study over HTTP


def get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=30) as r:
        return r.read()


@pytest.fixture(scope="module")
def live(serve_port, tmp_path_factory):
    """A realtime study (240 simulated seconds a second, jobs arriving for 7.5 s, over within
    30 s) showing itself to the Serve app."""
    from xdscheduler.runtime.study import run_study
    from xdscheduler.serving.app import start

    scn = small_scenario()
    url = start(None, None, scn, port=serve_port)
    out = tmp_path_factory.mktemp("live")
    study = threading.Thread(
        target=run_study,
        args=(scn, ["planner"], 0.5, 3, out),
        kwargs={"realtime": True, "speed": 240, "show_progress": False},
        daemon=True,
    )
    study.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = json.loads(get(f"{url}/api/state"))
        runs = [j for s in state["policies"].values() for j in s["jobs"] if j["state"] == "running"]
        if runs:
            break
        time.sleep(0.5)
    else:
        pytest.fail("no job of the live study was running within 120 s")
    yield scn, url
    study.join(timeout=240)
    assert (out / "report.html").exists(), "the live study finished with its report"


def test_metrics_of_a_live_study_scraped_over_http(live):
    scn, url = live
    listed = readme_metrics()
    deadline = time.monotonic() + 60
    while True:  # the replica's own latencies appear once it has answered a request
        found = families(get(f"{url}/metrics").decode())
        if listed <= set(found) and all(found[n].samples for n in listed):
            break
        assert time.monotonic() < deadline, sorted(
            n for n in listed if n not in found or not found[n].samples
        )
        time.sleep(1)
    state = json.loads(get(f"{url}/api/state"))["policies"]["planner"]
    check_plausible({n: f for n, f in found.items() if n != "xds_endpoint_latency_seconds"}, state)
    again = families(get(f"{url}/metrics").decode())  # this scrape counts the last one
    routes = {s.labels["endpoint"] for s in again["xds_endpoint_latency_seconds"].samples}
    assert {"/metrics", "/api/state"} <= routes
    assert {s.labels["domain"] for s in found["xds_domain_up"].samples} == {
        d.name for d in scn.domains
    }


class Dom(HTMLParser):
    """The elements of a page with their attributes."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return found


def test_the_dashboard_in_headless_chromium_shows_running_jobs_and_domains(live):
    scn, url = live
    browser = chromium()
    # --virtual-time-budget lets the page's timers run (several polls) before the DOM is dumped
    flags = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--virtual-time-budget=6000",
    ]
    # The token once in the address, as a user opens the dashboard; the page's polls carry it
    # on as the cookie the first answer set.
    done = subprocess.run(
        [*flags, "--dump-dom", f"{url}/?token={API_TOKEN}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom()
    dom.feed(done.stdout)
    body = next(a for t, a in dom.elements if t == "body")
    assert int(body["data-updates"]) >= 2, "the page updated itself live"
    assert body["data-policy"] == "planner"
    shown_domains = {a["data-domain"] for t, a in dom.elements if t == "g" and "data-domain" in a}
    assert shown_domains == {d.name for d in scn.domains}
    shown_running = {
        a["data-job"] for t, a in dom.elements if t == "tr" and a.get("data-state") == "running"
    }
    state = json.loads(get(f"{url}/api/state"))["policies"]["planner"]
    running_now = {j["name"] for j in state["jobs"] if j["state"] == "running"}
    ended = {j["name"] for j in state["jobs"] if j["state"] == "completed"}
    assert shown_running, "the jobs table shows running jobs"
    assert shown_running <= running_now | ended  # what ran when the page was dumped
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    done = subprocess.run(
        [*flags, "--window-size=1500,1100", f"--screenshot={shot}", f"{url}/?token={API_TOKEN}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ARTIFACTS,
    )
    assert done.returncode == 0 and shot.stat().st_size > 20_000, done.stderr[-2000:]


def test_the_readme_lists_what_is_exported(engine):
    listed = readme_metrics()
    names = {
        re.sub(r"_(bucket|count|sum)$", "", n)
        for n in exported_names(engine)
        if not n.endswith("_created")
    }  # _created: the counters' start time, not a family
    assert listed == names, (sorted(listed - names), sorted(names - listed))


def test_alert_rules_and_dashboard_are_documented():
    text = (REPO / "docs" / "operations.md").read_text()
    for path in ("deploy/prometheus/alerts.yml", "deploy/grafana/xdscheduler.json"):
        assert path in text and Path(REPO / path).exists()


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["--speed", "60"], "--speed paces a live study: add --realtime"),
        (["--realtime", "--speed", "nan"], "argument --speed: nan is outside (0, 86,400]"),
        (["--realtime", "--speed", "0"], "argument --speed: 0 is outside (0, 86,400]"),
        (["--dashboard", "8100"], "--dashboard shows a live study on Ray"),
        (["--realtime", "--local", "--dashboard", "8100"], "--dashboard shows a live study on Ray"),
        (
            ["--realtime", "--dashboard", "70000"],
            "argument --dashboard: 70000 is outside [1, 65,535]",
        ),
    ],
)
def test_live_options_are_checked_before_anything_runs(capsys, tmp_path, argv, reason):
    from xdscheduler.cli import main

    code = main(["run", "--hours", "1", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and reason in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
