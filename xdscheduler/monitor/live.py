"""What a running study looks like now, as plain JSON values: the domains with their 12
indicators, the links now against their lease, the jobs with predicted and measured speed, the
queue, the decisions made since the last look, and the faults so far.

`live_state` reads an engine and changes nothing; the board (`monitor.board`) keeps the latest
state of each policy, and the dashboard and `/metrics` are drawn from it.
"""

from __future__ import annotations

import math

from xdscheduler.perception.graph import INDICATOR_NAMES

RECENT_DONE = 20  # finished jobs kept in the jobs table, the latest first


def live_state(engine, policy: str, decisions_from: int = 0) -> dict:
    """The engine's state now; `decisions` holds the log's entries from `decisions_from` on."""
    scn, view = engine.scn, engine.view
    return {
        "policy": policy,
        "scenario": scn.name,
        "now_s": engine.now,
        "horizon_s": engine.horizon_s,
        "finished": engine.finished,
        "domains": _domains(engine),
        "links": _links(view),
        "jobs": _jobs(engine),
        "queue": _queue(engine),
        "decisions": [
            _decision(i, d)
            for i, d in enumerate(engine.recorder.decisions[decisions_from:], decisions_from)
        ],
        "decisions_total": len(engine.recorder.decisions),
        "faults": _faults(engine),
    }


def _domains(engine) -> list[dict]:
    held = engine.held()
    ind = engine.view.indicators
    out = []
    for i, (d, spec) in enumerate(zip(engine.view.domains, engine.scn.domains, strict=True)):
        values = (
            {} if ind is None else {n: _finite(ind[i, j]) for j, n in enumerate(INDICATOR_NAMES)}
        )
        out.append(
            {
                "name": d.name,
                "accelerator": d.accelerator.name,
                "total": d.total_gpus,
                "free": d.available,
                "allocated": held[i],
                "reserved": d.reserved_gpus,
                "pooled": d.pooled_gpus,
                "up": d.up,
                "lat": spec.location.lat,
                "lon": spec.location.lon,
                "indicators": values,
            }
        )
    return out


def _links(view) -> list[dict]:
    base, base_rtt = view.leased
    k = len(view.names)
    return [
        {
            "a": view.names[a],
            "b": view.names[b],
            "bandwidth_gbps": float(view.bandwidth_gbps[a, b]),
            "leased_gbps": float(base[a, b]),
            "rtt_ms": float(view.rtt_ms[a, b]),
            "leased_rtt_ms": float(base_rtt[a, b]),
        }
        for a in range(k)
        for b in range(a + 1, k)
        if base[a, b] > 0
    ]


def _jobs(engine) -> list[dict]:
    predicted = {p.job: p.predicted_s for p in engine.speeds.predictions}  # the latest per job
    done = sorted((r for r in engine.runs if r.end_s is not None), key=lambda r: -r.end_s)
    rows = []
    for r in [*engine.active, *engine.queue, *done[:RECENT_DONE]]:
        p = r.placement
        tokens_per_step = r.spec.global_batch * r.spec.seq
        measured = tokens_per_step / r.rate if r.running and r.rate > 0 else None
        rows.append(
            {
                "name": r.name,
                "tenant": r.tenant,
                "state": str(r.state),
                "domains": {engine.names[i]: n for i, n in p.taken.items()} if p else {},
                "plan": _plan(p) if p else "",
                "gpus": p.total_gpus if p else 0,
                "progress": min(r.done / r.tokens, 1.0) if r.tokens else 1.0,
                "predicted_step_s": predicted.get(r.name) if r.running else None,
                "measured_step_s": measured,
                "steps_per_s": 1 / measured if measured else 0.0,
                "arrival_s": r.arrival_s,
                "start_s": r.start_s,
                "end_s": r.end_s,
            }
        )
    return rows


def _plan(p) -> str:
    q = p.plan
    text = f"TP{q.tp}·PP{q.pp}·DP{q.dp}" + (f"·CP{q.cp}" if q.cp > 1 else "")
    return text + (f" DiLoCo H={q.diloco_h}" if q.diloco_h else "")


def _queue(engine) -> list[dict]:
    return [
        {
            "name": r.name,
            "tenant": r.tenant,
            "priority": r.priority,
            "waited_s": max(engine.now - r.arrival_s, 0.0),
            "gpus_min": r.spec.gpus_min,
        }
        for r in engine.queue
    ]


def _decision(index: int, d) -> dict:
    return {
        "index": index,
        "time_s": d.time_s,
        "job": d.job,
        "action": str(d.action),
        "domains": dict(d.domains),
        "explanation": d.explanation,
        "decision_ms": d.decision_ms,
    }


def _faults(engine) -> dict:
    """Outages the reports showed and, under injected faults, each incident: when it struck,
    when it was detected, and how many of its jobs resumed."""
    now = engine.now
    outages = [{"domain": n, "down_s": a, "up_s": b} for n, a, b in engine.sensing.outages]
    incidents = []
    if engine.faults:
        for inc in engine.faults.incidents:
            if inc.event.time_s > now:
                break  # in time order: the rest is still to come
            detected = (
                inc.detected_s if inc.detected_s is not None and inc.detected_s <= now else None
            )
            incidents.append(
                {
                    "kind": inc.event.kind,
                    "time_s": inc.event.time_s,
                    "target": inc.event.target,
                    "detected_s": detected,
                    "jobs_hit": len(inc.jobs),
                    "jobs_recovered": sum(v is not None for v in inc.jobs.values()),
                }
            )
    return {"outages": outages, "incidents": incidents}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
