"""The HTTP APIs in this process through their ASGI apps (no Ray, no Serve): the policy app
(`xdscheduler.serving.app`) and the live jobs API (`xdscheduler.live.api`, over a job book of
its own). Hostile requests get a 4xx that says what was wrong, never a 5xx, and every answer
has the shape the schema publishes (schemathesis, fixed seed, bounded examples)."""

from __future__ import annotations

import asyncio
import json
from typing import NamedTuple

import pytest

from tests.conftest import API_TOKEN, AUTH
from xdscheduler.serving.gate import MAX_BODY_BYTES
from xdscheduler.serving.inprocess import in_process


@pytest.fixture(scope="module")
def policy_app():
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import XdsService, app

    in_process(app, XdsService, load_scenario(default_scenario_path()).model_dump(), API_TOKEN)
    return app


class Answer(NamedTuple):
    status: int
    json: dict
    headers: dict[str, str]
    read: int  # body bytes the app took


def call(app, method: str, path: str, body: bytes | list[bytes] = b"",
         headers: dict | None = None) -> Answer:
    """One request through `app`'s ASGI interface. A list of chunks (of one size) is sent
    chunked, without a Content-Length."""
    chunks = body if isinstance(body, list) else [body]
    size = max(len(chunks[0]), 1)
    head = {"authorization": AUTH["Authorization"], "content-type": "application/json",
            **({"transfer-encoding": "chunked"} if isinstance(body, list)
               else {"content-length": str(len(body))}), **(headers or {})}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 2),
             "headers": [(k.encode(), v.encode()) for k, v in head.items()]}
    read, sent = 0, []

    async def receive():
        nonlocal read
        if read // size >= len(chunks):
            await asyncio.sleep(3600)  # all sent: the client waits for the answer
        chunk = chunks[read // size]
        read += len(chunk)
        return {"type": "http.request", "body": chunk,
                "more_body": read < sum(map(len, chunks))}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(sent[0]["status"], json.loads(body) if body else {},
                  {k.decode(): v.decode() for k, v in sent[0]["headers"]}, read)


# --- the hostile cases, each a regression test


def test_a_forecast_ending_in_year_one_is_refused_not_a_500(policy_app):
    """`end_time` 0001-01-01: the history's start (a step before) overflowed datetime: 500."""
    body = {"history": [100.0] * 120, "step_min": 1, "end_time": "0001-01-01T00:00:00"}
    status, out, _, _ = call(policy_app, "POST", "/forecast", json.dumps(body).encode())
    assert status == 422, out
    assert out["detail"][0]["loc"] == ["body", "end_time"]
    assert "must lie between 1971 and 2200" in out["detail"][0]["msg"]


@pytest.mark.parametrize("path, method", [("/forecast", "POST"), ("/policy/act", "POST"),
                                          ("/policy/decide", "POST"), ("/api/state", "GET")])
def test_a_chunked_body_over_the_bound_gets_413_on_every_route_unread(policy_app, path,
                                                                     method):
    """Chunked bodies of 10 MB got 400 (the gate's stop surfaced as FastAPI's body error) on
    the routes that read them, and a 200 on those that do not. The bound's worth and one chunk
    more are read, never the rest."""
    chunk = b"1" * (64 << 10)
    status, out, _, read = call(policy_app, method, path, [chunk] * 160)  # 10 MiB
    assert status == 413, out
    assert "at most" in out["detail"]
    assert read <= MAX_BODY_BYTES + len(chunk)


def test_a_chunked_body_within_the_bound_is_answered_as_a_whole(policy_app):
    body = json.dumps({"history": [100.0] * 2000, "step_min": 1}).encode()
    pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    pieces[-1] = pieces[-1].ljust(1000)  # `call` sends chunks of one size: pad with spaces
    status, out, _, _ = call(policy_app, "POST", "/forecast", pieces)
    assert status == 200, out
    assert out["current"] == 100.0


def test_a_body_over_the_bound_by_its_length_gets_413_before_the_token(policy_app):
    answer = call(policy_app, "POST", "/forecast", b"",
                  {"content-length": str(MAX_BODY_BYTES + 1), "authorization": ""})
    assert answer.status == 413 and answer.read == 0
