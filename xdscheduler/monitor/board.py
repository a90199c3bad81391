"""The board: one named Ray actor that live studies publish their state to, and that the Serve
app's dashboard and `/metrics` read from. Controllers and Serve replicas live in different
processes (and Serve's in a namespace of its own), so they meet at a name in a fixed namespace.
"""

from __future__ import annotations

import time
from collections import deque

import ray

from xdscheduler.monitor.live import live_state
from xdscheduler.monitor.metrics import StudyMetrics

BOARD = "xds-board"
NAMESPACE = "xdscheduler"
DECISIONS_KEPT = 200  # the decision log's latest entries shown on the dashboard
PUBLISH_EVERY_S = 1.0  # wall-clock seconds between two states of one study


@ray.remote(num_cpus=0)
class Board:
    """The latest state of each policy's live study, its recent decisions, and the metrics."""

    def __init__(self) -> None:
        self.states: dict[str, dict] = {}
        self.decisions: dict[str, deque] = {}
        self.metrics = StudyMetrics(self.states)
        self.updates = 0

    def publish(self, state: dict) -> None:
        policy = state["policy"]
        new = state.pop("decisions")
        log = self.decisions.setdefault(policy, deque(maxlen=DECISIONS_KEPT))
        seen = log[-1]["index"] if log else -1
        if state["decisions_total"] <= seen:  # a new study of this policy: start afresh
            log.clear()
            seen = -1
        fresh = [d for d in new if d["index"] > seen]  # a resent state counts nothing twice
        log.extend(fresh)
        self.metrics.observe(policy, fresh)
        self.states[policy] = state
        self.updates += 1

    def snapshot(self, policy: str | None = None) -> dict:
        """The latest states (one policy's, or all), each with its recent decisions."""
        names = [policy] if policy else list(self.states)
        return {
            "updates": self.updates,
            "policies": {
                n: {**self.states[n], "decisions": list(self.decisions[n])}
                for n in names
                if n in self.states
            },
        }

    def metrics_text(self) -> bytes:
        return self.metrics.text()


def board(create: bool = False):
    """The cluster's board (created when `create` and none exists); None when there is none."""
    if create:
        return Board.options(  # type: ignore[attr-defined]  # a Ray actor class
            name=BOARD, namespace=NAMESPACE, get_if_exists=True
        ).remote()
    if not ray.is_initialized():  # an app answering outside a cluster: looking would start one
        return None
    try:
        return ray.get_actor(BOARD, namespace=NAMESPACE)
    except ValueError:
        return None


class Publisher:
    """Sends an engine's state to the board at most every PUBLISH_EVERY_S of wall time, each
    time with the decisions logged since the last."""

    def __init__(self, engine, policy: str):
        self.engine, self.policy = engine, policy
        self.board = board(create=True)
        self.sent = 0  # decisions already on the board
        self.last = -float("inf")

    def __call__(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PUBLISH_EVERY_S:
            return
        self.last = now
        state = live_state(self.engine, self.policy, self.sent)
        self.sent = state["decisions_total"]
        self.board.publish.remote(state)  # fire and forget: the study never waits on it
