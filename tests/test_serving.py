"""The Serve application over real HTTP: the policy endpoint, its validation, and a controller
actor that decides through it."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import API_TOKEN, AUTH
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.ray_cluster import free_port
from xdscheduler.rl.agents import local_policy
from xdscheduler.runtime.study import run_here, run_study
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.serving.schemas import DecideRequest, job_in, state_of
from xdscheduler.serving.schemas import act_body as step_body
from xdscheduler.sim.inputs import StudyInputs, study_jobs

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
    conn.request(
        method,
        path,
        json.dumps(body) if body is not None else None,
        {"Content-Type": "application/json", **AUTH},
    )
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def request_for(scn, job_index: int = 1) -> dict:
    view = ClusterView.from_scenario(scn)
    domains, links = state_of(view)
    req = DecideRequest(job=job_in(JobSpec.of(scn.jobs[job_index])), domains=domains, links=links)
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


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["domains"].pop(), "domains must be exactly"),
        (lambda r: r["job"].pop("global_batch"), "global_batch"),
        (lambda r: r["job"].update(model="gpt-9", architecture=None), "gpt-9"),
        (lambda r: r["links"][0].update(b="atlantis"), "atlantis"),
        (lambda r: r["domains"][0]["indicators"].update(mood=1.0), "unknown indicators"),
    ],
)
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
    obs, options = (
        (upper_observation(ch, 1), upper_options(ch))
        if agent == "upper"
        else (lower_observation(ch, 0, 1), lower_options(ch, 0))
    )
    local = Agents(scn.weights).step(agent, obs, options)
    return step_body(agent, obs, options, scn.jobs[0].name), local.choice


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


def test_agent_steps_sent_at_once_each_get_the_pick_made_alone(served):
    """20 steps in flight together: the replica batches their forward passes (MAX_BATCH);
    each answer is the one the agents in process give that step alone."""
    from concurrent.futures import ThreadPoolExecutor

    from xdscheduler.rl.agents import Agents, upper_options
    from xdscheduler.rl.candidates import choices, upper_observation
    from xdscheduler.rl.pareto import fixed_states

    scn, _ = served
    agents = Agents(scn.weights)
    steps = [
        (upper_observation(ch, 1), upper_options(ch))
        for job, view, now in fixed_states(30)
        if (ch := choices(job, view, scn.weights, now)) is not None
    ]
    before = batched_steps()
    with ThreadPoolExecutor(20) as pool:
        answers = list(
            pool.map(lambda s: call("POST", "/policy/act", step_body("upper", *s)), steps[:20])
        )
    assert len(answers) == 20
    for (obs, options), (status, out) in zip(steps, answers, strict=False):
        assert status == 200, out
        assert out["choice"] == agents.step("upper", obs, options).choice
    batches, answered = (after - was for after, was in zip(batched_steps(), before, strict=True))
    assert answered == 20 and batches < 20, f"{answered} steps in {batches} batches: none shared"


def batched_steps() -> tuple[float, float]:
    """The batches of agent steps the replica answered so far, and the steps in them (its
    `xds_policy_batch_steps` histogram)."""
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    conn.request("GET", "/metrics", headers=AUTH)
    text = conn.getresponse().read().decode()
    found = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "xds_policy_batch_steps"
        for s in family.samples
    }
    return found.get("xds_policy_batch_steps_count", 0.0), found.get(
        "xds_policy_batch_steps_sum", 0.0
    )


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda b: b["observation"].pop("edges"), '"edges"'),
        (lambda b: b["observation"]["choices"].pop(), "has shape"),
        (lambda b: b.update(agent="middle"), "upper"),
        (lambda b: b["observation"]["context"].__setitem__(0, "x"), "valid number"),
        (lambda b: b["observation"]["context"].__setitem__(0, float("nan")), "finite"),
        (lambda b: b["observation"]["edge_index"][0].__setitem__(0, 99), "outside 0..8"),
        (
            lambda b: b["observation"]["edge_index"][0].__setitem__(
                0, len(b["observation"]["nodes"])
            ),
            "not node indices",
        ),
        (lambda b: b["observation"]["edge_index"][0].__setitem__(0, 0.5), "not node indices"),
        (lambda b: b["observation"]["edge_index"][0].__setitem__(0, -1), "outside"),
        (
            lambda b: b["observation"].update(
                action_mask=[0.0] * len(b["observation"]["action_mask"])
            ),
            "opens no choice",
        ),
        (lambda b: b["choices"][0]["terms"].update(cost=float("inf")), "finite"),
    ],
)
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
    summary = run_study(
        scn, ["ppo"], hours, seed, tmp_path, policy_options={"serve_url": url}, show_progress=False
    )
    jobs = study_jobs(scn, hours, seed)
    # the study's own network and truth
    here = run_here(StudyInputs.of_cell(scn, jobs, seed, hours), local_policy(scn.weights))
    decisions = [
        json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()
    ]
    assert summary.policies["ppo"].jobs_total == len(jobs)
    served_places = [
        (d["job"], d["domains"], d["plan"]) for d in decisions if d["action"] == "place"
    ]
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
    status, out = call(
        "POST",
        "/forecast",
        {
            "history": history,
            "step_min": 1,
            "known_jobs": [{"name": "a", "gpus": 16, "finish_min": 30}],
        },
    )
    assert status == 200, out
    assert [h["horizon_min"] for h in out["horizons"]] == [10, 60]
    assert out["frees_min"]["a"] == 30 and out["backup_pool_gpus"] >= 0
    status, out = call("POST", "/forecast", {"history": []})
    assert status == 422


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["domains"][0].update(free_gpus=-1), "greater than or equal to 0"),
        (lambda r: r["domains"][0].update(free_gpus=2**70), "less than or equal to 1000000"),
        (lambda r: r["links"][0].update(bandwidth_gbps=float("inf")), "finite"),
        (lambda r: r["links"][0].update(bandwidth_gbps=float("nan")), "finite"),
        (lambda r: r["domains"][0]["indicators"].update(util=float("nan")), "finite"),
        (lambda r: r["job"].update(global_batch=True), "valid integer"),
        (lambda r: r.update(now_s=1e300), "less than or equal to"),
    ],
)
def test_impossible_cluster_states_get_422(served, change, reason):
    scn, _ = served
    body = request_for(scn)
    change(body)
    status, out = call("POST", "/policy/decide", body)
    assert status == 422, out
    assert reason in json.dumps(out)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r["history"].__setitem__(3, float("nan")), "finite"),
        (lambda r: r["history"].__setitem__(3, float("inf")), "finite"),
        (lambda r: r["history"].__setitem__(3, 1e308), "less than or equal to"),
        (lambda r: r.update(step_min=10**9), "less than or equal to 1440"),
        (lambda r: r.update(end_time="2300-01-01T00:00:00"), "must lie between 1971 and 2200"),
        (lambda r: r.update(end_time="1900-01-01T00:00:00"), "must lie between 1971 and 2200"),
        (lambda r: r["known_jobs"][0].update(finish_min=float("nan")), "finite"),
        (lambda r: r.update(seed=False), "valid integer"),
    ],
)
def test_impossible_forecast_requests_get_422(served, change, reason):
    body = {
        "history": [100.0] * 120,
        "step_min": 1,
        "end_time": "2026-01-05T12:00:00",
        "known_jobs": [{"name": "a", "gpus": 16, "finish_min": 30}],
    }
    change(body)
    status, out = call("POST", "/forecast", body)
    assert status == 422, out
    assert reason in json.dumps(out)


def test_every_route_but_healthz_needs_the_token(served):
    def status(path: str, headers: dict) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status

    for path in ("/", "/api/state", "/metrics", "/docs", "/openapi.json", "/policy/example"):
        assert status(path, {}) == 401, path
        assert status(path, {"Authorization": "Bearer not-the-token-at-all"}) == 401, path
        assert status(path, AUTH) == 200, path
    assert status("/healthz", {}) == 200
    # A browser: the token once in the address, then the cookie the answer set.
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    conn.request("GET", f"/?token={API_TOKEN}")
    resp = conn.getresponse()
    resp.read()
    cookie = resp.getheader("set-cookie").split(";")[0]
    assert resp.status == 200 and "HttpOnly" in resp.getheader("set-cookie")
    assert status("/api/state", {"Cookie": cookie}) == 200


def test_bodies_are_bounded(served):
    from xdscheduler.serving.gate import MAX_BODY_BYTES

    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    big = b'{"history": [' + b"1.0," * (MAX_BODY_BYTES // 4) + b"1.0]}"
    conn.request("POST", "/forecast", big, {"Content-Type": "application/json", **AUTH})
    resp = conn.getresponse()
    assert resp.status == 413 and b"at most" in resp.read()


def test_a_chunked_body_over_the_bound_gets_413(served):
    """10 MiB sent chunked (no Content-Length) got a 400: FastAPI took the gate's stop for a
    body it could not parse."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    chunks = (b"1" * (1 << 16) for _ in range(160))
    # answered before the rest was sent, the answer is still there to read
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        conn.request(
            "POST",
            "/forecast",
            chunks,
            {"Content-Type": "application/json", **AUTH},
            encode_chunked=True,
        )
    resp = conn.getresponse()
    assert resp.status == 413 and b"at most" in resp.read()


def test_the_example_body_is_accepted(served):
    status, body = call("GET", "/policy/example")
    assert status == 200
    status, out = call("POST", "/policy/act", body)
    assert status == 200, out
    assert out["choice"] in [r["index"] for r in out["ranking"]]


def test_schemathesis_finds_no_failure(served, tmp_path):
    """Generated requests (schema-valid and not) over the published schema: no 5xx, every
    answer in the documented status codes, content types and schemas, auth enforced. Left
    out: positive_data_acceptance, since a body's validity depends on the served scenario
    (its domain names, its graph's shapes), which a static schema cannot say; those bodies
    get a 422 with the reason, in the documented shape."""
    pytest.importorskip("schemathesis")
    examples = os.environ.get("XDS_SCHEMATHESIS_EXAMPLES", "15")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"http://127.0.0.1:{PORT}/openapi.json",
            "-H",
            f"Authorization: Bearer {API_TOKEN}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            examples,
            "--seed",
            "1",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.slow
def test_xds_serve_serves_until_stopped(tmp_path):
    """`xds serve` on a Ray of its own answers until Ctrl-C (a plain kill: the test below),
    then ends with everything it started."""
    port = free_port()
    proc = xds_serve(port)
    try:
        time.sleep(3)
        assert answers_within(proc, port, 60), "xds serve stopped serving on its own"
        proc.send_signal(signal.SIGINT)
        assert stopped(proc, 60) == 0, f"xds serve did not end cleanly on Ctrl-C: {proc.said()}"
        assert not healthy(port)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_xds_serve_with_replicas_answers_through_haproxy_and_leaves_nothing():
    """`--replicas 2`: Serve's HAProxy answers on the port; after a plain kill (SIGTERM, as a
    service manager stops it) no HAProxy of it runs and its folder of files is gone."""
    import psutil

    port = free_port()
    proc = xds_serve(port, "--replicas", "2")
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
        haproxies = {p: c for p in children if (c := haproxy_cmdline(p))}
        assert haproxies, "no HAProxy under xds serve --replicas 2"
        cmdline = next(iter(haproxies.values()))
        folder = os.path.dirname(cmdline[cmdline.index("-f") + 1])
        assert os.path.isdir(folder) and "xds-haproxy-" in folder
        time.sleep(5)  # past its own wait for the app: serving
        proc.send_signal(signal.SIGTERM)
        assert stopped(proc, 90) == 0, f"xds serve did not end cleanly on SIGTERM: {proc.said()}"
        assert not healthy(port)
        assert not [p for p in haproxies if haproxy_cmdline(p)], "HAProxy outlived xds serve"
        assert not os.path.exists(folder)
    finally:
        if proc.poll() is None:
            proc.kill()


def haproxy_cmdline(p) -> list[str]:
    """The command line of `p` where it is an HAProxy not exiting, else empty: one that a
    reload replaced may be a zombie, or gone, by the time it is read."""
    import psutil

    try:
        return p.cmdline() if p.name() == "haproxy" else []
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


class Served(subprocess.Popen):
    """`xds serve` on `port` (with `flags`) in a process of its own, what it writes kept in a
    file for a failure's message."""

    def __init__(self, port: int, *flags: str):
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (written while it serves)
        super().__init__(
            [sys.executable, "-m", "xdscheduler.cli", "serve", "--port", str(port), *flags],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def said(self) -> str:
        """The last of what it wrote."""
        self.log.seek(0)
        return "it said:\n" + self.log.read().decode(errors="replace")[-3000:]


def xds_serve(port: int, *flags: str, timeout_s: float = 180) -> Served:
    """`xds serve` on `port` (with `flags`), once it answers; what it said in the failure's
    message when it does not."""
    proc = Served(port, *flags)
    if not answers_within(proc, port, timeout_s):
        proc.kill()
        proc.wait()
        pytest.fail(
            f"xds serve {' '.join(flags)} did not answer within {timeout_s:.0f} s "
            f"(exit {proc.returncode}); {proc.said()}"
        )
    return proc


def stopped(proc: subprocess.Popen, patience_s: float) -> int | None:
    """Its exit status once stopped; None where it is still running after `patience_s`."""
    try:
        return proc.wait(timeout=patience_s)
    except subprocess.TimeoutExpired:
        return None


def answers_within(proc: subprocess.Popen, port: int, patience_s: float) -> bool:
    """Whether `proc` still runs and answers on `port` within `patience_s`: on a loaded machine
    one health check may take longer than its own timeout, which is no stop."""
    deadline = time.monotonic() + patience_s
    while proc.poll() is None:
        if healthy(port):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return False


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
