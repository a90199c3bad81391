"""The Serve application over real HTTP: the policy endpoint, its validation, and a controller
actor that decides through it."""

from __future__ import annotations

import http.client
import json

import pytest

from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import local_policy
from xdscheduler.runtime.study import run_here, run_study, study_dynamics, study_jobs
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.schemas import ActRequest, job_in, state_of

PORT = 8000


@pytest.fixture(scope="module")
def served(ray_session):
    from ray import serve

    from xdscheduler.serving.app import APP_NAME, start

    scn = load_scenario(default_scenario_path())
    url = start(None, None, scn, port=PORT)
    yield scn, url
    serve.delete(APP_NAME)


def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    conn.request(method, path, json.dumps(body) if body is not None else None,
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def request_for(scn, job_index: int = 1) -> dict:
    view = ClusterView.from_scenario(scn)
    domains, links = state_of(view)
    req = ActRequest(job=job_in(JobSpec.of(scn.jobs[job_index])), domains=domains, links=links)
    return json.loads(req.model_dump_json())


def test_act_returns_a_decision_alternatives_and_an_explanation(served):
    scn, _ = served
    status, out = call("POST", "/policy/act", request_for(scn))
    assert status == 200, out
    assert out["action"] == "place"
    assert sum(out["decision"]["gpus"]) >= 16
    assert set(out["decision"]["domains"]) <= {d.name for d in scn.domains}
    assert out["alternatives"] and "contributions" in out["explanation"]
    assert out["explanation"]["summary"].startswith(scn.jobs[1].name)
    status, health = call("GET", "/healthz")
    assert status == 200 and health["ok"] and health["scenario"] == scn.name


@pytest.mark.parametrize("change, reason", [
    (lambda r: r["domains"].pop(), "domains must be exactly"),
    (lambda r: r["job"].pop("global_batch"), "global_batch"),
    (lambda r: r["job"].update(model="gpt-9", architecture=None), "gpt-9"),
    (lambda r: r["links"][0].update(b="atlantis"), "atlantis"),
    (lambda r: r["domains"][0]["indicators"].update(mood=1.0), "unknown indicators"),
])
def test_bad_requests_get_422_with_the_reason(served, change, reason):
    scn, _ = served
    body = request_for(scn)
    change(body)
    status, out = call("POST", "/policy/act", body)
    assert status == 422
    assert reason in json.dumps(out)


def test_nothing_fits_is_an_answer_not_an_error(served):
    scn, _ = served
    body = request_for(scn, job_index=0)
    for d in body["domains"]:
        d["free_gpus"] = 0
    status, out = call("POST", "/policy/act", body)
    assert status == 200 and out["action"] == "none" and out["decision"] is None


def test_a_controller_deciding_over_http_matches_the_agents_in_process(served, tmp_path):
    scn, url = served
    hours, seed = 0.5, 4
    summary = run_study(scn, ["ppo"], hours, seed, tmp_path, policy_options={"serve_url": url},
                        show_progress=False)
    jobs = study_jobs(scn, hours, seed)
    here = run_here(scn, jobs, local_policy(scn.weights), study_dynamics(scn, seed, hours), hours)
    decisions = [json.loads(line)
                 for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert summary["policies"]["ppo"]["jobs_total"] == len(jobs)
    served_places = [(d["job"], d["domains"], d["plan"]) for d in decisions
                     if d["action"] == "place"]
    local_places = [(d.job, d.domains, d.plan) for d in here.decisions if d.action == "place"]
    assert served_places and served_places == local_places


def test_serve_config_file_builds_the_application():
    import yaml
    from ray.serve import Application

    from xdscheduler.serving.app import build

    from .conftest import REPO

    cfg = yaml.safe_load((REPO / "serve_apps" / "xds.yaml").read_text())
    (app_cfg,) = cfg["applications"]
    module, attr = app_cfg["import_path"].split(":")
    assert module == "xdscheduler.serving.app" and attr == "build"
    assert isinstance(build(app_cfg["args"]), Application)
