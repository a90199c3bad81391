"""The Serve application behind FastAPI: `POST /policy/act` (one agent's step),
`POST /policy/decide` (a whole decision), `POST /forecast`, `GET /healthz`, and the operator's
view of live studies: `GET /` (the dashboard), `GET /api/view` and `GET /api/state` (what it
shows), `GET /metrics` (Prometheus).

One ingress deployment holds the trained agents for one scenario and the demand forecasters
(their answers take milliseconds; a hop to a second deployment would cost more than it saves on
2 cores). It is the only deployment that serves `/forecast`.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations as classes.
import asyncio
import os
import time
import urllib.request
from pathlib import Path

import ray
from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
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
from xdscheduler.scenario import Job, Scenario, parse_scenario
from xdscheduler.serving.gate import Gate, bearer, checked_token, configure, secured_openapi
from xdscheduler.serving.ingress import direct_ingress, haproxy_ingress
from xdscheduler.serving.schemas import (
    ActRequest,
    ActResponse,
    DecideRequest,
    DecideResponse,
    RankedChoice,
    act_body,
    job_spec,
    observation_arrays,
    placement_json,
    view_of,
)

APP_NAME = "xds"
EXAMPLE_JOB = Job(name="example", model="llama2-7b", global_batch=256, tokens=1e9)
app = FastAPI(title="xdscheduler", description="Placement policy and demand forecast.")


def _observe(route: str, seconds: float) -> None:
    endpoint_metrics().observe(route, seconds)


def _openapi() -> dict:
    return secured_openapi(app)


app.add_middleware(Gate, observe=_observe)
app.openapi = _openapi  # type: ignore[method-assign]  # FastAPI's way to extend the schema


@app.exception_handler(RequestValidationError)
async def refuse_invalid(request, exc: RequestValidationError) -> JSONResponse:
    """422 with where, what and why of each error, without echoing the input: it may be
    megabytes, or not representable in JSON at all (NaN)."""
    return JSONResponse(
        status_code=422,
        content={"detail": [{k: e[k] for k in ("type", "loc", "msg")} for e in exc.errors()]},
    )


def unprocessable(err: Exception, where: str):
    """A request that passed the schema but not the checks behind it: 422 in the same shape
    as the schema's own (FastAPI's validation error), naming where."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ["body", where], "msg": str(err)}]
    )


REPLICA_OPTIONS = {"num_cpus": 0.5}
# With more than one replica allowed: Serve adds one while the requests in flight exceed
# `target_ongoing_requests` a replica (20 closed-loop clients: 2 on 2 cores), soon, since a
# replica starts in seconds, and gives one back after minutes of less.
AUTOSCALING = {
    "min_replicas": 1,
    "target_ongoing_requests": 8,
    "upscale_delay_s": 10,
    "downscale_delay_s": 300,
}
# Agent steps one forward pass answers at most. Nothing waits for a batch to fill: a batch is
# what arrived while the last forward ran (one client's steps go alone), and a forward of 20
# steps costs 1.9 ms against 0.9 ms for one (benchmarks/bench_endpoint_load.py).
MAX_BATCH = 32


# A replica takes every request it is sent: the router backs off 25 ms and more from a full
# one (20 clients on 16 slots doubled p99).
@serve.deployment(ray_actor_options=REPLICA_OPTIONS, max_ongoing_requests=100)
@serve.ingress(app)
class XdsService:
    def __init__(
        self,
        scenario: dict,
        token: str,
        policy_path: str | None = None,
        forecaster: Forecaster | None = None,
        batch: int = MAX_BATCH,
    ):
        from xdscheduler.rl.agents import Agents

        configure(token)
        self.batch = batch  # 1: each step's forward pass alone
        # serve.batch adds the setter: Ray types the method as it is written
        self._forward.set_max_batch_size(max(batch, 1))  # type: ignore[attr-defined]
        self.steps = 0  # agent steps in this replica now
        scn = parse_scenario(scenario)
        self.scenario, self.jobs = scn.name, scn.jobs
        self.base = ClusterView.from_scenario(scn)
        self.agents = Agents(scn.weights, policy_path)
        # A forecaster fitted by the caller answers every series; without one, the model the
        # controller would fit in process is fitted here per demand series on the history it
        # sends (persistence until FIT_DAYS of it arrive; a refit once a day).
        self.forecaster = forecaster
        self.forecasts = OnlineModels()
        self.board = None  # the live studies' board, once found (`_board`)

    @app.post("/policy/act")  # async: milliseconds of work, no thread hop
    async def act(self, request: ActRequest) -> ActResponse:
        from xdscheduler.rl.candidates import WAIT

        start = time.perf_counter()
        space = self.agents.modules[request.agent].observation_space
        try:
            obs = observation_arrays(request.observation.model_dump(), space)
        except UserError as err:
            raise unprocessable(err, "observation") from None
        options = {c.index: c.model_dump() for c in request.choices}
        self.steps += 1
        try:
            # Requests run one after another on the replica's loop unless one yields: yielding
            # lets the steps that arrived meanwhile in, to share one forward pass (and Serve's
            # autoscaler counts them ongoing). A step alone skips the batch queue, whose hop
            # and metrics cost ~0.3 ms.
            await asyncio.sleep(0)
            if self.batch <= 1 or self.steps == 1:
                logits = self.agents.logits(request.agent, obs)
                endpoint_metrics().batch_steps.observe(1)
            else:
                logits = await self._forward((request.agent, obs))
        finally:
            self.steps -= 1
        step = self.agents.step(request.agent, obs, options, logits)
        wait = request.agent == "upper" and step.choice == WAIT
        ranking = [
            RankedChoice(
                index=i,
                probability=step.probabilities[i],
                summary=options.get(i, {}).get("summary"),
            )
            for i in step.ranking
        ]
        return ActResponse(
            agent=request.agent,
            job=request.job,
            choice=step.choice,
            action="wait" if wait else "choose",
            ranking=ranking,
            probabilities=step.probabilities,
            explanation=step.explanation,
            inference_ms=(time.perf_counter() - start) * 1000,
        )

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=0.0)
    async def _forward(self, asks: list[tuple[str, dict]]) -> list:
        """The logits of the agent steps in flight, in as few forward passes as they allow."""
        endpoint_metrics().batch_steps.observe(len(asks))
        return self.agents.batch_logits(asks)

    @app.post("/policy/decide")
    def decide(self, request: DecideRequest) -> DecideResponse:
        start = time.perf_counter()
        try:
            view = view_of(self.base, request.domains, request.links)
            spec = job_spec(request.job)
        except (UserError, ValidationError, ValueError) as err:
            raise unprocessable(
                err, "job" if isinstance(err, ValidationError) else "domains"
            ) from None
        verdict = self.agents.decide(spec, view, request.queue_len, request.now_s)
        ms = (time.perf_counter() - start) * 1000
        if verdict is None:
            return DecideResponse(
                job=spec.name,
                action="none",
                decision=None,
                alternatives=[],
                explanation={"summary": f"{spec.name}: nothing fits on the free accelerators now"},
                decision_ms=ms,
            )
        p = verdict.placement
        return DecideResponse(
            job=spec.name,
            action="wait" if p is None else "place",
            decision=None if p is None else placement_json(p, view),
            alternatives=verdict.alternatives,
            explanation=verdict.explanation,
            decision_ms=ms,
        )

    @app.get("/policy/example")
    def example(self) -> ActRequest:
        """A valid `POST /policy/act` body for the served scenario (its first job on the
        idle cluster), to copy and change."""
        from xdscheduler.planner.search import JobSpec
        from xdscheduler.rl.agents import upper_options
        from xdscheduler.rl.candidates import choices, upper_observation

        job = JobSpec.of(self.jobs[0] if self.jobs else EXAMPLE_JOB)
        ch = choices(job, self.base, self.agents.weights, 0.0)
        if ch is None:
            raise HTTPException(404, f"{job.name} fits nowhere on the idle cluster")
        return ActRequest.model_validate(
            act_body("upper", upper_observation(ch, 1), upper_options(ch), job.name)
        )

    @app.post("/forecast")  # in a thread: a series' daily refit takes seconds
    def forecast(self, request: ForecastRequest) -> ForecastResponse:
        try:
            return forecast(request, self.forecaster or self.forecasts.fitted(request))
        except UserError as err:
            raise unprocessable(err, "history") from None

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
        return {"policy": name, "policies": list(shown), "sections": views.fragments(shown[name])}

    @app.get("/metrics", response_class=PlainTextResponse)
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
        return {
            "ok": True,
            "scenario": self.scenario,
            "policy": str(self.agents.path),
            "forecaster": "given" if self.forecaster else "fitted per series",
        }


def application(
    scn: Scenario,
    token: str,
    policy_path: str | Path | None = None,
    forecaster: Forecaster | None = None,
    actor_options: dict | None = None,
    batch: int = MAX_BATCH,
    replicas: int = 1,
):
    """The app for one scenario, asking every request but `/healthz` for `token`: the trained
    agents at `policy_path` (default: the shipped ones) and, when given, one fitted
    forecaster answering every demand series; its replica's Ray options beside its CPUs
    (`actor_options`, e.g. a label selector); agent steps per forward pass at most (`batch`,
    1: each alone); replicas at most, autoscaled from one by the requests in flight."""
    scaling = (
        {"num_replicas": 1}
        if replicas <= 1
        else {"autoscaling_config": {**AUTOSCALING, "max_replicas": replicas}}
    )
    deployment = XdsService.options(  # type: ignore[attr-defined]  # a Serve deployment class
        **scaling, ray_actor_options={**REPLICA_OPTIONS, **(actor_options or {})}
    )
    return deployment.bind(
        scn.model_dump(), token, str(policy_path) if policy_path else None, forecaster, batch
    )


def build(args: dict):
    """Application builder for Serve config files (serve_apps/xds.yaml): args `scenario`
    (a YAML path, default the default scenario), `policy_path` and `batch`; the API token
    from XDS_API_TOKEN (the config's runtime_env env_vars, or the environment of `serve
    run`). Replicas and autoscaling are the config's own `deployments` fields."""
    from xdscheduler.scenario import default_scenario_path, load_scenario

    token = checked_token(None)  # from `serve run`'s environment or the config's runtime_env
    scn = load_scenario(args.get("scenario") or default_scenario_path())
    return application(scn, token, args.get("policy_path"), batch=args.get("batch", MAX_BATCH))


def start(
    address: str | None,
    policy_path: str | Path | None,
    scn: Scenario,
    port: int = 8000,
    token: str | None = None,
    batch: int = MAX_BATCH,
    replicas: int = 1,
) -> str:
    """Deploy on the Ray cluster (connecting first) and return the base URL once healthy;
    requests need `token` (default: XDS_API_TOKEN, which must then be set); up to `replicas`
    replicas. On a Ray started here one replica serves HTTP itself (`direct_ingress`), and
    several are reached through Serve's HAProxy (`haproxy_ingress`)."""
    from xdscheduler.ray_cluster import connect, free_port, starts_local

    token = checked_token(token)
    local = starts_local(address)
    direct = local and replicas <= 1
    if local:
        os.environ.update(direct_ingress(port) if direct else haproxy_ingress())
    connect(address)
    # Serve still starts its proxy: aside (on a free port) where the replica serves `port`
    start_proxy(http_options={"host": "127.0.0.1", "port": free_port() if direct else port})
    serve.run(
        application(scn, token, policy_path, batch=batch, replicas=replicas),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
    url = f"http://127.0.0.1:{port}"
    wait_answering(url, ["/healthz"], token)
    return url


def start_proxy(**options) -> None:
    """`serve.start(**options)`, a proxy its controller gave up on said in one line."""
    try:
        serve.start(**options)
    except RayActorError:
        raise UserError(
            "Serve's HTTP proxy did not become ready (a busy machine?): try again, or give it "
            "longer with RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S (seconds) set where Ray starts"
        ) from None


def wait_answering(url: str, paths: list[str], token: str | None, timeout_s: float = 60) -> None:
    """Wait until every path of the app at `url` answers 200 (asked with `token`);
    UserError naming the first that did not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for path in paths:
        request = urllib.request.Request(url + path, headers=bearer(token))
        while True:
            try:
                with urllib.request.urlopen(request, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise UserError(
                    f"the Serve application did not answer at {url}{path} within {timeout_s:.0f} s"
                )
            time.sleep(0.5)
