"""Prometheus metrics of live studies, drawn at scrape time from the latest state of each policy
(`monitor.live`) and the decisions seen so far.

Names follow Prometheus conventions: base units in the name (seconds, bytes, bytes per second,
watts, ratios), `_total` for counters. Labels: `policy` on everything a study has, `domain`,
`a`/`b` for the ends of a link, `job`, `tenant`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xdscheduler.faults.failure_model import KINDS as FAULT_KINDS
from xdscheduler.perception.indicators import INDICATORS
from xdscheduler.sim.measurement import Action

GBIT = 1e9 / 8  # bytes per second in a Gbit/s
# indicator -> (metric name, factor from the indicator's unit to the metric's base unit)
INDICATOR_METRICS: dict[str, tuple[str, float]] = {
    "compute_index": ("xds_domain_compute_index", 1.0),  # H100-equivalents
    "free_accelerators": ("xds_domain_free_accelerators", 1.0),
    "utilization": ("xds_domain_utilization_ratio", 1.0),
    "free_accelerator_memory": ("xds_domain_free_accelerator_memory_bytes", 2.0**30),
    "storage_io": ("xds_domain_storage_io_bytes_per_second", GBIT),
    "free_storage": ("xds_domain_free_storage_bytes", 1e12),
    "intra_domain_bandwidth": ("xds_domain_intra_bandwidth_bytes_per_second", GBIT),
    "inter_domain_bandwidth": ("xds_domain_inter_bandwidth_bytes_per_second", GBIT),
    "latency": ("xds_domain_latency_seconds", 1e-3),
    "health": ("xds_domain_health_ratio", 1.0),
    "load": ("xds_domain_load_ratio", 1.0),
    "power": ("xds_domain_power_watts", 1e3),
}
assert set(INDICATOR_METRICS) == set(INDICATORS), "one metric per indicator"
# Decisions take milliseconds to seconds; endpoint calls the same.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# label sets
DOMAIN, LINK = ["policy", "domain"], ["policy", "a", "b"]
JOB, TENANT = ["policy", "job", "tenant"], ["policy", "tenant"]
# (name, help, labels) of the gauges and counters beside the indicators'
GAUGES: tuple[tuple[str, str, list[str]], ...] = (
    (
        "xds_domain_up",
        "1 while the domain reports, 0 while it is down",
        ["policy", "domain", "accelerator"],
    ),
    ("xds_domain_capacity_accelerators", "accelerators of the domain", DOMAIN),
    ("xds_domain_allocated_accelerators", "accelerators held by this scheduler's jobs", DOMAIN),
    ("xds_link_bandwidth_bytes_per_second", "WAN bandwidth per direction now", LINK),
    ("xds_link_leased_bandwidth_bytes_per_second", "WAN bandwidth as leased", LINK),
    ("xds_link_rtt_seconds", "round-trip time of the WAN link now", LINK),
    ("xds_job_steps_per_second", "training steps per second now (0 while not running)", JOB),
    ("xds_job_predicted_step_seconds", "step time the policy predicted for the plan", JOB),
    ("xds_job_measured_step_seconds", "step time the job runs at", JOB),
    ("xds_job_progress_ratio", "share of the job's tokens trained", JOB),
    (
        "xds_job_info",
        "1 per job: its state, plan and domains",
        ["policy", "job", "tenant", "state", "plan", "domains"],
    ),
    ("xds_queue_jobs", "jobs waiting", TENANT),
    ("xds_queue_oldest_wait_seconds", "how long the longest-waiting job has waited", TENANT),
    ("xds_study_time_seconds", "the study's clock", ["policy"]),
)
COUNTERS: tuple[tuple[str, str, list[str]], ...] = (
    ("xds_fault_detections", "faults detected so far", ["policy", "kind"]),
    ("xds_fault_recoveries", "jobs resumed after a fault", ["policy", "kind"]),
    ("xds_domain_outages", "times a domain stopped reporting", DOMAIN),
)


class StudyCollector(Collector):
    """Gauges and counters from the latest state of each policy's study."""

    def __init__(self, states: dict[str, dict]):
        self.states = states

    def collect(self) -> Iterable[Metric]:
        families = {
            name: GaugeMetricFamily(name, _help(ind), labels=DOMAIN)
            for ind, (name, _) in INDICATOR_METRICS.items()
        }
        g = {name: GaugeMetricFamily(name, text, labels=labels) for name, text, labels in GAUGES}
        c = {
            name: CounterMetricFamily(name, text, labels=labels) for name, text, labels in COUNTERS
        }
        for policy, s in self.states.items():
            self._domains(policy, s, families, g)
            self._jobs(policy, s, g)
            self._faults(policy, s, c)
            g["xds_study_time_seconds"].add_metric([policy], s["now_s"])
        yield from families.values()
        yield from g.values()
        yield from c.values()

    @staticmethod
    def _domains(policy: str, s: dict, families: dict, g: dict) -> None:
        for d in s["domains"]:
            key = [policy, d["name"]]
            for ind, value in d["indicators"].items():
                if value is not None:
                    name, factor = INDICATOR_METRICS[ind]
                    families[name].add_metric(key, value * factor)
            g["xds_domain_up"].add_metric([*key, d["accelerator"]], float(d["up"]))
            g["xds_domain_capacity_accelerators"].add_metric(key, d["total"])
            g["xds_domain_allocated_accelerators"].add_metric(key, d["allocated"])
        for link in s["links"]:
            key = [policy, link["a"], link["b"]]
            g["xds_link_bandwidth_bytes_per_second"].add_metric(key, link["bandwidth_gbps"] * GBIT)
            g["xds_link_leased_bandwidth_bytes_per_second"].add_metric(
                key, link["leased_gbps"] * GBIT
            )
            g["xds_link_rtt_seconds"].add_metric(key, link["rtt_ms"] / 1e3)

    @staticmethod
    def _jobs(policy: str, s: dict, g: dict) -> None:
        for j in s["jobs"]:
            key = [policy, j["name"], j["tenant"]]
            g["xds_job_info"].add_metric([*key, j["state"], j["plan"], "+".join(j["domains"])], 1.0)
            g["xds_job_progress_ratio"].add_metric(key, j["progress"])
            if j["state"] != "running":
                continue
            g["xds_job_steps_per_second"].add_metric(key, j["steps_per_s"])
            for field, name in (
                ("predicted_step_s", "xds_job_predicted_step_seconds"),
                ("measured_step_s", "xds_job_measured_step_seconds"),
            ):
                if j[field] is not None:
                    g[name].add_metric(key, j[field])
        waiting: dict[str, list[float]] = {j["tenant"]: [] for j in s["jobs"]}  # zeros too
        for q in s["queue"]:
            waiting.setdefault(q["tenant"], []).append(q["waited_s"])
        for tenant, waits in waiting.items():
            g["xds_queue_jobs"].add_metric([policy, tenant], len(waits))
            g["xds_queue_oldest_wait_seconds"].add_metric([policy, tenant], max(waits, default=0))

    @staticmethod
    def _faults(policy: str, s: dict, c: dict) -> None:
        detected = dict.fromkeys(FAULT_KINDS, 0)  # every kind, so a quiet study shows zeros
        recovered = dict.fromkeys(FAULT_KINDS, 0)
        for inc in s["faults"]["incidents"]:
            detected[inc["kind"]] += inc["detected_s"] is not None
            recovered[inc["kind"]] += inc["jobs_recovered"]
        for kind in detected:
            c["xds_fault_detections"].add_metric([policy, kind], detected[kind])
            c["xds_fault_recoveries"].add_metric([policy, kind], recovered[kind])
        outages: dict[str, int] = {}
        for o in s["faults"]["outages"]:
            outages[o["domain"]] = outages.get(o["domain"], 0) + 1
        for d in s["domains"]:
            c["xds_domain_outages"].add_metric([policy, d["name"]], outages.get(d["name"], 0))


class StudyMetrics:
    """The registry a board renders: the collector over the latest states, and the counters and
    histogram of every decision seen."""

    def __init__(self, states: dict[str, dict]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(StudyCollector(states))
        self.latency = Histogram(
            "xds_decision_latency_seconds",
            "time a policy took to decide, per logged decision",
            ["policy"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.decisions = Counter(
            "xds_decisions",
            "decisions logged, by what they did",
            ["policy", "action"],
            registry=self.registry,
        )

    def observe(self, policy: str, decisions: list[dict]) -> None:
        for d in decisions:
            self.decisions.labels(policy, d["action"]).inc()
            if d["action"] != Action.REQUEUE:  # the engine's, not a decision (as in reports)
                self.latency.labels(policy).observe(d["decision_ms"] / 1e3)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class EndpointMetrics:
    """Latency of each HTTP route of the Serve app, and how many agent steps each batch of
    forward passes of the policy answered (batching at work), in the replica that answered."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "xds_endpoint_latency_seconds",
            "time to answer a request, per route",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.batch_steps = Histogram(
            "xds_policy_batch_steps",
            "agent steps answered together (a forward pass per agent and graph size among them)",
            buckets=(1, 2, 4, 8, 16, 32),
            registry=self.registry,
        )

    def observe(self, endpoint: str, seconds: float) -> None:
        self.latency.labels(endpoint).observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)


@cache
def endpoint_metrics() -> EndpointMetrics:
    """The process's one EndpointMetrics. Serve ships the app's middleware to the replica by
    value, with copies of the module globals it names: a module-level instance there would not
    be the one the /metrics route reads, while this function is looked up by reference."""
    return EndpointMetrics()


def _help(indicator: str) -> str:
    dimension, unit, *_ = INDICATORS[indicator]
    return f"indicator {indicator} ({dimension}), reported in {unit}"
