"""Scenarios from measured inter-region bandwidth and RTT (the Skyplane measurement grid).

Skyplane (Jain et al., NSDI 2023; Apache-2.0) measured iperf3 throughput with 64 parallel
connections for 5 s between VMs in 63 AWS, GCP and Azure regions in January 2022, again in
November 2022, and ping RTTs in January 2022. A domain per chosen region gets the measured
bandwidth each way and the mean RTT; the drift between the two grids bounds the fluctuation.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from xdscheduler.errors import UserError
from xdscheduler.textfile import numeric_column, read_frame, write_atomic

log = logging.getLogger(__name__)

THROUGHPUT = "skyplane_throughput_2022-01.csv"
THROUGHPUT_LATER = "skyplane_throughput_2022-11.csv"
LATENCY = "skyplane_latency_2022-01.csv"
SOURCE = (
    "Skyplane inter-region measurements (github.com/skyplane-project/skyplane, "
    "Apache-2.0): iperf3, 64 connections, 5 s; throughput 2022-01 and 2022-11, "
    "ping RTT 2022-01"
)
MIN_FLUCTUATION, MAX_FLUCTUATION = 0.05, 0.3  # the scenario schema's bound on |epsilon|
PAIR = ["src_region", "dst_region"]
COLUMNS = {
    *PAIR,
    "src_tier",
    "dst_tier",
    "success",
    "throughput_received",
    "throughput_recieved",
    "min_rtt",
    "avg_rtt",
}  # 'recieved': sic in the 2022-11 file

Pair = tuple[str, str]


@dataclass(frozen=True)
class WanMeasurements:
    """Medians per directed (src_region, dst_region) pair: Gbit/s at two dates, RTT in ms."""

    gbps: pd.Series  # 2022-01
    gbps_later: pd.Series  # 2022-11, the same grid ten months on
    rtt_ms: pd.Series  # ping avg RTT
    min_rtt_ms: pd.Series  # ping min RTT
    source_dir: Path

    @property
    def regions(self) -> list[str]:
        pairs = self.gbps.index
        return sorted(set(pairs.get_level_values(0)) | set(pairs.get_level_values(1)))

    @property
    def drift(self) -> pd.Series:
        """|relative change| of throughput 2022-01 -> 2022-11, for pairs measured both times."""
        return (self.gbps_later / self.gbps - 1).abs().dropna()


def default_data_dir() -> Path:
    """The Skyplane folder: $XDS_DATA_DIR/wan, else shared/data/wan beside cwd or the repo."""
    return shared_data_dir(
        "wan", "the Skyplane CSVs", "pass --data DIR (the folder holding the Skyplane CSVs) or "
    )


def shared_data_dir(sub: str, holding: str, remedy: str = "") -> Path:
    """A folder of the public measurements: $XDS_DATA_DIR/`sub`, else shared/data/`sub` beside
    cwd or the repository. `holding` says what it should hold, `remedy` what else to try."""
    env = os.environ.get("XDS_DATA_DIR")
    if env:
        if not (Path(env) / sub).is_dir():
            raise UserError(f"XDS_DATA_DIR={env} has no {sub}/ folder with {holding}")
        return Path(env) / sub
    for path in (
        Path("../shared/data") / sub,
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / sub,
    ):
        if path.is_dir():
            return path
    raise UserError(
        f"no measurement folder found for {holding}: {remedy}set XDS_DATA_DIR to "
        f"the folder holding {sub}/"
    )


def _read(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise UserError(
            f"{path} is missing: the folder must hold the Skyplane CSVs "
            f"{THROUGHPUT}, {THROUGHPUT_LATER} and {LATENCY}"
        )
    frame = read_frame(path, "Skyplane CSV")
    if "throughput_received" in frame:  # the 2022-11 file spells it 'recieved'
        frame = frame.drop(columns="throughput_recieved", errors="ignore")
    frame = frame[[c for c in frame.columns if c in COLUMNS]]
    frame = frame.rename(columns={"throughput_recieved": "throughput_received"})
    values = ["avg_rtt", "min_rtt"] if path.name == LATENCY else ["throughput_received"]
    missing = [c for c in [*PAIR, *values] if c not in frame]
    if missing:
        raise UserError(
            f"{path}: no column {', '.join(missing)}; a Skyplane CSV has "
            f"{', '.join([*PAIR, *values])} (and src_tier, dst_tier, success where measured)"
        )
    for column in values:
        frame[column] = numeric_column(frame, column, path)
    return _measured_only(frame, values, path)


def _measured_only(frame: pd.DataFrame, values: list[str], path: Path) -> pd.DataFrame:
    """The rows whose values are measurements: a run that moved nothing, or a ping of no time,
    is a failed run (left out, with a warning naming how many), not a link of zero."""
    kept = frame[(frame[values] > 0).all(axis=1)]
    if len(kept) < len(frame):
        log.warning(
            "%s: left out %d rows whose %s is empty, zero or negative (failed runs)",
            path,
            len(frame) - len(kept),
            " or ".join(values),
        )
    return kept


def _per_pair(frame: pd.DataFrame, value: str) -> pd.Series:
    """Median per directed pair over successful runs, PREMIUM-tier only where a pair has some
    (every run counts where the file names no tiers)."""
    if "success" in frame:
        frame = frame[frame["success"].astype(str).str.lower().isin(("true", "1", "1.0", "yes"))]
    if {"src_tier", "dst_tier"} <= set(frame.columns):
        premium = (frame["src_tier"] == "PREMIUM") & (frame["dst_tier"] == "PREMIUM")
        has_premium = premium.groupby([frame[p] for p in PAIR]).transform("any")
        frame = frame[premium | ~has_premium]
    return frame.groupby(PAIR)[value].median()


def load_wan(data_dir: Path) -> WanMeasurements:
    """Read the three Skyplane CSVs in `data_dir` into per-pair medians."""
    data_dir = Path(data_dir)
    first, later, ping = (_read(data_dir / f) for f in (THROUGHPUT, THROUGHPUT_LATER, LATENCY))
    return WanMeasurements(
        gbps=_per_pair(first, "throughput_received") / 1e9,
        gbps_later=_per_pair(later, "throughput_received") / 1e9,
        rtt_ms=_per_pair(ping, "avg_rtt"),
        min_rtt_ms=_per_pair(ping, "min_rtt"),
        source_dir=data_dir,
    )


def _domain_name(region: str) -> str:
    return region.replace(":", "-").replace("_", "-")


def _close(name: str, known: list[str]) -> str:
    return ", ".join(difflib.get_close_matches(name, known, n=3, cutoff=0.5)) or "none close"


def _check_regions(regions: list[str], known: list[str]) -> None:
    if len(regions) < 2:
        raise UserError(f"a scenario needs at least 2 regions, got {len(regions)}")
    if len(set(regions)) != len(regions):
        raise UserError(f"regions repeat: {', '.join(regions)}")
    unknown = [r for r in regions if r not in known]
    if unknown:
        hints = "; ".join(f"{r!r}: did you mean {_close(r, known)}?" for r in unknown)
        raise UserError(
            f"region(s) not measured in {THROUGHPUT}: {hints} "
            f"({len(known)} regions known, written like 'aws:us-east-1')"
        )


def _get(series: pd.Series, pair: Pair) -> float | None:
    return float(series[pair]) if pair in series.index else None


def _pair(w: WanMeasurements, a: str, b: str) -> tuple[float, float | None, float, float | None]:
    """Bandwidth a->b and b->a (None if unmeasured), mean RTT, and the drift (None if unknown)."""
    ab, ba = _get(w.gbps, (a, b)), _get(w.gbps, (b, a))
    rtts = [r for r in (_get(w.rtt_ms, (a, b)), _get(w.rtt_ms, (b, a))) if r is not None]
    for what, series, missing in (
        ("throughput", w.gbps, ab is None and ba is None),
        ("RTT", w.rtt_ms, not rtts),
    ):
        if missing:
            partners = sorted(
                {d for s, d in series.index if s == a} | {s for s, d in series.index if d == a}
            )
            raise UserError(
                f"no {what} measured between {a} and {b} (either direction); "
                f"regions measured with {a} close to {b!r}: {_close(b, partners)}"
            )
    drift = w.drift
    change = [float(drift[p]) for p in ((a, b), (b, a)) if p in drift.index]
    bandwidth = next(x for x in (ab, ba) if x is not None)
    return bandwidth, ba, sum(rtts) / len(rtts), max(change, default=None)


def scenario_from_measurements(
    regions: list[str],
    data_dir: Path,
    accelerator: str = "H100-SXM",
    nodes_per_domain: int = 16,
    price_per_gb: float = 0.02,
    name: str | None = None,
) -> dict:
    """A scenario document (plain dict, valid for `parse_scenario`), one domain per region."""
    w = load_wan(data_dir)
    _check_regions(regions, w.regions)
    domains = [
        {
            "name": _domain_name(r),
            "location": {"region": r},
            "nodes": [{"accelerator": accelerator, "count": nodes_per_domain}],
            "intra_domain_gbps": 400,
        }
        for r in regions
    ]
    links = []
    for i, a in enumerate(regions):
        for b in regions[i + 1 :]:
            ab, ba, rtt, drift = _pair(w, a, b)
            # Not re-measured in 2022-11: assume the bound (a quarter of the grid drifted >30%).
            change = MAX_FLUCTUATION if drift is None else drift
            note = "2022-11 drift" if drift is not None else "no 2022-11 run: bound"
            link = {"a": _domain_name(a), "b": _domain_name(b), "bandwidth_gbps": round(ab, 3)}
            if ba is not None and round(ba, 3) != link["bandwidth_gbps"]:
                link["bandwidth_gbps_ba"] = round(ba, 3)
            link |= {
                "rtt_ms": round(rtt, 2),
                "price_per_gb": price_per_gb,
                "fluctuation": round(min(max(change, MIN_FLUCTUATION), MAX_FLUCTUATION), 3),
                "source": f"Skyplane iperf3+ping 2022-01 ({THROUGHPUT}, {LATENCY}); {note}",
            }
            links.append(link)
    return {
        "name": name or "measured_" + "_".join(_domain_name(r) for r in regions),
        "description": f"Domains at cloud regions {', '.join(regions)}; links from {SOURCE}.",
        "seed": 0,
        "domains": domains,
        "links": links,
        "jobs": [
            {
                "name": "llama2-70b-pretrain",
                "model": "llama2-70b",
                "global_batch": 1024,
                "tokens": 2.0e11,
                "gpus": {"min": 64, "max": 512},
            }
        ],
    }


def write_scenario(doc: dict, out: Path, overwrite: bool = False) -> None:
    """Write `doc` as YAML under a header naming the source; keep an existing file unless told."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists; pass --force (overwrite=True) to replace it")
    from xdscheduler.scenario import parse_scenario

    parse_scenario(doc, str(out))  # never a file that `xds run` would refuse
    header = f"# Generated by `xds scenario from-measurements` from {SOURCE}.\n"
    write_atomic(out, header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "scenario")
