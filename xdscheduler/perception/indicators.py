"""The 12 indicators a domain reports, in 4 dimensions, each sample checked before it counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xdscheduler.scenario import Domain

# name -> (dimension, unit, lowest, highest): physical ranges outside which a sample is wrong.
INDICATORS: dict[str, tuple[str, str, float, float]] = {
    "compute_index": ("compute", "H100-equivalents", 0.0, 1e6),
    "free_accelerators": ("compute", "count", 0.0, 1e6),
    "utilization": ("compute", "fraction", 0.0, 1.0),
    "free_accelerator_memory": ("storage", "GiB", 0.0, 1e9),
    "storage_io": ("storage", "Gbit/s", 0.0, 1e6),
    "free_storage": ("storage", "TB", 0.0, 1e7),
    "intra_domain_bandwidth": ("network", "Gbit/s", 0.0, 3200.0),
    "inter_domain_bandwidth": ("network", "Gbit/s", 0.0, 1e4),
    "latency": ("network", "ms", 0.0, 2000.0),
    "health": ("state", "fraction", 0.0, 1.0),
    "load": ("state", "fraction", 0.0, 1.0),
    "power": ("state", "kW", 0.0, 1e6),
}
REFERENCE_TFLOPS = 989.4  # the compute index counts H100-SXM equivalents (dense BF16)
STALE_AFTER_S = 120.0  # two report intervals: older samples describe a state that has moved on


@dataclass(frozen=True)
class Sample:
    """One measured value with where it came from and when."""

    name: str
    value: float
    unit: str
    source: str
    time_s: float


def sample(name: str, value: float, source: str, time_s: float) -> Sample:
    return Sample(name, float(value), INDICATORS[name][1], source, time_s)


def domain_samples(
    domain: Domain,
    *,
    total: int,
    free: int,
    held: int,
    background: float,
    bandwidth_gbps: Sequence[float],
    rtt_ms: Sequence[float],
    healthy: bool,
    source: str,
    time_s: float,
) -> list[Sample]:
    """The 12 indicators of `domain`: `total` accelerators, `free` of them, `held` by this
    scheduler's jobs, `background` the share others' work takes; the bandwidth left and the
    round trip to each linked domain. Storage and the fabric inside are as the scenario says
    (what a study simulates and a live agent measures alike)."""
    acc, share = domain.accelerator, held / total if total else 0.0
    values = {
        "compute_index": total * acc.half_tflops / REFERENCE_TFLOPS,
        "free_accelerators": max(free, 0),
        "utilization": share,
        "free_accelerator_memory": max(free, 0) * acc.memory_gib,
        "storage_io": domain.storage.io_gbps,
        "free_storage": domain.storage.capacity_tb,
        "intra_domain_bandwidth": domain.intra_domain_gbps,
        "inter_domain_bandwidth": _mean(bandwidth_gbps),
        "latency": _mean(rtt_ms),
        "health": 1.0 if healthy else 0.0,
        "load": min(background + share, 1.0) if total else 1.0,
        "power": (held + round(background * total)) * acc.power_w / 1000,
    }
    return [sample(k, v, source, time_s) for k, v in values.items()]


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def checked(samples, now_s: float) -> tuple[list[Sample], list[str]]:
    """The samples that pass their checks, and a reason for each one rejected."""
    good, reasons = [], []
    for s in samples:
        why = rejection(s, now_s)
        if why is None:
            good.append(s)
        else:
            reasons.append(why)
    return good, reasons


def rejection(s: Sample, now_s: float) -> str | None:
    """Why a sample must not be used, or None when it is sound."""
    spec = INDICATORS.get(s.name)
    if spec is None:
        return f"unknown indicator {s.name!r}"
    _, unit, low, high = spec
    if s.unit != unit:
        return f"{s.name} in {s.unit!r}, expected {unit!r}"
    if not low <= s.value <= high:
        return f"{s.name} = {s.value:g} {unit} outside [{low:g}, {high:g}]"
    if now_s - s.time_s > STALE_AFTER_S:
        return f"{s.name} from {s.source} is {now_s - s.time_s:.0f} s old"
    return None
