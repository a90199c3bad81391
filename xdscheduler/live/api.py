"""The live cluster over HTTP: `xds up` deploys, on the cluster's head, the policy app (`POST
/policy/act`, `POST /policy/decide`, `POST /forecast`; `xdscheduler.serving.app`) at `/` and the
jobs API at `/jobs`, a Serve application of its own (the policy app sits below the live
control plane and cannot know its jobs):

    POST /jobs              a job spec (what `xds submit` reads from YAML): 201, or 409 when
                            a job of that name exists
    GET /jobs               every job: where, how far, predicted and measured step time
    GET /jobs/{name}        one job (404: none of that name)
    GET /jobs/{name}/events its decisions, steps and faults, from the journal (`xds logs`)
    DELETE /jobs/{name}     cancel it: queued or starting, at once; running, at its next step
                            boundary, or by force within 2 s
    GET /live/domains       each domain as its agent reported it, its status (up, suspect,
                            down) and its jobs now (`xds domains`; an application of its own,
                            `xds-live`, beside the jobs)
    GET /live/events        the cluster's own journal: domains suspected, cleared, found down

All ask for the cluster's API token (`Authorization: Bearer <token>`, in the state file).
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations as classes.

from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from ray import serve

from xdscheduler.errors import UserError
from xdscheduler.live.jobs import JobRow, LiveJob
from xdscheduler.live.state import HEAD_LABEL, ClusterState
from xdscheduler.serving.gate import Gate, allow_every_method, configure, secured_openapi

JOBS_APP, POLICY_APP, LIVE_APP = "xds-jobs", "xds", "xds-live"
ON_HEAD = {"label_selector": {HEAD_LABEL: "head"}}  # not on a domain: it would take a core


class Refusal(BaseModel):
    """What a refusal carries (FastAPI's HTTPException as JSON)."""

    detail: str


def refused(why: str) -> dict[str, Any]:
    """A refusal as the published schema documents it."""
    return {"model": Refusal, "description": why}


app = FastAPI(
    title="xdscheduler live jobs",
    description="Submit, follow and cancel training jobs on the live cluster.",
    responses={503: refused("the controller did not answer in time")},
)
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: refused("no job of that name")}
live_app = FastAPI(
    title="xdscheduler live domains",
    description="The live cluster's domains as its controller sees them.",
    responses={503: refused("the controller did not answer in time")},
)


class PrefixRoot:
    """ASGI middleware: `/jobs` itself is the jobs' root (`/`), not a redirect to `/jobs/`
    (Serve serves the app under that prefix; a client need not follow a 307 on a POST)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == scope.get("root_path") != "":
            scope = {**scope, "path": scope["path"] + "/"}
        return await self.app(scope, receive, send)


for _app in (app, live_app):
    _app.add_middleware(Gate)
    _app.add_middleware(PrefixRoot)
    allow_every_method(_app)
# FastAPI's way to extend the schema: set the app's `openapi` (mypy sees a method assigned)
app.openapi = lambda: secured_openapi(app)  # type: ignore[method-assign]
live_app.openapi = lambda: secured_openapi(live_app)  # type: ignore[method-assign]


class ProbedLink(BaseModel):
    """A link in one direction as the last `xds links probe` measured it."""

    link: str
    src: str
    dst: str
    configured_gbps: float
    measured_gbps: float


class LiveDomains(BaseModel):
    """Each domain: its status (up, suspect: silent but not confirmed dead, down), its jobs
    now, and its agent's last report (nodes, free accelerators, links, forecast, the 12
    indicators)."""

    domains: list[dict[str, Any]]
    probed: list[ProbedLink]


def _ask(state: ClusterState, method: str, *args):
    """The controller's answer (it is started on first use, as the CLI does); 503 when it does
    not answer in time."""
    from xdscheduler.live import controller

    try:
        return controller.ask(getattr(controller.controller(state), method), *args, timeout_s=30)
    except UserError as err:
        if "did not answer" in str(err):
            raise HTTPException(503, str(err)) from None
        raise


@serve.deployment(ray_actor_options={"num_cpus": 0, **ON_HEAD})
@serve.ingress(app)
class JobsService:
    def __init__(self, state: str, token: str, book=None):
        """The cluster's jobs; those of `book` (a `jobbook.JobBook` in this process, e.g. a
        test's) instead of its controller's where given."""
        configure(token)
        self.state = ClusterState.model_validate_json(state)
        self.book = book

    def _ask(self, method: str, *args):
        if self.book is not None:
            return getattr(self.book, method)(*args)
        return _ask(self.state, method, *args)

    @app.post("/", status_code=201, responses={409: refused("a job of that name exists")})
    def submit(self, job: LiveJob) -> JobRow:
        try:
            return self._ask("submit", job.model_dump())
        except UserError as err:  # the controller refuses a name it has, a tenant it has not
            if "exists already" in str(err):
                raise HTTPException(409, str(err)) from None
            where = "tenant" if "tenant" in str(err) else "workers"
            raise HTTPException(
                422, [{"type": "value_error", "loc": ["body", where], "msg": str(err)}]
            ) from None

    @app.get("/")
    def jobs(self) -> dict[str, list[JobRow]]:
        return {"jobs": self._ask("list_jobs")}

    @app.get("/{name}", responses=NOT_FOUND)
    def job(self, name: str) -> JobRow:
        return self._found(name, self._ask("job", name))

    @app.get("/{name}/events", responses=NOT_FOUND)
    def events(self, name: str) -> dict:
        return {"job": name, "events": self._found(name, self._ask("events", name) or None)}

    @app.delete("/{name}", responses=NOT_FOUND)
    def cancel(self, name: str) -> JobRow:
        return self._found(name, self._ask("cancel_job", name))

    @staticmethod
    def _found(name: str, answer):
        if answer is None:
            raise HTTPException(404, f"no job named {name!r}; GET /jobs lists them")
        return answer


@serve.deployment(ray_actor_options={"num_cpus": 0, **ON_HEAD})
@serve.ingress(live_app)
class LiveService:
    def __init__(self, state: str, token: str):
        configure(token)
        self.state = ClusterState.model_validate_json(state)

    @live_app.get("/domains")
    def domains(self) -> LiveDomains:
        return _ask(self.state, "domains")

    @live_app.get("/events")
    def events(self) -> dict[str, list[dict[str, Any]]]:
        """The cluster's own journal: domains suspected, cleared, found down and back, links
        that swung, probes and profiles."""
        return {"events": _ask(self.state, "events", "")}


def deploy(state: ClusterState, host: str, port: int) -> ClusterState:
    """Start Serve's proxy on the head at HOST:PORT (where none runs yet) and deploy both apps
    there; the state with their URL and token. Call as a driver of the cluster."""
    from xdscheduler.scenario import load_scenario
    from xdscheduler.serving.app import application, start_proxy, wait_answering
    from xdscheduler.serving.gate import api_token

    token = state.api_token or api_token()
    start_proxy(proxy_location="HeadOnly", http_options={"host": host, "port": port})
    policy = application(load_scenario(state.scenario), token, actor_options=ON_HEAD)
    serve.run(policy, name=POLICY_APP, route_prefix="/", blocking=False)
    url = f"http://{host}:{port}"
    state = state.model_copy(update={"api": url, "api_token": token})
    serve.run(
        JobsService.bind(state.model_dump_json(), token),  # type: ignore[attr-defined]
        name=JOBS_APP,
        route_prefix="/jobs",
        blocking=False,
    )
    serve.run(
        LiveService.bind(state.model_dump_json(), token),  # type: ignore[attr-defined]
        name=LIVE_APP,
        route_prefix="/live",
        blocking=False,
    )
    wait_answering(url, ["/healthz", "/jobs", "/live/domains"], token, timeout_s=120)
    return state


def undeploy() -> list[str]:
    """Delete the apps from a cluster `xds up` only attached to (Serve itself runs on)."""
    for name in (POLICY_APP, JOBS_APP, LIVE_APP):
        serve.delete(name)
    return ["deleted the HTTP apps (policy, jobs, live)"]
