"""Metering: what each job used, as usage records, every sample of the study and at its end.

A record covers one job's accelerators in one domain, or its WAN traffic, from the previous
record to now: the growth of the job's own meters (`JobRun.gpu_s`, `wan_gb`, `wan_cost`),
priced at the domain's price an accelerator-hour (WAN traffic is priced by its links as it
flows). Records are numbered in the order made; the engine is deterministic, so a study
replayed after a crash makes the same records with the same numbers, and a ledger keeps each
once (`runtime.ledger`). Their sums are the job's meters: a bill from the records reconciles
with the report to the cent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xdscheduler.sim.jobs import JobRun

ACCELERATORS, WAN = "accelerators", "wan"


@dataclass(frozen=True)
class Usage:
    index: int
    kind: str  # ACCELERATORS or WAN
    t0_s: float
    t1_s: float
    job: str
    tenant: str
    domain: str  # "" for WAN traffic
    accelerator: str  # its class; "" for WAN traffic
    quantity: float  # accelerator-seconds, or GB
    usd: float


@dataclass
class Metering:
    """The records made so far, and what each job's meters read at its last record."""

    names: list[str]
    classes: list[str]
    prices: list[float]  # $ an accelerator-hour per domain
    listener: Callable[[list[Usage]], None] | None = None  # each flush's records
    count: int = 0
    read: dict[str, dict] = field(default_factory=dict)  # job -> meter readings
    since: dict[str, float] = field(default_factory=dict)  # job -> when its next record starts
    touched: dict[str, JobRun] = field(default_factory=dict)  # jobs that held accelerators
    # since the last flush, by name (in the order they started)

    def touch(self, r: JobRun, now: float) -> None:
        """The job holds accelerators from `now`: its meters move until it gives them back; its
        next record starts now unless it already held some since the last flush."""
        if r.name not in self.touched:
            self.since[r.name] = now
        self.touched[r.name] = r

    def flush(self, now: float, active) -> None:
        """A record for every meter that moved since its job's last record; `active`: the jobs
        that hold accelerators now (their meters go on moving)."""
        made: list[Usage] = []
        for r in self.touched.values():
            last, t0 = self.read.setdefault(r.name, {}), self.since[r.name]
            for i, total in sorted(r.gpu_s.items()):
                delta = total - last.get(i, 0.0)
                if delta > 0:
                    made.append(
                        self._usage(
                            ACCELERATORS,
                            t0,
                            now,
                            r,
                            self.names[i],
                            self.classes[i],
                            delta,
                            delta / 3600 * self.prices[i],
                        )
                    )
                    last[i] = total
            gb, usd = r.wan_gb - last.get("gb", 0.0), r.wan_cost - last.get("usd", 0.0)
            if gb > 0 or usd > 0:
                made.append(self._usage(WAN, t0, now, r, "", "", gb, usd))
                last["gb"], last["usd"] = r.wan_gb, r.wan_cost
        self.touched = {r.name: r for r in active}
        for r in active:  # their next records start here
            self.since[r.name] = now
        if made and self.listener:
            self.listener(made)

    def _usage(self, kind, t0, t1, r, domain, accelerator, quantity, usd) -> Usage:
        self.count += 1
        return Usage(
            self.count - 1, kind, t0, t1, r.name, r.tenant, domain, accelerator, quantity, usd
        )
