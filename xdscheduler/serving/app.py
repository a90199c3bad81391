"""The Serve application behind FastAPI: `POST /policy/act` (one agent's step),
`POST /policy/decide` (a whole decision), `POST /forecast`, `GET /healthz`, and the operator's
view of live studies: `GET /` (the dashboard), `GET /api/view` and `GET /api/state` (what it
shows), `GET /metrics` (Prometheus).

One ingress deployment holds the trained agents for one scenario and the demand forecasters
(their answers take milliseconds; a hop to a second deployment would cost more than it saves on
2 cores). It is the only deployment that serves `/forecast`.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations as classes.
import time
import urllib.request
from pathlib import Path

import ray
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from ray import serve
from ray.exceptions import RayActorError

from xdscheduler.errors import UserError
from xdscheduler.forecast.hybrid import Forecaster
from xdscheduler.forecast.service import (
    ForecastRequest,
    ForecastResponse,
    OnlineModels,
    forecast,
)
from xdscheduler.monitor import views
from xdscheduler.monitor.board import board as find_board
from xdscheduler.monitor.metrics import endpoint_metrics
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Scenario, parse_scenario
from xdscheduler.serving.schemas import (
    ActRequest,
    ActResponse,
    DecideRequest,
    DecideResponse,
    RankedChoice,
    job_spec,
    observation_arrays,
    placement_json,
    view_of,
)

APP_NAME = "xds"
app = FastAPI(title="xdscheduler", description="Placement policy and demand forecast.")


@app.middleware("http")
async def time_requests(request: Request, call_next):
    start = time.perf_counter()
    response = await call_next(request)
    route = request.scope.get("route")
    endpoint_metrics().observe(getattr(route, "path", "unmatched"),
                               time.perf_counter() - start)
    return response


@serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=16)
@serve.ingress(app)
class XdsService:
    def __init__(self, scenario: dict, policy_path: str | None = None,
                 forecaster: Forecaster | None = None):
        from xdscheduler.rl.agents import Agents

        scn = parse_scenario(scenario)
        self.scenario = scn.name
        self.base = ClusterView.from_scenario(scn)
        self.agents = Agents(scn.weights, policy_path)
        # A forecaster fitted by the caller answers every series; without one, the model the
        # controller would fit in process is fitted here per demand series on the history it
        # sends (persistence until FIT_DAYS of it arrive; a refit once a day).
        self.forecaster = forecaster
        self.forecasts = OnlineModels()
        self.board = None  # the live studies' board, once found (`_board`)

    @app.post("/policy/act")
    def act(self, request: ActRequest) -> ActResponse:
        from xdscheduler.rl.candidates import WAIT

        start = time.perf_counter()
        space = self.agents.modules[request.agent].observation_space
        try:
            obs = observation_arrays(request.observation, space)
        except UserError as err:
            raise HTTPException(status_code=422, detail=str(err)) from None
        options = {c.index: c.model_dump() for c in request.choices}
        step = self.agents.step(request.agent, obs, options)
        wait = request.agent == "upper" and step.choice == WAIT
        ranking = [RankedChoice(index=i, probability=step.probabilities[i],
                                summary=options.get(i, {}).get("summary"))
                   for i in step.ranking]
        return ActResponse(agent=request.agent, job=request.job, choice=step.choice,
                           action="wait" if wait else "choose", ranking=ranking,
                           probabilities=step.probabilities, explanation=step.explanation,
                           inference_ms=(time.perf_counter() - start) * 1000)

    @app.post("/policy/decide")
    def decide(self, request: DecideRequest) -> DecideResponse:
        start = time.perf_counter()
        try:
            view = view_of(self.base, request.domains, request.links)
            spec = job_spec(request.job)
        except (UserError, ValidationError, ValueError) as err:
            raise HTTPException(status_code=422, detail=str(err)) from None
        verdict = self.agents.decide(spec, view, request.queue_len, request.now_s)
        ms = (time.perf_counter() - start) * 1000
        if verdict is None:
            return DecideResponse(job=spec.name, action="none", decision=None, alternatives=[],
                                  explanation={"summary": f"{spec.name}: nothing fits on the "
                                                          f"free accelerators now"},
                                  decision_ms=ms)
        p = verdict.placement
        return DecideResponse(job=spec.name, action="wait" if p is None else "place",
                              decision=None if p is None else placement_json(p, view),
                              alternatives=verdict.alternatives,
                              explanation=verdict.explanation, decision_ms=ms)

    @app.post("/forecast")
    def forecast(self, request: ForecastRequest) -> ForecastResponse:
        fitted = self.forecaster or self.forecasts.fitted(request)
        return forecast(request, fitted)

    @app.get("/", response_class=HTMLResponse)
    def dashboard(self, policy: str | None = None) -> HTMLResponse:
        return HTMLResponse(views.page(policy))

    @app.get("/api/state")
    def state(self, policy: str | None = None) -> dict:
        """The latest state of the live studies (one policy's with `policy`)."""
        return self._board("snapshot", policy) or {"updates": 0, "policies": {}}

    @app.get("/api/view")
    def view(self, policy: str | None = None) -> dict:
        """The dashboard's sections for one policy (the given one, else the latest to
        report), rendered."""
        shown = (self._board("snapshot", policy) or {}).get("policies") or {}
        if not shown:
            return {"policy": policy, "policies": [], "sections": None}
        name = policy if policy in shown else next(reversed(shown))
        return {"policy": name, "policies": list(shown),
                "sections": views.fragments(shown[name])}

    @app.get("/metrics")
    def metrics(self) -> Response:
        studies = self._board("metrics_text") or b""
        return Response(studies + endpoint_metrics().text(), media_type=CONTENT_TYPE_LATEST)

    def _board(self, method: str, *args):
        """Ask the board (None when no live study has made one, or it is gone). Its handle is
        looked up once and again only after it failed: the dashboard asks every second."""
        self.board = self.board or find_board()
        if self.board is None:
            return None
        try:
            return ray.get(getattr(self.board, method).remote(*args), timeout=10)
        except (RayActorError, ray.exceptions.GetTimeoutError):
            self.board = None
            return None

    @app.get("/healthz")
    def healthz(self) -> dict:
        return {"ok": True, "scenario": self.scenario, "policy": str(self.agents.path),
                "forecaster": "given" if self.forecaster else "fitted per series"}


def application(scn: Scenario, policy_path: str | Path | None = None,
                forecaster: Forecaster | None = None):
    """The app for one scenario: the trained agents at `policy_path` (default: the shipped
    ones) and, when given, one fitted forecaster answering every demand series."""
    return XdsService.bind(scn.model_dump(), str(policy_path) if policy_path else None,
                           forecaster)


def build(args: dict):
    """Application builder for Serve config files (serve_apps/xds.yaml): args `scenario`
    (a YAML path, default the default scenario) and `policy_path`."""
    from xdscheduler.scenario import default_scenario_path, load_scenario

    scn = load_scenario(args.get("scenario") or default_scenario_path())
    return application(scn, args.get("policy_path"))


def start(address: str | None, policy_path: str | Path | None, scn: Scenario,
          port: int = 8000) -> str:
    """Deploy on the Ray cluster (connecting first) and return the base URL once healthy."""
    from xdscheduler.ray_cluster import connect

    connect(address)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(application(scn, policy_path), name=APP_NAME, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return url
        except OSError:
            time.sleep(0.5)
    raise UserError(f"the Serve application did not become healthy at {url} within 60 s")
