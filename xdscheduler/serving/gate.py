"""What every request to the Serve app passes first: a bounded body, the API token, a timer.

One pure ASGI middleware (Starlette's `BaseHTTPMiddleware` costs a task and a copy per
request). A body is refused (413) above MAX_BODY_BYTES on every route alike: by its
Content-Length before anything is read, or, sent chunked, once that much of it has arrived
(the gate reads such a body itself, never more than the bound, and hands it on whole).

The token is a bearer token (`Authorization: Bearer <token>`); a browser opens the dashboard
or `/docs` once with `?token=<token>` and carries it on as a cookie. Only `/healthz` is open,
so that load balancers and Serve's own checks need no secret.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from xdscheduler.errors import UserError

TOKEN_ENV = "XDS_API_TOKEN"
OPEN_PATHS = frozenset({"/healthz"})
MAX_BODY_BYTES = 2 << 20  # the largest valid body (64 domains, a month of history) is ~1 MiB
TOO_LARGE = f"request bodies are at most {MAX_BODY_BYTES} bytes"
# A body up to this is read and dropped before its 413: a client still sending it when the
# answer came saw its connection closed, not the answer. A larger one is cut off at once.
DRAIN_BYTES = 8 * MAX_BODY_BYTES
COOKIE = "xds_token"


MIN_TOKEN_CHARS = 16


def api_token() -> str:
    """The token from XDS_API_TOKEN, else a fresh random one (for the caller to print once)."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)


def checked_token(token: str | None) -> str:
    """`token`, or XDS_API_TOKEN where None; UserError when that is unset or too short."""
    token = token or os.environ.get(TOKEN_ENV)
    if not token or len(token) < MIN_TOKEN_CHARS:
        raise UserError(
            f"the app needs an API token of at least {MIN_TOKEN_CHARS} characters: set {TOKEN_ENV}"
        )
    return token


def configure(token: str) -> None:
    """Set the token the app in this process asks for (a replica's constructor calls it). It
    lives in the process's environment, not in a module global: Serve ships the app and its
    middleware to the replica by value, with copies of the globals they name."""
    os.environ[TOKEN_ENV] = token


def bearer(token: str | None) -> dict[str, str]:
    """The request header that carries `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class Gate:
    """ASGI middleware: 413 above MAX_BODY_BYTES, 401 without the token, and each request's
    latency observed by `observe(route_path, seconds)`."""

    def __init__(self, app, observe=None):
        self.app, self.observe = app, observe

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        try:
            await self._pass(scope, receive, send)
        finally:
            if self.observe is not None:
                route = scope.get("route")
                self.observe(getattr(route, "path", "unmatched"), time.perf_counter() - start)

    async def _pass(self, scope, receive, send):
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        size = int(length) if length is not None and length.isdigit() else None
        if length is not None and (size is None or size > MAX_BODY_BYTES):
            if size is not None and size <= DRAIN_BYTES:
                await _drain(receive)
            return await _refuse(send, 413, TOO_LARGE)
        if _route_path(scope) not in OPEN_PATHS:
            given, from_query = _presented(scope, headers)
            token = os.environ.get(TOKEN_ENV, "")
            if not token or not hmac.compare_digest(given.encode(), token.encode()):
                return await _refuse(
                    send,
                    401,
                    "missing or wrong API token: send the header "
                    f"'Authorization: Bearer <token>' (the server's "
                    f"{TOKEN_ENV})",
                    {"www-authenticate": "Bearer"},
                )
            if from_query:  # a browser's first visit: carry the token on as a cookie
                send = _with_cookie(send, given)
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():  # length unknown
            receive = await _read_bounded(receive)
            if receive is None:
                return await _refuse(send, 413, TOO_LARGE)
        await self.app(scope, receive, send)


def _route_path(scope) -> str:
    """The path inside the app: without the prefix it is served under (Serve's route_prefix)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def _presented(scope, headers: dict) -> tuple[str, bool]:
    """The token a request presents (header, cookie, or ?token=) and whether from the query."""
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip(), False
    cookie = SimpleCookie(headers.get(b"cookie", b"").decode("latin-1"))
    if COOKIE in cookie:
        return cookie[COOKIE].value, False
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return (query[0], True) if query else ("", False)


async def _drain(receive) -> None:
    """Read a request's body to its end, keeping none of it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _read_bounded(receive):
    """A chunked body read whole, as a `receive` that hands it on in one message (whether
    its route reads it or not: every route refuses one too large alike); None as soon as it
    passes MAX_BODY_BYTES (the rest is never read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left: hand that on
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            break
    pending = [message]

    async def replay():
        return pending.pop() if pending else await receive()

    return replay


def _with_cookie(send, token: str):
    async def sending(message):
        if message["type"] == "http.response.start":
            cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode()
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
        await send(message)

    return sending


async def _refuse(send, status: int, detail: str, extra: dict | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def secured_openapi(app) -> dict:
    """The app's OpenAPI schema with the bearer scheme on every route but the open ones, and
    the answers the gate gives (401, 413) documented."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": f"the server's {TOKEN_ENV}",
            }
        }
        message = {
            "description": "refused by the gate",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {"detail": {"type": "string"}},
                        "required": ["detail"],
                    }
                }
            },
        }
        for path, operations in schema["paths"].items():
            for op in operations.values():
                op.setdefault("responses", {})["413"] = message
                if "requestBody" in op:  # a body that is not JSON at all
                    op["responses"]["400"] = message
                if path not in OPEN_PATHS:
                    op["security"] = [{"bearer": []}]
                    op["responses"]["401"] = message
        app.openapi_schema = schema
    return app.openapi_schema


def allow_every_method(app) -> None:
    """Make `app` answer 405 with every method its path takes in `Allow`: Starlette names
    only those of the first route that matches the path, and `GET /jobs` and `POST /jobs` are
    two routes."""
    from fastapi.exception_handlers import http_exception_handler
    from starlette.exceptions import HTTPException

    async def method_not_allowed(request, exc: HTTPException):
        path = _route_path(request.scope)
        allowed = sorted(
            {m for route in api_routes(app) if route.path_regex.match(path) for m in route.methods}
        )
        return await http_exception_handler(
            request, HTTPException(405, exc.detail, headers={"Allow": ", ".join(allowed)})
        )

    app.add_exception_handler(405, method_not_allowed)


def api_routes(router):
    """Every APIRoute under `router`, into included routers (FastAPI keeps those nested)."""
    from fastapi.routing import APIRoute

    for route in router.routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router)
