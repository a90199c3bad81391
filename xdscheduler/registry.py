"""The policy registry: every scheduling policy by name, from the layer that owns it.

Each layer lists its own policies in a `POLICIES` dict (name -> factory(weights, options)): the
rule-based ones in `planner.policies` and `planner.waiting`, the trained agents in `rl.agents`;
`serving.client` lists in `SERVED_POLICIES` the ones that can decide through an HTTP endpoint
instead. The registry sits above them all and the engine below: it receives a policy and never
imports one. The providers load no torch and no Ray until one of their policies is made.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from pydantic import Field

from xdscheduler.catalog import did_you_mean
from xdscheduler.errors import UserError
from xdscheduler.planner.policy import Policy
from xdscheduler.scenario import Weights
from xdscheduler.schema import Strict

# Provider modules, in the order their policies are listed; each has a `POLICIES` dict.
PROVIDERS = (
    "xdscheduler.planner.policies",
    "xdscheduler.planner.waiting",
    "xdscheduler.rl.agents",
)
SERVED = "xdscheduler.serving.client"  # its `SERVED_POLICIES` decide through `serve_url`


def _registered() -> dict:
    """name -> factory, every provider's, in order."""
    out: dict = {}
    for module in PROVIDERS:
        out.update(importlib.import_module(module).POLICIES)
    return out


class PolicyOptions(Strict):
    """How a policy is made beyond its name and weights."""

    policy_path: Path | None = None
    """Trained modules for the agents (default: the shipped ones)."""
    serve_url: str | None = None
    """Decide through the endpoint at this URL instead of in this process, where the policy can."""
    serve_token: str | None = Field(default=None, repr=False)
    """That endpoint's API token (default: XDS_API_TOKEN where the policy runs)."""


def names() -> list[str]:
    """Every registered policy, in the order a study runs them by default."""
    return list(_registered())


def parse_policies(text: str | None) -> list[str]:
    """A comma-separated list of policy names from the command line (none given: all), each
    once: a name given twice is still one policy to run."""
    if text is None:
        return names()
    picked = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not picked:
        raise UserError(f"--policies {text!r} names no policy; known: {', '.join(names())}")
    check(picked)
    return picked


def check(policies: list[str]) -> None:
    """Refuse names that are not registered, naming those that are."""
    known = names()
    unknown = [p for p in policies if p not in known]
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise UserError(f"unknown policies {', '.join(unknown)}{hint}; known: {', '.join(known)}")


def make_policy(name: str, weights: Weights, options: PolicyOptions | dict | None = None) -> Policy:
    """The policy registered under `name`, deciding by `weights`."""
    check([name])
    opts = PolicyOptions.model_validate(options or {})
    served = importlib.import_module(SERVED).SERVED_POLICIES if opts.serve_url else {}
    factory = served.get(name) or _registered()[name]
    return factory(weights, opts.model_dump())
