"""The controller's side of the endpoints: `POST /policy/act` (it searches the candidates itself
and asks the endpoint for each agent's step) and `POST /forecast`, over one keep-alive HTTP
connection per controller. The served `ppo` policy registers here (`SERVED_POLICIES`)."""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import urlparse

from xdscheduler.errors import UserError
from xdscheduler.forecast.service import ForecastRequest, ForecastResponse
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import AgentDecision, PPOPolicy, Step, decide
from xdscheduler.scenario import Weights
from xdscheduler.serving.gate import TOKEN_ENV, bearer
from xdscheduler.serving.schemas import (
    DecideRequest,
    act_body,
    job_in,
    placement_from,
    state_of,
)


class PolicyClient:
    """POSTs to the app at `url` with its API token (default: XDS_API_TOKEN)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0):
        u = urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise UserError(f"--serve-url must look like http://HOST:PORT, got {url!r}")
        self.host, self.port, self.timeout_s = u.hostname, u.port or 80, timeout_s
        self.headers = {
            "Content-Type": "application/json",
            **bearer(token or os.environ.get(TOKEN_ENV)),
        }
        self.conn: http.client.HTTPConnection | None = None

    def __getstate__(self) -> dict:  # a copy (or a snapshot) opens a connection of its own
        return {**self.__dict__, "conn": None}

    def post(self, path: str, body: str) -> dict:
        for attempt in range(2):  # one reconnect: keep-alive connections get closed
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self.conn.request("POST", path, body, self.headers)
                resp = self.conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            if resp.status == 401:
                raise UserError(
                    f"POST {path} answered 401: give the server's API token ({TOKEN_ENV})"
                )
            if resp.status != 200:
                raise UserError(f"POST {path} answered {resp.status}: {data[:300]!r}")
            return json.loads(data)
        raise AssertionError("unreachable")

    def step(self, agent: str, obs: dict, options: dict[int, dict]) -> Step:
        """One agent's step by the endpoint (the same contract as `Agents.step`)."""
        out = self.post("/policy/act", json.dumps(act_body(agent, obs, options)))
        return Step(
            agent,
            out["choice"],
            out["probabilities"],
            [r["index"] for r in out["ranking"]],
            out["explanation"],
        )

    def decide(
        self, job: JobSpec, view: ClusterView, queue_len: int, now_s: float = 0.0
    ) -> AgentDecision | None:
        """A whole decision by `POST /policy/decide` (the search runs in the endpoint)."""
        domains, links = state_of(view)
        req = DecideRequest(
            job=job_in(job), domains=domains, links=links, queue_len=queue_len, now_s=now_s
        )
        out = self.post("/policy/decide", req.model_dump_json())
        if out["action"] == "none":
            return None
        placement = (
            None
            if out["decision"] is None
            else placement_from(
                job.name, out["decision"], view, out["explanation"]["summary"], out["decision_ms"]
            )
        )
        return AgentDecision(
            job.name, placement, out["alternatives"], out["explanation"], out["decision_ms"]
        )


class ForecastClient:
    """A demand forecaster behind `POST /forecast` (`sim.demand.DemandForecaster`)."""

    source = "http"

    def __init__(self, url: str, token: str | None = None):
        self.client = PolicyClient(url, token)

    def answer(self, request: ForecastRequest) -> ForecastResponse:
        return ForecastResponse.model_validate(
            self.client.post("/forecast", request.model_dump_json())
        )


def served_policy(weights: Weights, url: str, token: str | None = None) -> PPOPolicy:
    """The `ppo` policy with the agents' steps taken by the endpoint at `url`."""
    client = PolicyClient(url, token)
    return PPOPolicy(
        weights,
        lambda job, view, q, now, job_weights: decide(client, job_weights, job, view, q, now),
    )


# The registry's entries from this layer, used when a policy is to decide through `serve_url`.
SERVED_POLICIES = {
    "ppo": lambda weights, options: served_policy(
        weights, options["serve_url"], options.get("serve_token")
    )
}
