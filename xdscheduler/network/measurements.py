"""Scenarios from measured inter-region bandwidth and RTT (the Skyplane measurement grid).

Skyplane (Jain et al., NSDI 2023; Apache-2.0) measured iperf3 throughput with 64 parallel
connections for 5 s between VMs in 63 AWS, GCP and Azure regions in January 2022, again in
November 2022, and ping RTTs in January 2022. A domain per chosen region gets the measured
bandwidth each way and the mean RTT; the drift between the two grids bounds the fluctuation.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from xdscheduler.errors import UserError

THROUGHPUT = "skyplane_throughput_2022-01.csv"
THROUGHPUT_LATER = "skyplane_throughput_2022-11.csv"
LATENCY = "skyplane_latency_2022-01.csv"
SOURCE = ("Skyplane inter-region measurements (Apache-2.0): iperf3, 64 connections, 5 s; "
          "throughput 2022-01 and 2022-11, ping RTT 2022-01")
MIN_FLUCTUATION, MAX_FLUCTUATION = 0.05, 0.3  # the scenario schema's bound on |epsilon|


@dataclass(frozen=True)
class WanMeasurements:
    """Per directed region pair: Gbit/s (two dates) and RTT in ms."""

    gbps: pd.Series
    gbps_later: pd.Series
    rtt_ms: pd.Series
    source_dir: Path

    @property
    def regions(self) -> list[str]:
        pairs = self.gbps.index
        return sorted(set(pairs.get_level_values(0)) | set(pairs.get_level_values(1)))


def default_data_dir() -> Path:
    """The Skyplane folder: $XDS_DATA_DIR/wan, or shared/data/wan beside the repository."""
    env = os.environ.get("XDS_DATA_DIR")
    candidates = [Path(env) / "wan"] if env else []
    candidates += [Path("../shared/data/wan"),
                   Path(__file__).resolve().parents[2].parent / "shared" / "data" / "wan"]
    for path in candidates:
        if path.is_dir():
            return path
    raise UserError("no measurement folder found: pass --data DIR (the folder holding the "
                    "Skyplane CSVs) or set XDS_DATA_DIR")


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(f"{path} is missing: the folder must hold the Skyplane CSVs "
                        f"{THROUGHPUT}, {THROUGHPUT_LATER} and {LATENCY}")
    return pd.read_csv(path)


def _per_pair(frame: pd.DataFrame, value: str) -> pd.Series:
    """Median per directed pair, from PREMIUM-tier rows where a pair has them."""
    frame = frame[frame["success"].astype(str).str.lower() == "true"] if "success" in frame \
        else frame
    premium = (frame["src_tier"] == "PREMIUM") & (frame["dst_tier"] == "PREMIUM")
    pairs = ["src_region", "dst_region"]
    has_premium = premium.groupby([frame[p] for p in pairs]).transform("any")
    return frame[premium | ~has_premium].groupby(pairs)[value].median()


def load_wan(data_dir: Path) -> WanMeasurements:
    data_dir = Path(data_dir)
    first = _read(data_dir / THROUGHPUT)
    later = _read(data_dir / THROUGHPUT_LATER).rename(
        columns={"throughput_recieved": "throughput_received"})  # sic in the 2022-11 file
    rtt = _read(data_dir / LATENCY)
    return WanMeasurements(
        gbps=_per_pair(first, "throughput_received") / 1e9,
        gbps_later=_per_pair(later, "throughput_received") / 1e9,
        rtt_ms=_per_pair(rtt.assign(success=True), "avg_rtt"),
        source_dir=data_dir,
    )


def _domain_name(region: str) -> str:
    return region.replace(":", "-").replace("_", "-")


def _check_regions(regions: list[str], known: list[str]) -> None:
    if len(regions) < 2:
        raise UserError(f"a scenario needs at least 2 regions, got {len(regions)}")
    if len(set(regions)) != len(regions):
        raise UserError(f"regions repeat: {', '.join(regions)}")
    for region in regions:
        if region not in known:
            close = difflib.get_close_matches(region, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UserError(f"region {region!r} was not measured{hint} "
                            f"({len(known)} regions known, e.g. {', '.join(known[:3])})")


def _pair(w: WanMeasurements, a: str, b: str) -> tuple[float, float | None, float, float]:
    """Bandwidth a->b and b->a, RTT, and the relative drift between the two dates."""
    ab, ba = w.gbps.get((a, b)), w.gbps.get((b, a))
    if ab is None and ba is None:
        raise UserError(f"no throughput measured between {a} and {b}")
    ab = ab if ab is not None else ba
    rtts = [w.rtt_ms.get(p) for p in ((a, b), (b, a)) if w.rtt_ms.get(p) is not None]
    if not rtts:
        raise UserError(f"no RTT measured between {a} and {b}")
    drift = [abs(w.gbps_later[p] / w.gbps[p] - 1) for p in ((a, b), (b, a))
             if p in w.gbps.index and p in w.gbps_later.index]
    change = max(drift) if drift else MAX_FLUCTUATION
    return (float(ab), None if ba is None else float(ba), float(sum(rtts) / len(rtts)),
            float(change))


def scenario_from_measurements(regions: list[str], data_dir: Path,
                               accelerator: str = "H100-SXM", nodes_per_domain: int = 16,
                               price_per_gb: float = 0.02, name: str | None = None) -> dict:
    """A scenario document (valid for `parse_scenario`) with one domain per region."""
    w = load_wan(data_dir)
    _check_regions(regions, w.regions)
    domains = [{"name": _domain_name(r), "location": {"region": r},
                "nodes": [{"accelerator": accelerator, "count": nodes_per_domain}],
                "intra_domain_gbps": 400} for r in regions]
    links = []
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            ab, ba, rtt, change = _pair(w, a, b)
            link = {"a": _domain_name(a), "b": _domain_name(b), "bandwidth_gbps": round(ab, 3),
                    "rtt_ms": round(rtt, 2), "price_per_gb": price_per_gb,
                    "fluctuation": round(min(max(change, MIN_FLUCTUATION), MAX_FLUCTUATION), 3),
                    "source": f"Skyplane {THROUGHPUT} / {LATENCY}; drift vs {THROUGHPUT_LATER}"}
            if ba is not None and abs(ba - ab) > 1e-9:
                link["bandwidth_gbps_ba"] = round(ba, 3)
            links.append(link)
    return {
        "name": name or "measured_" + "_".join(_domain_name(r) for r in regions),
        "description": f"Domains at cloud regions {', '.join(regions)}; links from {SOURCE}.",
        "seed": 0,
        "domains": domains,
        "links": links,
        "jobs": [{"name": "llama2-70b-pretrain", "model": "llama2-70b", "global_batch": 1024,
                  "tokens": 2.0e11, "gpus": {"min": 64, "max": 512}}],
    }


def write_scenario(doc: dict, out: Path, overwrite: bool = False) -> None:
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists; pass --force to overwrite it")
    header = f"# Generated by `xds scenario from-measurements` from {SOURCE}.\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
