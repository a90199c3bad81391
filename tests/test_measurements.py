from pathlib import Path

import pandas as pd
import pytest

from xdscheduler.errors import UserError
from xdscheduler.network import measurements as m
from xdscheduler.scenario import parse_scenario

REGIONS = ["aws:a", "gcp:b", "azure:c"]


def _throughput(rows, column="throughput_received"):
    return pd.DataFrame([
        {"src_region": s, "src_tier": t, "dst_region": d, "dst_tier": t, column: gbps * 1e9,
         "success": ok} for s, d, gbps, t, ok in rows])


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    first = [("aws:a", "gcp:b", 4.0, "PREMIUM", True), ("aws:a", "gcp:b", 6.0, "PREMIUM", True),
             ("aws:a", "gcp:b", 50.0, "STANDARD", True),  # ignored: PREMIUM rows exist
             ("gcp:b", "aws:a", 3.0, "STANDARD", True),  # only STANDARD: used
             ("aws:a", "azure:c", 2.0, "PREMIUM", True), ("aws:a", "azure:c", 99, "PREMIUM", False),
             ("gcp:b", "azure:c", 1.0, "PREMIUM", True)]
    later = [("aws:a", "gcp:b", 6.0, "PREMIUM", True), ("aws:a", "azure:c", 2.1, "PREMIUM", True)]
    _throughput(first).to_csv(tmp_path / m.THROUGHPUT, index=False)
    _throughput(later, "throughput_recieved").to_csv(tmp_path / m.THROUGHPUT_LATER, index=False)
    pd.DataFrame([
        {"src_region": s, "src_tier": "PREMIUM", "dst_region": d, "dst_tier": "PREMIUM",
         "avg_rtt": r} for s, d, r in [("aws:a", "gcp:b", 80.0), ("gcp:b", "aws:a", 84.0),
                                       ("aws:a", "azure:c", 150.0), ("gcp:b", "azure:c", 200.0)]
    ]).to_csv(tmp_path / m.LATENCY, index=False)
    return tmp_path


def test_links_take_medians_per_direction_and_prefer_premium(grid):
    doc = m.scenario_from_measurements(REGIONS, grid)
    links = {(x["a"], x["b"]): x for x in doc["links"]}
    ab = links[("aws-a", "gcp-b")]
    assert ab["bandwidth_gbps"] == 5.0 and ab["bandwidth_gbps_ba"] == 3.0
    assert ab["rtt_ms"] == 82.0
    assert ab["fluctuation"] == pytest.approx(0.2)  # 5 -> 6 Gbit/s between the two dates
    assert links[("aws-a", "azure-c")]["bandwidth_gbps"] == 2.0  # the failed run is dropped
    assert links[("aws-a", "azure-c")]["fluctuation"] == m.MIN_FLUCTUATION
    assert links[("gcp-b", "azure-c")]["fluctuation"] == m.MAX_FLUCTUATION  # no later data
    scn = parse_scenario(doc)
    assert [d.location.region for d in scn.domains] == REGIONS


@pytest.mark.parametrize("regions,message", [
    (["aws:a"], "at least 2 regions"),
    (["aws:a", "gcp:bb"], "'gcp:bb' was not measured; did you mean gcp:b"),
    (["aws:a", "aws:a"], "regions repeat"),
])
def test_bad_region_lists_are_explained(grid, regions, message):
    with pytest.raises(UserError, match=message):
        m.scenario_from_measurements(regions, grid)


def test_missing_file_is_named(grid):
    (grid / m.LATENCY).unlink()
    with pytest.raises(UserError, match=r"skyplane_latency_2022-01\.csv is missing"):
        m.load_wan(grid)


def test_existing_output_is_not_overwritten(grid, tmp_path):
    out = tmp_path / "s.yaml"
    out.write_text("keep me")
    with pytest.raises(UserError, match="exists"):
        m.write_scenario(m.scenario_from_measurements(REGIONS, grid), out)
    assert out.read_text() == "keep me"


def test_real_measurements(data_dir):
    doc = m.scenario_from_measurements(["aws:us-east-1", "gcp:europe-west1-b",
                                        "azure:japaneast"], data_dir / "wan")
    scn = parse_scenario(doc)
    assert len(scn.links) == 3
    for link in scn.links:
        assert 0.05 <= link.bandwidth_gbps <= 30 and 1 <= link.rtt_ms <= 400
