"""The live cluster on the studies' board: the controller publishes its state in the shape a study
publishes (`monitor.live.live_state`), under the policy name `live`, so the dashboard at the API's
`/`, `/api/state` and `/metrics` show the live domains, links (as measured), jobs (placement,
step, loss, predicted and measured step) and the decision log."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from xdscheduler.monitor.board import board
from xdscheduler.perception.graph import INDICATOR_NAMES

if TYPE_CHECKING:
    from ray.actor import ActorHandle

LIVE = "live"  # the board's name for the live cluster
PUBLISH_EVERY_S = 1.0
DECISIONS_KEPT = 200
# journal events that are decisions, as the dashboard's log names them
DECISIONS = {
    "placed": "place",
    "moving": "relocate",
    "preempting": "preempt",
    "requeued": "requeue",
    "watchdog": "requeue",
    "run_failed": "requeue",
}
SHOWN_STATES = {
    "running": "running",
    "starting": "running",
    "moving": "running",
    "preempting": "running",
    "cancelling": "running",
    "done": "completed",
}


class LiveBoard:
    """Collects the controller's decisions as they are journalled and publishes its state to
    the board at most every PUBLISH_EVERY_S (fire and forget: the controller never waits)."""

    def __init__(self, started: float):
        self.started, self.last = started, 0.0
        self.decisions: list[dict] = []
        self.total = 0  # decisions ever logged
        self.sent = 0  # of those, already published
        self.board: ActorHandle | None = None  # the board actor, once published to

    def decided(self, when: float, job: str, kind: str, record: dict) -> None:
        """A journal event: kept when it is a decision."""
        if kind not in DECISIONS:
            return
        self.decisions.append(
            {
                "index": self.total,
                "time_s": when - self.started,
                "job": job,
                "action": DECISIONS[kind],
                "domains": record.get("domains") or {},
                "explanation": record.get("reason") or _explain(kind, record),
                "decision_ms": record.get("decision_ms", 0.0),
            }
        )
        self.total += 1
        del self.decisions[:-DECISIONS_KEPT]

    def due(self) -> bool:
        return time.time() - self.last >= PUBLISH_EVERY_S

    def publish(self, state: dict) -> None:
        self.last = time.time()
        if self.board is None:
            self.board = board(create=True)
        state["decisions"] = [d for d in self.decisions if d["index"] >= self.sent]
        state["decisions_total"] = self.total
        self.sent = self.total
        self.board.publish.remote(state)


def _explain(kind: str, record: dict) -> str:
    shown = {k: v for k, v in record.items() if isinstance(v, int | float | str) and k != "time"}
    return f"{kind}: " + ", ".join(f"{k}={_short(v)}" for k, v in shown.items())


def _short(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)[:120]


def domains_state(
    scn, names: list[str], reports: dict, free: dict, held: dict, health: dict
) -> list[dict]:
    """The board's domains: accelerators as the controller holds them, status from the failure
    detector, the 12 indicators of the agent's last report."""
    out = []
    for d in scn.domains:
        values = reports.get(d.name, {}).get("indicators", {})
        out.append(
            {
                "name": d.name,
                "accelerator": d.accelerator.name,
                "total": d.gpus,
                "free": free[d.name],
                "allocated": held[d.name],
                "reserved": 0,
                "pooled": 0,
                "up": health[d.name] != "down",
                "status": health[d.name],
                "lat": d.location.lat,
                "lon": d.location.lon,
                "indicators": {n: values.get(n) for n in INDICATOR_NAMES},
            }
        )
    return out


def links_state(names: list[str], planned, leased, rtt_ms: dict) -> list[dict]:
    """The board's links, each pair once: the rate the controller plans with (what the agents
    measured) against the scenario's, and the round trip the agents measured."""
    k = len(names)
    return [
        {
            "a": names[a],
            "b": names[b],
            "bandwidth_gbps": float(planned[a, b]),
            "leased_gbps": float(leased[a, b]),
            "rtt_ms": float(rtt_ms.get((names[a], names[b]), 0.0)),
            "leased_rtt_ms": 0.0,
        }
        for a in range(k)
        for b in range(a + 1, k)
        if leased[a, b] > 0
    ]


def job_state(row: dict, submitted_s: float, tokens_per_step: float) -> dict:
    """A job row of `xds jobs` as the board's jobs table shows it."""
    measured = row["measured_step_s"]
    return {
        "name": row["job"],
        "tenant": row["tenant"],
        "state": SHOWN_STATES.get(row["status"], row["status"]),
        "status": row["status"],
        "domains": row["domains"],
        "plan": row["plan"] or "",
        "gpus": sum(row["domains"].values()),
        "progress": row["step"] / row["steps"],
        "step": row["step"],
        "steps": row["steps"],
        "loss": row["loss"],
        "predicted_step_s": row["corrected_step_s"],
        "measured_step_s": measured,
        "steps_per_s": 1 / measured if measured else 0.0,
        "tokens_per_step": tokens_per_step,
        "arrival_s": submitted_s,
        "start_s": None,
        "end_s": None,
    }
