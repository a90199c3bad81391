"""The live cluster's HTTP API as the `xds` commands use it: `jobs`, `logs`, `cancel`, `domains`
and `submit` ask the jobs API on the head (address and token from the state file) instead of
joining the cluster as a Ray driver, which took 8-14 s a command on a busy machine. Nothing here
imports Ray; a command answers in what Python and one request take."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from xdscheduler.errors import UserError
from xdscheduler.textfile import read_text

MAX_STATE_BYTES = 1 << 20  # a state file: a few KB
TIMEOUT_S = 30.0  # the API waits up to 30 s for the controller itself


def default_state_path() -> Path:
    """Where `xds up` records its cluster: XDS_CLUSTER, else ~/.xds/cluster.json."""
    env = os.environ.get("XDS_CLUSTER")
    return Path(env) if env else Path.home() / ".xds" / "cluster.json"


def recorded(path: Path) -> str:
    """The state file's text; UserError when there is none."""
    if not path.exists():
        raise UserError(
            f"no cluster recorded at {path}: start one with `xds up SCENARIO` "
            "(or set XDS_CLUSTER to its state file)"
        )
    return read_text(path, "cluster state file", MAX_STATE_BYTES, "JSON")


class LiveClient:
    """Requests to the live API at `url` with its bearer token."""

    def __init__(self, url: str, token: str | None, timeout_s: float = TIMEOUT_S):
        u = urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise UserError(f"the state file's api must look like http://HOST:PORT, got {url!r}")
        self.url, self.host, self.port = url, u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        """The status and the decoded answer (JSON: what `json.loads` gives, or the text when
        it is not JSON); UserError when the API cannot be reached."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request(method, path, None if body is None else json.dumps(body), self.headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as err:
            raise UserError(
                f"the live API at {self.url} does not answer ({err}): is the cluster up? (`xds up`)"
            ) from None
        finally:
            conn.close()
        try:
            answer = json.loads(data) if data else None
        except ValueError:
            answer = data.decode(errors="replace")
        if resp.status == 401:
            raise UserError(
                f"{method} {path} answered 401: the state file's api_token is not this cluster's"
            )
        if resp.status >= 500:
            raise UserError(f"{method} {path} answered {resp.status}: {detail(answer)}")
        return resp.status, answer

    def jobs(self) -> list[dict]:
        return self.call("GET", "/jobs")[1]["jobs"]

    def job(self, name: str) -> dict | None:
        status, answer = self.call("GET", f"/jobs/{quote(name, safe='')}")
        return answer if status == 200 else None

    def events(self, name: str) -> list[dict] | None:
        status, answer = self.call("GET", f"/jobs/{quote(name, safe='')}/events")
        return answer["events"] if status == 200 else None

    def cancel(self, name: str) -> dict | None:
        status, answer = self.call("DELETE", f"/jobs/{quote(name, safe='')}")
        return answer if status == 200 else None

    def submit(self, spec: dict, where: str) -> dict:
        """POST the job; UserError naming `where` (the job file) and the field the API
        refused, or the name it has already."""
        status, answer = self.call("POST", "/jobs", spec)
        if status == 201:
            return answer
        raise UserError(f"{where}: {detail(answer)}")

    def domains(self) -> dict:
        return self.call("GET", "/live/domains")[1]


def detail(answer) -> str:
    """The one line of an API's refusal: FastAPI's `detail`, a string or its first error."""
    d = answer.get("detail", answer) if isinstance(answer, dict) else answer
    if isinstance(d, list) and d and isinstance(d[0], dict):
        where = ".".join(str(p) for p in d[0].get("loc", [])[1:])
        return f"{where}: {d[0].get('msg')}" if where else str(d[0].get("msg"))
    return str(d)
