"""Heartbeat silence and log anomalies combined into fault verdicts, each logged with evidence.

Why the rules look the way they do:
- A domain outage silences its actor, its nodes and its links at once; their phi crosses the
  threshold within one heartbeat period of each other. Node, actor and link suspicions are
  therefore held for HOLD_S (a bit more than one period) before being declared, so an outage
  gives one domain verdict, not a storm of node and link verdicts.
- Error lines that precede a silence add to the silence evidence (crash score = phi/T + W·S/T_log),
  so a node that logs Xid errors and then goes quiet is declared sooner.
- A node that keeps heartbeating but logs surprising errors is a gpu_error; one whose step times
  run slow is a straggler.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from xdscheduler.faults.failure_model import Cluster, link_id
from xdscheduler.faults.heartbeat import PHI_THRESHOLD, PhiAccrual
from xdscheduler.faults.logs import (
    SLOW_RUN,
    STEP_EVENT,
    LogAnomalyDetector,
    LogRecord,
    StepTimeMonitor,
    TemplateModel,
    benign_noise,
)

HOLD_S = 0.8  # > one heartbeat period (0.5 s + 30%): time for a domain-wide silence to show
LOG_THRESHOLD = 7.0  # summed -log10 tail probability of a source's window
LOG_WEIGHT = 0.5  # weight of error lines in a node's crash score
OUTAGE_FRACTION = 0.5  # silent share of a domain's nodes that, with its actor, is an outage


@dataclass(frozen=True)
class DetectorConfig:
    period_s: float = 0.5
    phi_threshold: float = PHI_THRESHOLD
    log_threshold: float = LOG_THRESHOLD
    hold_s: float = HOLD_S
    slow_run: int = SLOW_RUN


@dataclass(frozen=True)
class Verdict:
    target: str
    kind: str
    time_s: float
    evidence: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class FaultDetector:
    """Feed heartbeats and log records as they arrive; `evaluate(now)` returns new verdicts."""

    def __init__(
        self, cluster: Cluster, log_model: TemplateModel, config: DetectorConfig | None = None
    ):
        self.cluster, self.config = cluster, config or DetectorConfig()
        config = self.config
        self.domains = {d: [f"{d}/n{i}" for i in range(n)] for d, n in cluster.nodes.items()}
        self.links = {link_id(a, b): (a, b) for a, b in cluster.links}
        senders = list(self.domains) + [n for ns in self.domains.values() for n in ns]
        self.hb = PhiAccrual(
            senders + list(self.links), config.period_s, threshold=config.phi_threshold
        )
        self.logs = LogAnomalyDetector(log_model)
        self.steps = StepTimeMonitor()
        self.verdicts: list[Verdict] = []
        self.declared: set[str] = set()
        self._pending: dict[str, float] = {}  # target → time first suspected

    @classmethod
    def create(
        cls,
        cluster: Cluster,
        seed: int = 0,
        config: DetectorConfig | None = None,
        train_s: float = 3600.0,
    ) -> FaultDetector:
        """A detector whose log model is fitted on a seeded benign trace (up to 16 sources:
        sources are alike, the model is per source and window)."""
        rng = np.random.default_rng([seed, 999])
        nodes = cluster.node_ids()[:16]
        recs = [r for n in nodes for r in benign_noise(rng, n, 0.0, train_s)]
        return cls(cluster, TemplateModel.fit(recs, len(nodes), train_s), config)

    # -------------------------------------------------------------- input

    def observe_report(
        self, report, node_heartbeats: Iterable[str] = (), logs: Iterable[LogRecord] = ()
    ) -> None:
        """A DomainReport (domain, time_s, links: neighbour → (Gbit/s, RTT)) is the actor's
        heartbeat and, for each neighbour it still reaches, the link's; node ids listed beat
        at the same time; log records go to the log detectors."""
        t = float(report.time_s)
        self.heartbeat(report.domain, t)
        for other, (gbps, _rtt) in report.links.items():
            lid = link_id(report.domain, other)
            if lid in self.links and gbps > 0:
                self.heartbeat(lid, t)
        for node in node_heartbeats:
            self.heartbeat(node, t)
        for rec in logs:
            self.log(rec)

    def heartbeat(self, sender: str, t: float) -> None:
        self.hb.heartbeat(sender, t)

    def log(self, rec: LogRecord) -> None:
        if rec.event == STEP_EVENT:
            self.steps.observe(rec)
        else:
            self.logs.observe(rec)

    def clear(self, target: str) -> None:
        """The target recovered (or was replaced): judge it afresh."""
        self.declared.discard(target)
        self._pending.pop(target, None)

    # -------------------------------------------------------------- judgement

    def evaluate(self, now: float) -> list[Verdict]:
        rel = (self.hb.phi(now) / self.config.phi_threshold).tolist()  # plain floats
        phi = dict(zip(self.hb.senders, rel, strict=True))
        new: list[Verdict] = []
        out_domains = set()
        for dom, nodes in self.domains.items():
            if self._judge_domain(dom, nodes, phi, now, new):
                out_domains.add(dom)
        for lid, (a, b) in self.links.items():
            if a in out_domains or b in out_domains:
                self._pending.pop(lid, None)
                continue
            t = self.config.phi_threshold
            self._hold(
                lid,
                "link_cut",
                phi[lid] >= 1,
                now,
                new,
                lambda lid=lid, a=a, b=b, t=t: {
                    "phi": round(phi[lid] * t, 2),
                    "endpoint_phi": [round(phi[a] * t, 2), round(phi[b] * t, 2)],
                },
            )
        self.verdicts += new
        return new

    def _judge_domain(self, dom, nodes, phi, now, new) -> bool:
        """Verdicts for a domain and its nodes; True when the domain is out."""
        if dom in self.declared:
            return True
        # plain floats: this runs every tick for every domain, where numpy's per-call cost
        # on a handful of nodes was most of a fault study's time
        node_phi = [phi[n] for n in nodes]
        frac = sum(p >= 1 for p in node_phi) / len(node_phi)
        suspect = phi[dom] >= 1 or frac >= OUTAGE_FRACTION

        def ev() -> dict:  # the evidence, made only where something is declared or held
            return {
                "actor_phi": round(phi[dom] * self.config.phi_threshold, 2),
                "silent_node_fraction": frac,
                "min_node_phi": round(min(node_phi) * self.config.phi_threshold, 2),
            }

        if phi[dom] >= 1 and frac >= OUTAGE_FRACTION:
            self._declare(dom, "domain_outage", now, ev(), new)
            for n in nodes:
                self._pending.pop(n, None)
            self._pending.pop(dom, None)
            return True
        self._hold(dom, "actor_crash", phi[dom] >= 1 and frac < OUTAGE_FRACTION, now, new, ev)
        for n in nodes:
            if not suspect or n in self._pending:
                self._judge_node(n, phi[n], now, new)
        return False

    def _judge_node(self, node, phi_rel, now, new) -> None:
        if node in self.declared:
            return
        score, counts = self.logs.score(node, now)
        log_rel = score / self.config.log_threshold
        crash = phi_rel + LOG_WEIGHT * log_rel

        def ev() -> dict:
            return {
                "phi": round(phi_rel * self.config.phi_threshold, 2),
                "log_score": round(score, 2),
                "templates": counts,
                "crash_score": round(crash, 3),
            }

        if phi_rel >= 0.5 and crash >= 1:
            self._hold(node, "node_crash", True, now, new, ev)
            return
        self._pending.pop(node, None)
        if phi_rel >= 0.5:  # half-way to silent: let the heartbeats settle it first
            return
        if log_rel >= 1:
            self._declare(node, "gpu_error", now, ev(), new)
            return
        if self.steps.slow_run(node, now) >= self.config.slow_run:
            _, step_ev = self.steps.evidence(node, now)
            self._declare(node, "straggler", now, {**ev(), **step_ev}, new)

    def _hold(self, target, kind, suspect, now, new, evidence) -> None:
        """Declare once the suspicion has lasted hold_s; drop it if it clears before."""
        if target in self.declared:
            return
        if not suspect:
            self._pending.pop(target, None)
            return
        since = self._pending.setdefault(target, now)
        if now - since >= self.config.hold_s:
            self._declare(target, kind, now, {**evidence(), "suspected_since_s": since}, new)

    def _declare(self, target, kind, now, evidence, new) -> None:
        self.declared.add(target)
        self._pending.pop(target, None)
        new.append(Verdict(target, kind, float(now), evidence))

    def journal(self) -> str:
        """Every verdict as JSON lines, evidence included."""
        return "\n".join(json.dumps(v.to_json(), default=float) for v in self.verdicts)
