"""A domain's agent: a Ray actor on a node of its domain (pinned there by label) that answers the
controller's heartbeats and, on every report, says what its domain has now: its alive nodes and
their free CPUs and GPUs (Ray's own accounting), the bandwidth its uplink sent to every other
domain since the last report (the token bucket's counters: the WAN samples) and the round trip
to each, the jobs it hosts, and its demand for the next 10 minutes and hour, asked of the policy
app's `POST /forecast`. `indicators` turns a report into the 12 indicators a study's domain
reports (`perception.indicators`)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import ray

from xdscheduler.forecast.service import ForecastRequest, KnownJobIn
from xdscheduler.live.fabric import LINK_CLASS_BASE, WIRE_PER_PAYLOAD
from xdscheduler.live.state import DOMAIN_LABEL
from xdscheduler.perception.indicators import Sample, domain_samples
from xdscheduler.scenario import Domain

if TYPE_CHECKING:
    from xdscheduler.serving.client import ForecastClient

HISTORY_MIN = 24 * 60  # a day of minutes: what a forecast is sent at most
CLASS = re.compile(r"class htb 1:(\d+) .*?rate (\S+?)bit.*?\n\s*Sent (\d+) bytes", re.S)
UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def link_counters(tc_text: str, domains: list[str]) -> dict[str, tuple[float, int]]:
    """Per destination domain, the link's rate (Gbit/s of goodput) and the wire bytes sent so
    far, from `tc -s class show` of a domain's uplink (a class per link, `fabric`)."""
    out = {}
    for cls, rate, sent in CLASS.findall(tc_text):
        j = int(cls) - LINK_CLASS_BASE
        if 0 <= j < len(domains):
            bits = float(rate[:-1]) * UNITS[rate[-1]] if rate[-1] in UNITS else float(rate)
            out[domains[j]] = (bits / 1e9 / WIRE_PER_PAYLOAD, int(sent))
    return out


class DemandHistory:
    """The accelerators a domain's jobs hold, a mean per minute, oldest first."""

    def __init__(self) -> None:
        self.minutes: list[float] = []
        self.current: tuple[int, float, int] | None = None  # minute, sum of samples, count

    def add(self, now_s: float, held: int) -> None:
        minute = int(now_s // 60)
        if self.current and self.current[0] == minute:
            _, total, n = self.current
            self.current = (minute, total + held, n + 1)
            return
        if self.current:
            last, total, n = self.current
            # a minute without samples (the agent was away) holds the last minute's mean
            self.minutes += [total / n] * min(minute - last, HISTORY_MIN)
            del self.minutes[:-HISTORY_MIN]
        self.current = (minute, float(held), 1)

    def series(self) -> list[float]:
        """Every full minute, then the minute under way."""
        return [*self.minutes, self.current[1] / self.current[2]] if self.current else []


# A heartbeat never waits behind a report (Ray's state, tc, an HTTP forecast: a second under
# load, when two missed 0.4 s pings find the domain down): each has a thread of its own.
@ray.remote(num_cpus=0, concurrency_groups={"heartbeat": 1, "report": 1, "links": 1})  # type: ignore[call-overload]
class DomainAgent:
    def __init__(
        self, name: str, domains: list[str], api: str | None = None, token: str | None = None
    ):
        from xdscheduler.serving.client import ForecastClient

        self.name, self.domains = name, domains
        # this worker's parent is its node's raylet: once the raylet is gone the node is lost,
        # though the worker answers for a few seconds more (until it notices)
        self.raylet = os.getppid()
        self.forecaster = ForecastClient(api, token) if api else None
        self.demand = DemandHistory()
        self.sent: tuple[float, dict[str, int]] | None = None  # the last report's counters
        self.forecast: tuple[tuple, dict] | None = None  # (what it was asked on, the answer)

    @ray.method(concurrency_group="heartbeat")
    def ping(self) -> float:
        if os.getppid() != self.raylet:
            raise RuntimeError(f"domain {self.name}: the node's raylet is gone")
        return time.time()

    @ray.method(concurrency_group="report")
    def report(self, hosted: list[dict]) -> dict:
        """The domain now. `hosted`: the jobs with workers here, each with `job`, `workers`
        (here) and `finish_min` (None while unknown), as the controller knows them."""
        now = time.time()
        held = sum(j["workers"] for j in hosted)
        self.demand.add(now, held)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        return {
            "domain": self.name,
            "time": now,
            **self._nodes(nodes),
            "held": held,
            "jobs": hosted,
            "links": self._links(now),
            "rtt_ms": self._rtts(nodes),
            **self._forecast(hosted),
        }

    @ray.method(concurrency_group="links")
    def link_rates(self) -> dict[str, float]:
        """Per link out of this domain, its rate now (Gbit/s): a read of the token buckets,
        quick however busy the links are (a report's round trips wait behind their bytes)."""
        return {dst: rate for dst, (rate, _) in self._counters().items()}

    def _nodes(self, alive: list[dict]) -> dict:
        """Alive nodes of this domain; total and free CPUs and GPUs as Ray accounts them."""
        from ray._private.state import available_resources_per_node

        nodes = [n for n in alive if n.get("Labels", {}).get(DOMAIN_LABEL) == self.name]
        free = available_resources_per_node()
        total = [n["Resources"] for n in nodes]
        avail = [free.get(n["NodeID"], {}) for n in nodes]
        return {
            "nodes": len(nodes),
            **{f"{k.lower()}s": int(sum(r.get(k, 0) for r in total)) for k in ("CPU", "GPU")},
            **{f"free_{k.lower()}s": int(sum(r.get(k, 0) for r in avail)) for k in ("CPU", "GPU")},
        }

    def _links(self, now: float) -> list[dict]:
        """Per link out of this domain: its rate, the goodput sent over it since the last
        report and in all (empty where the links are not shaped here: a cluster this did not
        build)."""
        counters = self._counters()
        last, self.sent = self.sent, (now, {d: c[1] for d, c in counters.items()})
        rows = []
        for dst, (rate, sent) in counters.items():
            gbps = None
            if last and dst in last[1] and now > last[0]:
                gbps = (sent - last[1][dst]) * 8 / (now - last[0]) / 1e9 / WIRE_PER_PAYLOAD
            rows.append(
                {
                    "dst": dst,
                    "rate_gbps": rate,
                    "sent_gbps": gbps,
                    "sent_total_gb": sent / 1e9 / WIRE_PER_PAYLOAD,
                }
            )
        return rows

    def _counters(self) -> dict[str, tuple[float, int]]:
        """`link_counters` of this node's uplink; {} where tc or the buckets are absent."""
        try:
            done = subprocess.run(
                ["tc", "-s", "class", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except (OSError, subprocess.TimeoutExpired):  # no tc on this node
            return {}
        return link_counters(done.stdout, self.domains) if not done.returncode else {}

    def _rtts(self, alive: list[dict]) -> dict[str, float]:
        """Per other domain, the round trip to one of its nodes (ms): the quickest of three
        TCP handshakes with its raylet, one round trip each."""
        out = {}
        for n in alive:
            dst = n.get("Labels", {}).get(DOMAIN_LABEL)
            if dst in (None, self.name) or dst in out:
                continue
            took = []
            for _ in range(3):
                start = time.perf_counter()
                try:
                    socket.create_connection(
                        (n["NodeManagerAddress"], n["NodeManagerPort"]), timeout=1
                    ).close()
                except OSError:
                    continue
                took.append((time.perf_counter() - start) * 1000)
            if took:
                out[dst] = min(took)
        return out

    def _forecast(self, hosted: list[dict]) -> dict:
        """This domain's demand forecast by the policy app, from its history and the jobs it
        hosts (each frees its workers when it finishes): asked again once a minute, or when
        its jobs change (the history is a mean per minute; the app's work is a domain's
        accelerators' time on this machine)."""
        if self.forecaster is None:
            return {"forecast": None}
        asked_on = (
            len(self.demand.minutes),
            tuple(sorted((j["job"], j["workers"]) for j in hosted)),
        )
        if self.forecast and self.forecast[0] == asked_on:
            return self.forecast[1]
        self.forecast = (asked_on, self._ask_forecast(self.forecaster, hosted))
        return self.forecast[1]

    def _ask_forecast(self, client: ForecastClient, hosted: list[dict]) -> dict:
        known = [
            KnownJobIn(name=j["job"], gpus=j["workers"], finish_min=j["finish_min"])
            for j in hosted
            if j["finish_min"] is not None
        ]
        request = ForecastRequest(
            history=self.demand.series(), step_min=1, known_jobs=known, series=f"live-{self.name}"
        )
        try:
            answer = client.answer(request)
        except Exception as err:  # the app away: the report goes on without a forecast
            return {"forecast": None, "forecast_error": f"{type(err).__name__}: {err}"}
        return {
            "forecast": [
                {"horizon_min": h.horizon_min, "mean": h.mean, "hi95": h.hi95}
                for h in answer.horizons
            ],
            "backup_pool_gpus": answer.backup_pool_gpus,
        }


def indicators(report: dict, domain: Domain, probed: dict[str, float]) -> list[Sample]:
    """The 12 indicators of a live domain from its agent's report: accelerators as Ray counts
    them (CPUs for a CPU domain), each link's bandwidth left (its last probe, else its bucket's
    rate, less what the domain sends over it now) and round trip as measured; storage and the
    fabric inside the domain as its scenario says (nothing here measures them). `probed`:
    destination domain -> Gbit/s of the last `xds links probe` from this domain."""
    kind = "cpus" if domain.accelerator.vendor == "CPU" else "gpus"
    left = [
        max(probed.get(r["dst"], r["rate_gbps"]) - (r["sent_gbps"] or 0.0), 0.0)
        for r in report["links"]
    ]
    return domain_samples(
        domain,
        total=report[kind],
        free=report[f"free_{kind}"],
        held=report["held"],
        background=0.0,
        bandwidth_gbps=left,
        rtt_ms=list(report["rtt_ms"].values()),
        healthy=bool(report["nodes"]),
        source=f"agent:{domain.name}",
        time_s=report["time"],
    )
