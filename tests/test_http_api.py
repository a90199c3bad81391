"""The HTTP APIs in this process through their ASGI apps (no Ray, no Serve): the policy app
(`xdscheduler.serving.app`) and the live jobs API (`xdscheduler.live.api`, over a job book of
its own). Hostile requests get a 4xx that says what was wrong, never a 5xx, and every answer
has the shape the schema publishes (schemathesis, fixed seed, bounded examples)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import NamedTuple

import pytest

from tests.conftest import API_TOKEN, AUTH, SCENARIOS

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from xdscheduler.serving.gate import MAX_BODY_BYTES  # noqa: E402
from xdscheduler.serving.inprocess import in_process  # noqa: E402

EXAMPLES = int(os.environ.get("XDS_SCHEMATHESIS_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)


@pytest.fixture(scope="module")
def policy_app():
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import XdsService, app

    # each step's forward pass alone: Serve's batch queue belongs to the event loop it was
    # made on, and a request here runs on a loop of its own (batching: tests/test_serving.py)
    in_process(
        app, XdsService, load_scenario(default_scenario_path()).model_dump(), API_TOKEN, batch=1
    )
    return app


@pytest.fixture(scope="module")
def jobs_app(tmp_path_factory):
    from xdscheduler.live.api import JobsService, app
    from xdscheduler.live.controller import JobBook
    from xdscheduler.live.state import ClusterState

    state = ClusterState(
        scenario=str(SCENARIOS / "local_three_domains.yaml"), address="127.0.0.1:6379"
    )
    book = JobBook(tmp_path_factory.mktemp("jobs") / "journal.sqlite")
    in_process(app, JobsService, state.model_dump_json(), API_TOKEN, book=book)
    return app


class Answer(NamedTuple):
    status: int
    json: dict
    headers: dict[str, str]
    read: int  # body bytes the app took


def call(
    app, method: str, path: str, body: bytes | list[bytes] = b"", headers: dict | None = None
) -> Answer:
    """One request through `app`'s ASGI interface. A list of chunks (of one size) is sent
    chunked, without a Content-Length."""
    chunks = body if isinstance(body, list) else [body]
    size = max(len(chunks[0]), 1)
    head = {
        "authorization": AUTH["Authorization"],
        "content-type": "application/json",
        **(
            {"transfer-encoding": "chunked"}
            if isinstance(body, list)
            else {"content-length": str(len(body))}
        ),
        **(headers or {}),
    }
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "headers": [(k.encode(), v.encode()) for k, v in head.items()],
    }
    read, sent = 0, []

    async def receive():
        nonlocal read
        if read // size >= len(chunks):
            await asyncio.sleep(3600)  # all sent: the client waits for the answer
        chunk = chunks[read // size]
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": read < sum(map(len, chunks))}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(
        sent[0]["status"],
        json.loads(body) if body else {},
        {k.decode(): v.decode() for k, v in sent[0]["headers"]},
        read,
    )


# --- the hostile cases, each a regression test


def test_a_forecast_ending_in_year_one_is_refused_not_a_500(policy_app):
    """`end_time` 0001-01-01: the history's start (a step before) overflowed datetime: 500."""
    body = {"history": [100.0] * 120, "step_min": 1, "end_time": "0001-01-01T00:00:00"}
    status, out, _, _ = call(policy_app, "POST", "/forecast", json.dumps(body).encode())
    assert status == 422, out
    assert out["detail"][0]["loc"] == ["body", "end_time"]
    assert "must lie between 1971 and 2200" in out["detail"][0]["msg"]


@pytest.mark.parametrize(
    "path, method",
    [
        ("/forecast", "POST"),
        ("/policy/act", "POST"),
        ("/policy/decide", "POST"),
        ("/api/state", "GET"),
    ],
)
def test_a_chunked_body_over_the_bound_gets_413_on_every_route_unread(policy_app, path, method):
    """Chunked bodies of 10 MB got 400 (the gate's stop surfaced as FastAPI's body error) on
    the routes that read them, and a 200 on those that do not. The bound's worth and one chunk
    more are read, never the rest."""
    chunk = b"1" * (64 << 10)
    status, out, _, read = call(policy_app, method, path, [chunk] * 160)  # 10 MiB
    assert status == 413, out
    assert "at most" in out["detail"]
    assert read <= MAX_BODY_BYTES + len(chunk)


@pytest.mark.parametrize("mib, drained", [(3, True), (100, False)])
def test_a_declared_body_over_the_bound_is_read_to_its_end_only_when_modest(
    policy_app, mib, drained
):
    """A 3 MiB body declared by its Content-Length was refused before it was read: a client
    still sending it saw its connection closed, not the 413. Up to DRAIN_BYTES it is now read
    and dropped first; beyond, it is cut off unread."""
    chunk = b"1" * (64 << 10)
    chunks = [chunk] * (mib << 4)
    length = {"content-length": str(mib << 20)}
    status, out, _, read = call(policy_app, "POST", "/policy/act", chunks, length)
    assert status == 413 and "at most" in out["detail"]
    assert read == ((mib << 20) if drained else 0)


def test_a_chunked_body_within_the_bound_is_answered_as_a_whole(policy_app):
    body = json.dumps({"history": [100.0] * 2000, "step_min": 1}).encode()
    pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    pieces[-1] = pieces[-1].ljust(1000)  # `call` sends chunks of one size: pad with spaces
    status, out, _, _ = call(policy_app, "POST", "/forecast", pieces)
    assert status == 200, out
    assert out["current"] == 100.0


def test_a_body_over_the_bound_by_its_length_gets_413_before_the_token(policy_app):
    answer = call(
        policy_app,
        "POST",
        "/forecast",
        b"",
        {"content-length": str(MAX_BODY_BYTES + 1), "authorization": ""},
    )
    assert answer.status == 413 and answer.read == 0


def test_a_job_named_twice_is_a_409_and_an_unknown_job_a_404(jobs_app):
    spec = json.dumps({"name": "twice", "steps": 5}).encode()
    assert call(jobs_app, "POST", "/", spec).status == 201
    again = call(jobs_app, "POST", "/", spec)
    assert again.status == 409 and "exists already" in again.json["detail"]
    assert call(jobs_app, "GET", "/nobody").status == 404
    assert call(jobs_app, "DELETE", "/nobody").status == 404
    cancelled = call(jobs_app, "DELETE", "/twice")
    assert cancelled.status == 200 and cancelled.json["status"] == "cancelled"
    events = call(jobs_app, "GET", "/twice/events").json["events"]
    assert [e["event"] for e in events] == ["submitted", "cancel", "cancelled"]


def test_a_method_a_path_does_not_take_gets_405_naming_every_one_it_does(jobs_app):
    """`PUT /jobs` was answered `Allow: POST`: Starlette names the methods of the first route
    matching the path only (GET /jobs is another route)."""
    for path, allowed in (("/", "GET, POST"), ("/x", "DELETE, GET")):
        answer = call(jobs_app, "PUT", path)
        assert answer.status == 405 and answer.headers["allow"] == allowed


# --- schemathesis over both apps' published schemas


policy_api = schemathesis.pytest.from_fixture("policy_schema")
jobs_api = schemathesis.pytest.from_fixture("jobs_schema")


def authorised(app):
    """The app's published schema, every generated request carrying the token (the gate's
    401 is its own test: tests/test_serving.py)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    schema.config.update(headers=AUTH)
    return schema


@pytest.fixture(scope="module")
def policy_schema(policy_app):
    return authorised(policy_app)


@pytest.fixture(scope="module")
def jobs_schema(jobs_app):
    return authorised(jobs_app)


@policy_api.parametrize()
@FUZZ
def test_the_policy_app_answers_every_generated_request_as_its_schema_says(case):
    """Every check but positive-data acceptance: a body's validity depends on the served
    scenario (its domain names, its graph's shapes), which a static schema cannot say; such
    bodies get a 422 with the reason, in the documented shape."""
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


@jobs_api.parametrize()
@FUZZ
def test_the_jobs_api_answers_every_generated_request_as_its_schema_says(case):
    """Every check but positive-data acceptance: a job's rules across fields (workers min <=
    max, heads dividing hidden) are beyond a JSON schema; such a job gets a 422 naming them."""
    case.call_and_validate(excluded_checks=[positive_data_acceptance])
