"""The Serve application over real HTTP: the policy endpoint, its validation, and a controller
actor that decides through it."""

from __future__ import annotations

import http.client
import json

import pytest

from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import local_policy
from xdscheduler.runtime.study import run_here, run_study
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.schemas import DecideRequest, job_in, state_of
from xdscheduler.sim.inputs import study_dynamics, study_jobs
from xdscheduler.sim.truth import Truth

PORT = 0  # the session's Serve port, set by `served`


@pytest.fixture(scope="module")
def served(serve_port):
    global PORT
    from ray import serve

    from xdscheduler.serving.app import APP_NAME, start

    PORT = serve_port
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
    req = DecideRequest(job=job_in(JobSpec.of(scn.jobs[job_index])), domains=domains,
                        links=links)
    return json.loads(req.model_dump_json())


def test_decide_returns_a_decision_alternatives_and_an_explanation(served):
    scn, _ = served
    status, out = call("POST", "/policy/decide", request_for(scn))
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
    status, out = call("POST", "/policy/decide", body)
    assert status == 422
    assert reason in json.dumps(out)


def act_body(scn, agent: str = "upper") -> tuple[dict, int]:
    """An agent step's request as the controller sends it, and the local agents' pick."""
    from xdscheduler.rl.agents import Agents, lower_options, upper_options
    from xdscheduler.rl.candidates import choices, lower_observation, upper_observation

    ch = choices(JobSpec.of(scn.jobs[0]), ClusterView.from_scenario(scn), scn.weights)
    obs, options = ((upper_observation(ch, 1), upper_options(ch)) if agent == "upper"
                    else (lower_observation(ch, 0, 1), lower_options(ch, 0)))
    local = Agents(scn.weights).step(agent, obs, options)
    body = {"agent": agent, "job": scn.jobs[0].name,
            "observation": {k: v.tolist() for k, v in obs.items()},
            "choices": [{"index": i, **o} for i, o in options.items()]}
    return body, local.choice


@pytest.mark.parametrize("agent", ["upper", "lower"])
def test_act_is_one_agent_step_matching_the_agents_in_process(served, agent):
    scn, _ = served
    body, local_choice = act_body(scn, agent)
    status, out = call("POST", "/policy/act", body)
    assert status == 200, out
    assert out["choice"] == local_choice == out["ranking"][0]["index"]
    assert abs(sum(out["probabilities"]) - 1) < 1e-5
    assert out["explanation"]["summary"].startswith(out["ranking"][0]["summary"])
    if len(out["ranking"]) > 1:
        assert set(out["explanation"]["contributions"]) == {"efficiency", "utilization", "cost"}


@pytest.mark.parametrize("change, reason", [
    (lambda b: b["observation"].pop("edges"), "observation keys must be"),
    (lambda b: b["observation"]["choices"].pop(), "has shape"),
    (lambda b: b.update(agent="middle"), "upper"),
    (lambda b: b["observation"]["context"].__setitem__(0, "x"), "not an array of numbers"),
])
def test_bad_agent_steps_get_422_with_the_reason(served, change, reason):
    scn, _ = served
    body, _ = act_body(scn)
    change(body)
    status, out = call("POST", "/policy/act", body)
    assert status == 422 and reason in json.dumps(out)


def test_nothing_fits_is_an_answer_not_an_error(served):
    scn, _ = served
    body = request_for(scn, job_index=0)
    for d in body["domains"]:
        d["free_gpus"] = 0
    status, out = call("POST", "/policy/decide", body)
    assert status == 200 and out["action"] == "none" and out["decision"] is None


def test_a_controller_deciding_over_http_matches_the_agents_in_process(served, tmp_path):
    scn, url = served
    hours, seed = 0.5, 4
    summary = run_study(scn, ["ppo"], hours, seed, tmp_path, policy_options={"serve_url": url},
                        show_progress=False)
    jobs = study_jobs(scn, hours, seed)
    here = run_here(scn, jobs, local_policy(scn.weights), study_dynamics(scn, seed, hours), hours,
                    truth=Truth.draw(scn, jobs, seed))  # the study's own truth
    decisions = [json.loads(line)
                 for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert summary.policies["ppo"].jobs_total == len(jobs)
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


def test_forecast_is_served_beside_the_policy(served):
    history = [100.0 + (i % 60) / 10 for i in range(24 * 60)]
    status, out = call("POST", "/forecast", {"history": history, "step_min": 1,
                                              "known_jobs": [{"name": "a", "gpus": 16,
                                                              "finish_min": 30}]})
    assert status == 200, out
    assert [h["horizon_min"] for h in out["horizons"]] == [10, 60]
    assert out["frees_min"]["a"] == 30 and out["backup_pool_gpus"] >= 0
    status, out = call("POST", "/forecast", {"history": []})
    assert status == 422
