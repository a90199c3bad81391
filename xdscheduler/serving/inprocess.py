"""A Serve app's FastAPI routes answering in this process, with no Ray and no Serve: what the
tests run schemathesis against (the real app through its ASGI interface), and what the load
benchmark times a request by when HTTP and Serve are left out.

Serve hands each route its replica through a FastAPI dependency that reads the replica's
context; here FastAPI's own `dependency_overrides` hands it one replica made in process.
"""

from __future__ import annotations

import inspect

from fastapi import FastAPI

from xdscheduler.serving.gate import api_routes


def in_process(app: FastAPI, deployment, *args, **kwargs):
    """`app`, the ingress of `deployment` (`@serve.deployment` over `@serve.ingress(app)`),
    answering every route with one replica made here from `args` and `kwargs`; the replica.
    Serve's own replicas are untouched: each holds a copy of the app made at decoration."""
    cls = deployment.func_or_class.__mro__[1]  # the class under Serve's ingress wrapper
    replica = cls(*args, **kwargs)
    lookups = {
        inspect.signature(route.endpoint).parameters["self"].default.dependency
        for route in api_routes(app)
        if getattr(route.endpoint, "_serve_cls", None)
    }
    for lookup in lookups:
        app.dependency_overrides[lookup] = lambda: replica
    return replica
