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
