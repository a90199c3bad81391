"""Scenarios from measured inter-region bandwidth and RTT (the Skyplane measurement grid).

Skyplane (Jain et al., NSDI 2023; Apache-2.0) measured iperf3 throughput with 64 parallel
connections for 5 s between VMs in 63 AWS, GCP and Azure regions in January 2022, again in
November 2022, and ping RTTs in January 2022. A domain per chosen region gets the measured
bandwidth each way and the mean RTT; the drift between the two grids bounds the fluctuation.
A folder may hold other dates (`skyplane_throughput_<date>.csv`, `skyplane_latency_<date>.csv`):
the earliest throughput grid gives the bandwidth, the newest its drift, every ping grid the RTT.
"""

from __future__ import annotations

import difflib
import fnmatch
import glob
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from xdscheduler.errors import UserError
from xdscheduler.textfile import data_stem, numeric_column, read_frame, unzipped, write_atomic

log = logging.getLogger(__name__)

THROUGHPUT_FILES = "skyplane_throughput_*.csv"
LATENCY_FILES = "skyplane_latency_*.csv"
SKYPLANE = (
    "Skyplane inter-region measurements (github.com/skyplane-project/skyplane, "
    "Apache-2.0): iperf3, 64 connections, 5 s"
)
LINKS_FROM = "links from "  # in a scenario's description, before what they were measured by
MIN_FLUCTUATION, MAX_FLUCTUATION = 0.05, 0.3  # the range a measured drift is clipped to
PAIR = ["src_region", "dst_region"]
COLUMNS = {
    *PAIR,
    "src_tier",
    "dst_tier",
    "success",
    "throughput_received",
    "throughput_recieved",
    "avg_rtt",
}  # 'recieved': sic in the 2022-11 file
# A median run below these is a column in another unit (Gbit/s, seconds), not a measurement:
# the real grids' medians are 4.6 Gbit/s and 153 ms.
UNITS = {
    "throughput_received": ("bit/s", 1e6, "Gbit/s or Mbit/s"),
    "avg_rtt": ("ms", 1.0, "seconds"),
}
SUCCEEDED, FAILED = {"true", "t", "yes", "y", "1", "1.0"}, {"false", "f", "no", "n", "0", "0.0"}

Pair = tuple[str, str]


def snapshot_date(path: Path) -> str:
    """The date a Skyplane CSV's name gives: '2022-01' of skyplane_throughput_2022-01.csv."""
    return data_stem(path).split("_", 2)[-1]


@dataclass(frozen=True)
class WanMeasurements:
    """Medians per directed (src_region, dst_region) pair: Gbit/s at the earliest and newest
    throughput snapshot (None with one snapshot), RTT in ms; the files, earliest first."""

    gbps: pd.Series
    gbps_later: pd.Series | None
    rtt_ms: pd.Series  # ping avg RTT
    throughput_files: tuple[Path, ...]
    latency_files: tuple[Path, ...]

    @property
    def regions(self) -> list[str]:
        pairs = self.gbps.index
        return sorted(set(pairs.get_level_values(0)) | set(pairs.get_level_values(1)))

    @property
    def first_date(self) -> str:
        return snapshot_date(self.throughput_files[0])

    @property
    def later_date(self) -> str | None:
        return snapshot_date(self.throughput_files[-1]) if self.gbps_later is not None else None

    @property
    def drift(self) -> pd.Series:
        """|relative change| of throughput from the earliest snapshot to the newest, for pairs
        measured both times (none with one snapshot)."""
        if self.gbps_later is None:
            return pd.Series(dtype=float)
        return (self.gbps_later / self.gbps - 1).abs().dropna()

    @property
    def source(self) -> str:
        """What the measurements are, with the dates of the files read."""
        dates = [self.first_date, self.later_date]
        pings = ", ".join(snapshot_date(p) for p in self.latency_files)
        return f"{SKYPLANE}; throughput {' and '.join(filter(None, dates))}, ping RTT {pings}"

    def link_source(self, drift_known: bool) -> str:
        """A link's provenance: the files its bandwidth and RTT came from, and its drift's."""
        pings = [snapshot_date(p) for p in self.latency_files]
        runs = (
            f"iperf3+ping {pings[0]}"
            if pings == [self.first_date]
            else f"iperf3 {self.first_date}+ping {', '.join(pings)}"
        )
        files = ", ".join(p.name for p in (self.throughput_files[0], *self.latency_files))
        later = self.later_date
        note = f"{later} drift" if drift_known else f"no {later or 'later'} run: bound"
        return f"Skyplane {runs} ({files}); {note}"


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


def data_files(folder: Path, pattern: str) -> list[Path]:
    """The files in `folder` whose names match the glob `pattern`, case aside (VC6YE.csv for
    vc*.csv, an export's .CSV for *.csv), or match it gzipped (vc6YE.csv.gz), sorted; none
    where `folder` is not a folder. Two names equal but for case or `.gz` are refused: either
    could be the one meant."""
    if not folder.is_dir():
        return []
    pattern = pattern.lower()
    found = sorted(
        p
        for p in folder.iterdir()
        if any(fnmatch.fnmatchcase(name, pattern) for name in (p.name.lower(), _plain(p.name)))
    )
    names = [_plain(p.name) for p in found]
    twins = [p.name for p in found if names.count(_plain(p.name)) > 1]
    if twins:
        raise UserError(f"{folder}: {' and '.join(twins)} differ only in case or .gz: keep one")
    return found


def _plain(name: str) -> str:
    """A file's name as the data's readers match it: lower case, without `.gz`."""
    return unzipped(name).lower()


def data_file(path: Path) -> Path:
    """`path`, or the one file of its folder named so but for case or `.gz` (VC6YE.csv or
    vc6YE.csv.gz for vc6YE.csv); `path` itself where it is or none is (for the reader to say
    it is missing)."""
    if path.is_file():
        return path
    found = data_files(path.parent, glob.escape(path.name))
    return found[0] if found else path


def _snapshots(folder: Path, pattern: str) -> list[Path]:
    """The files matching `pattern` in `folder`, earliest first by the date in their names."""
    found = sorted(
        data_files(folder, pattern),
        key=lambda p: ([int(n) for n in re.findall(r"\d+", snapshot_date(p))], p.name),
    )
    if not found:
        where = (
            "is a file, not a folder"
            if folder.is_file()
            else f"has no {pattern}"
            if folder.is_dir()
            else "does not exist"
        )
        raise UserError(
            f"{folder} {where}: the Skyplane folder holds one or more throughput grids "
            f"{THROUGHPUT_FILES} and ping grids {LATENCY_FILES}, each dated in its name "
            "(e.g. skyplane_throughput_2022-01.csv)"
        )
    return found


def _read(path: Path, values: list[str]) -> pd.DataFrame:
    """The successful, measured runs of a Skyplane CSV, with the `values` columns as numbers."""
    frame = read_frame(path, "Skyplane CSV")
    if "throughput_received" in frame:  # the 2022-11 file spells it 'recieved'
        frame = frame.drop(columns="throughput_recieved", errors="ignore")
    frame = frame[[c for c in frame.columns if c in COLUMNS]]
    frame = frame.rename(columns={"throughput_recieved": "throughput_received"})
    missing = [c for c in [*PAIR, *values] if c not in frame]
    if missing:
        raise UserError(
            f"{path}: no column {', '.join(missing)}; a Skyplane CSV has "
            f"{', '.join([*PAIR, *values])} (and src_tier, dst_tier, success where measured)"
        )
    for column in values:
        frame[column] = numeric_column(frame, column, path)
    frame = _measured_only(frame[_succeeded(frame, path)], values, path)
    for column in values:
        _check_unit(frame[column], column, path)
    return frame


def _succeeded(frame: pd.DataFrame, path: Path) -> pd.Series:
    """Rows not marked as failed runs: a blank `success` is unrecorded, and the run is kept
    (a run that moved nothing is still left out by its value)."""
    if "success" not in frame:
        return pd.Series(True, index=frame.index)
    text = frame["success"].astype(str).str.strip().str.lower()
    unknown = ~text.isin(SUCCEEDED | FAILED) & frame["success"].notna() & text.ne("")
    if unknown.any():
        row = unknown.idxmax()
        raise UserError(
            f"{path}: row {int(row) + 2}, success: {frame['success'][row]!r} is not a yes or no; "
            "accepted: True/False, 1/0, yes/no (or blank: unrecorded)"
        )
    return ~text.isin(FAILED)


def _check_unit(values: pd.Series, column: str, path: Path) -> None:
    unit, floor, other = UNITS[column]
    median = values.median()
    if median < floor:  # NaN (no rows) passes
        raise UserError(
            f"{path}: {column} has a median of {median:g}, implausible in {unit}, the unit of "
            f"a Skyplane CSV (is it in {other}?): convert the column to {unit}"
        )


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


def _per_pair(frames: list[pd.DataFrame], value: str) -> pd.Series:
    """Median per directed pair over the runs, PREMIUM-tier only where a pair has some (every
    run counts where the file names no tiers)."""
    frame = pd.concat(frames, ignore_index=True)
    if {"src_tier", "dst_tier"} <= set(frame.columns):
        tier = [frame[t].astype(str).str.strip().str.upper() for t in ("src_tier", "dst_tier")]
        premium = (tier[0] == "PREMIUM") & (tier[1] == "PREMIUM")
        has_premium = premium.groupby([frame[p] for p in PAIR]).transform("any")
        frame = frame[premium | ~has_premium]
    return frame.groupby(PAIR)[value].median()


def load_wan(data_dir: Path) -> WanMeasurements:
    """Read the Skyplane CSVs in `data_dir` into per-pair medians: bandwidth of the earliest
    throughput grid, and of the newest where there are two or more; RTT of every ping grid."""
    data_dir = Path(data_dir)
    throughput = _snapshots(data_dir, THROUGHPUT_FILES)
    latency = _snapshots(data_dir, LATENCY_FILES)

    def gbps(path: Path) -> pd.Series:
        return _per_pair([_read(path, ["throughput_received"])], "throughput_received") / 1e9

    return WanMeasurements(
        gbps=gbps(throughput[0]),
        gbps_later=gbps(throughput[-1]) if len(throughput) > 1 else None,
        rtt_ms=_per_pair([_read(p, ["avg_rtt"]) for p in latency], "avg_rtt"),
        throughput_files=tuple(throughput),
        latency_files=tuple(latency),
    )


def _domain_name(region: str) -> str:
    return region.replace(":", "-").replace("_", "-")


def _close(name: str, known: list[str]) -> str:
    return ", ".join(difflib.get_close_matches(name, known, n=3, cutoff=0.5)) or "none close"


def _check_regions(regions: list[str], known: list[str], source: Path) -> None:
    if len(regions) < 2:
        raise UserError(f"a scenario needs at least 2 regions, got {len(regions)}")
    if len(set(regions)) != len(regions):
        raise UserError(f"regions repeat: {', '.join(regions)}")
    unknown = [r for r in regions if r not in known]
    if unknown:
        hints = "; ".join(f"{r!r}: did you mean {_close(r, known)}?" for r in unknown)
        raise UserError(
            f"region(s) not measured in {source.name}: {hints} "
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
    _check_regions(regions, w.regions, w.throughput_files[0])
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
            # Not in a later grid: assume the bound (a quarter of Skyplane's grid drifted >30%
            # in ten months).
            change = MAX_FLUCTUATION if drift is None else drift
            link = {"a": _domain_name(a), "b": _domain_name(b), "bandwidth_gbps": round(ab, 3)}
            if ba is not None and round(ba, 3) != link["bandwidth_gbps"]:
                link["bandwidth_gbps_ba"] = round(ba, 3)
            link |= {
                "rtt_ms": round(rtt, 2),
                "price_per_gb": price_per_gb,
                "fluctuation": round(min(max(change, MIN_FLUCTUATION), MAX_FLUCTUATION), 3),
                "source": w.link_source(drift is not None),
            }
            links.append(link)
    return {
        "name": name or "measured_" + "_".join(_domain_name(r) for r in regions),
        "description": f"Domains at cloud regions {', '.join(regions)}; {LINKS_FROM}{w.source}.",
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
    source = doc.get("description", "").partition(LINKS_FROM)[2]  # the measurements' dates
    header = f"# Generated by `xds scenario from-measurements` from {source}\n"
    write_atomic(out, header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "scenario")
