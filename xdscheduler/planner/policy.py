"""The policy interface: what the engine asks of whatever decides where jobs run."""

from __future__ import annotations

from typing import Protocol

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView


class Policy(Protocol):
    @property
    def name(self) -> str:
        """The policy's name in reports."""

    @property
    def single_domain(self) -> bool:
        """True for a policy that never places a job across domains."""

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        """Placements for jobs of the queue that should start now."""

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        """A better placement for a running job (its own accelerators counted free), or None."""
