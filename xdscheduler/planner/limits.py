"""Sailor's two constraints on a plan, a budget and a throughput floor, and the dollars an hour
of a plan that they are checked against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.view import ClusterView

if TYPE_CHECKING:
    from xdscheduler.planner.spec import Evaluated


@dataclass(frozen=True)
class Limits:
    """Sailor's two constraints on a plan. With a budget the best plan by R within it wins
    (R with weights 1,0,0: the fastest, as Sailor); with only a throughput floor, the plan that
    reaches it for the fewest dollars per token trained."""

    budget_per_hour: float | None = None
    """Most to pay per hour: its accelerators at the domains' prices, and its WAN traffic."""
    min_tokens_per_s: float | None = None

    @property
    def cheapest(self) -> bool:
        return self.min_tokens_per_s is not None and self.budget_per_hour is None


def cost_per_hour(ev: Evaluated, view: ClusterView) -> np.ndarray:
    """Dollars per hour of every candidate: its accelerators and its WAN traffic."""
    price = np.array([d.price_per_gpu_hour for d in view.domains])
    slots = ev.placements.domains[ev.place]
    gpu = np.where(slots >= 0, ev.gpus * price[np.where(slots >= 0, slots, 0)], 0.0).sum(axis=1)
    return gpu + ev.terms["wan_cost_per_hour"]


def accelerator_cost_per_hour(p: Placement, view: ClusterView) -> float:
    """Dollars per hour of one placement's accelerators, at their domains' prices."""
    return sum(
        g * view.domains[d].price_per_gpu_hour for d, g in zip(p.domains, p.gpus, strict=True)
    )


def placement_cost_per_hour(p: Placement, view: ClusterView) -> float:
    """Dollars per hour of one placement: its accelerators and its WAN traffic."""
    return accelerator_cost_per_hour(p, view) + (
        p.objective.wan_cost_per_hour if p.objective else 0.0
    )


def ranked(ev: Evaluated, view: ClusterView, limits: Limits) -> np.ndarray:
    """Candidates within the limits, best first (UserError, saying how near any came, if
    none is)."""
    if limits == Limits():  # what a running study asks: no dollars to count
        return np.argsort(-ev.terms["objective"], kind="stable")
    cost, speed = cost_per_hour(ev, view), ev.terms["tokens_per_s"]
    ok = np.ones(len(cost), dtype=bool)
    if limits.budget_per_hour is not None:
        ok &= cost <= limits.budget_per_hour
    if limits.min_tokens_per_s is not None:
        ok &= speed >= limits.min_tokens_per_s
    if not ok.any():
        raise UserError(_out_of_limits(cost, speed, limits))
    idx = np.flatnonzero(ok)
    # cheapest: the fewest dollars per token, i.e. for the whole job
    keys = (
        (-ev.terms["objective"][idx], cost[idx] / speed[idx])
        if limits.cheapest
        else (-ev.terms["objective"][idx],)
    )
    return idx[np.lexsort(keys)]


def _out_of_limits(cost: np.ndarray, speed: np.ndarray, limits: Limits) -> str:
    parts = []
    if limits.budget_per_hour is not None:
        parts.append(
            f"a budget of ${limits.budget_per_hour:,.2f}/h (the cheapest plan costs "
            f"${cost.min():,.2f}/h)"
        )
    if limits.min_tokens_per_s is not None:
        parts.append(
            f"{limits.min_tokens_per_s:,.0f} tokens/s (the fastest plan reaches {speed.max():,.0f})"
        )
    return "no plan meets " + " and ".join(parts)
