"""Detector benchmark: inject faults into simulated heartbeat and log streams and score verdicts.

Each trial is a small cluster (2 domains × 4 nodes, one WAN link) on a simulated clock:
heartbeats every 0.5 s with ±30% jitter on every interval, per-micro-batch step-time lines,
benign warnings with bursts, and at most one fault. The detectors alone run (no Ray). A verdict
is a true positive when its target and kind match the injected fault and it comes after the
fault's start; every other verdict is a false alarm. Fault-free trials add clean time.
"""

from __future__ import annotations

import numpy as np

from xdscheduler.faults.detector import DetectorConfig, FaultDetector
from xdscheduler.faults.failure_model import Cluster, FaultEvent, link_id, node_id
from xdscheduler.faults.logs import (
    LogRecord,
    TemplateModel,
    benign_noise,
    fault_burst,
    step_logs,
    step_times,
)

JITTER = 0.30
TICK_S = 0.1  # the detector is evaluated ten times a simulated second
WARMUP_S = 5.0  # no judgement before the windows have data
FAULT_AT = (12.0, 16.0)
AFTER_S = 5.0  # a trial runs this long after its fault
CLEAN_SHARE = 0.2  # fault-free trials, as a share of n
TRAIN_S = 3600.0  # benign trace the template model is fitted on
MIX = ("node_crash", "gpu_error", "domain_outage", "link_cut", "straggler", "actor_crash")
CLUSTER = Cluster({"east": 4, "west": 4}, (("east", "west"),))


def heartbeats(
    rng, period_s: float, t1: float, stop: float = np.inf, loss: float = 0.0
) -> np.ndarray:
    """Arrival times with every interval period·(1 ± 30%), from a random phase, until stop;
    each heartbeat lost with probability `loss` (0 in the headline figures)."""
    n = int(t1 / (period_s * (1 - JITTER))) + 2
    t = rng.uniform(0, period_s) + np.cumsum(period_s * (1 + rng.uniform(-JITTER, JITTER, n)))
    t = t[rng.random(n) >= loss] if loss else t
    return t[(t < t1) & (t < stop)]


def fit_log_model(seed: int) -> TemplateModel:
    """The template model from an hour of benign logs of every node (a separate seed)."""
    rng = np.random.default_rng([seed, 999])
    nodes = CLUSTER.node_ids()
    recs = [r for n in nodes for r in benign_noise(rng, n, 0.0, TRAIN_S)]
    return TemplateModel.fit(recs, len(nodes), TRAIN_S)


def draw_fault(rng, kind: str | None) -> FaultEvent | None:
    if kind is None:
        return None
    t = float(rng.uniform(*FAULT_AT))
    domain = str(rng.choice(list(CLUSTER.nodes)))
    node = node_id(domain, int(rng.integers(CLUSTER.nodes[domain])))
    target = {
        "domain_outage": domain,
        "actor_crash": domain,
        "link_cut": link_id(*CLUSTER.links[0]),
    }.get(kind, node)
    slow = float(rng.uniform(1.3, 3.0)) if kind == "straggler" else 1.0
    return FaultEvent(t, kind, target, 3600.0, slow)


def _silenced_at(sender: str, fault: FaultEvent | None) -> float:
    if fault is None:
        return np.inf
    k, tgt = fault.kind, fault.target
    hit = (
        (k in ("node_crash",) and sender == tgt)
        or (k in ("actor_crash", "link_cut") and sender == tgt)
        or (
            k == "domain_outage"
            and (sender == tgt or sender.startswith(tgt + "/") or tgt in sender.split("|"))
        )
    )
    return fault.time_s if hit else np.inf


def trial_streams(rng, fault: FaultEvent | None, t_end: float, period_s: float, loss: float = 0.0):
    """Time-sorted (time, sender or LogRecord) of one trial."""
    hb_senders = list(CLUSTER.nodes) + CLUSTER.node_ids() + [link_id(*CLUSTER.links[0])]
    items: list[tuple[float, object]] = []
    for s in hb_senders:
        beats = heartbeats(rng, period_s, t_end, _silenced_at(s, fault), loss)
        items += [(float(t), s) for t in beats]
    for n in CLUSTER.node_ids():
        stop = _silenced_at(n, fault)
        slow_from, slowdown = np.inf, 1.0
        if fault is not None and fault.target == n:
            if fault.kind == "straggler":
                slow_from, slowdown = fault.time_s, fault.slowdown
            elif fault.kind == "gpu_error":  # the training process aborts; the host lives on
                stop = fault.time_s + 0.5
                items += [(r.time_s, r) for r in fault_burst(rng, n, fault.time_s)]
        ends, durs = step_times(rng, rng.uniform(0, 0.4), t_end, slow_from, slowdown, stop)
        items += [(r.time_s, r) for r in step_logs(n, ends, durs)]
        items += [(r.time_s, r) for r in benign_noise(rng, n, 0.0, min(t_end, stop))]
    items.sort(key=lambda x: x[0])
    return items


def run_trial(rng, fault, model, config, loss: float = 0.0) -> list:
    t_end = (fault.time_s if fault else FAULT_AT[1]) + AFTER_S
    items = trial_streams(rng, fault, t_end, config.period_s, loss)
    det = FaultDetector(CLUSTER, model, config)
    k = 0
    for tick in np.arange(TICK_S, t_end, TICK_S):
        while k < len(items) and items[k][0] <= tick:
            t, what = items[k]
            det.log(what) if isinstance(what, LogRecord) else det.heartbeat(what, t)
            k += 1
        if tick >= WARMUP_S:
            det.evaluate(float(tick))
    return det.verdicts


def detection_delay_s(kind: str, seed: int, model: TemplateModel | None = None) -> float | None:
    """Seconds from a fault of `kind` to its verdict in one simulated trial (None if missed or
    misjudged): for a coarse-clocked study that wants a detection delay per injected fault."""
    if kind not in MIX:
        raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(MIX)}")
    rng = np.random.default_rng(seed)
    fault = draw_fault(rng, kind)
    assert fault is not None  # a kind was named
    verdicts = run_trial(rng, fault, model or fit_log_model(0), DetectorConfig())
    hits = [
        v.time_s - fault.time_s
        for v in verdicts
        if (v.target, v.kind) == (fault.target, kind) and v.time_s >= fault.time_s
    ]
    return hits[0] if hits else None


def bench(
    n: int = 1000, seed: int = 0, config: DetectorConfig | None = None, loss: float = 0.0
) -> dict:
    """n faults (an even mix of kinds) plus n·CLEAN_SHARE fault-free trials."""
    config = config or DetectorConfig()
    model = fit_log_model(seed)
    rng = np.random.default_rng(seed)
    kinds = [MIX[i % len(MIX)] for i in range(n)] + [None] * int(n * CLEAN_SHARE)
    tp, fp, delays, hit = 0, 0, [], {k: [0, 0] for k in MIX}
    by_kind: dict[str, list[float]] = {k: [] for k in MIX}
    false_alarms = []
    for kind in kinds:
        trial_rng = np.random.default_rng(rng.integers(2**63))
        fault = draw_fault(trial_rng, kind)
        verdicts = run_trial(trial_rng, fault, model, config, loss)
        found = False
        for v in verdicts:
            if (
                fault
                and not found
                and v.target == fault.target
                and v.kind == fault.kind
                and v.time_s >= fault.time_s
            ):
                found = True
                delays.append(v.time_s - fault.time_s)
                by_kind[fault.kind].append(v.time_s - fault.time_s)
            else:
                false_alarms.append({"fault": fault and fault.kind, **v.to_json()})
        if fault:
            hit[fault.kind][0] += found
            hit[fault.kind][1] += 1
        tp += found
        fp = len(false_alarms)
    d = np.array(delays) if delays else np.array([np.nan])
    return {
        "n_faults": n,
        "fault_free_trials": int(n * CLEAN_SHARE),
        "seed": seed,
        "true_positives": tp,
        "false_alarms": fp,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / n if n else 0.0,
        "detection_s_p50": float(np.percentile(d, 50)),
        "detection_s_p99": float(np.percentile(d, 99)),
        "detection_s_max": float(np.max(d)),
        "recall_by_kind": {k: h[0] / h[1] for k, h in hit.items() if h[1]},
        "detection_s_p99_by_kind": {
            k: float(np.percentile(v, 99)) for k, v in by_kind.items() if v
        },
        "heartbeat_period_s": config.period_s,
        "jitter": JITTER,
        "heartbeat_loss": loss,
        "false_alarm_examples": false_alarms[:5],
    }
