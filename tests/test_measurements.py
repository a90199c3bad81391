from pathlib import Path

import pandas as pd
import pytest
import yaml

from xdscheduler.errors import UserError
from xdscheduler.network import measurements as m
from xdscheduler.scenario import parse_scenario

REGIONS = ["aws:a", "gcp:b", "azure:c"]
REAL = ["aws:us-east-1", "gcp:europe-west1-b", "azure:japaneast"]
# The real files' columns (2022-11 spells 'throughput_recieved').
THROUGHPUT_COLUMNS = (
    "src_region,src_tier,src_instance_class,dst_region,dst_tier,"
    "dst_instance_class,iperf3_connections,iperf3_runtime,tag,stdout_path,"
    "stderr_path,throughput_sent,throughput_received,cpu_utilization,success"
)
LATENCY_COLUMNS = (
    "src_region,src_tier,src_instance_class,dst_region,dst_tier,"
    "dst_instance_class,min_rtt,avg_rtt,max_rtt,mdev_rtt"
)


def _write(path: Path, columns: str, rows: list[dict]) -> None:
    frame = pd.DataFrame(rows).reindex(columns=columns.split(","))
    frame.fillna({"iperf3_connections": 64, "iperf3_runtime": 5}).to_csv(path, index=False)


def _throughput(path: Path, rows: list[tuple], later: bool = False) -> None:
    received = "throughput_recieved" if later else "throughput_received"
    _write(
        path,
        THROUGHPUT_COLUMNS.replace("throughput_received", received),
        [
            {
                "src_region": s,
                "dst_region": d,
                "src_tier": t,
                "dst_tier": t,
                received: gbps * 1e9,
                "throughput_sent": gbps * 1.05e9,
                "success": ok,
            }
            for s, d, gbps, t, ok in rows
        ],
    )


FIRST = [
    ("aws:a", "gcp:b", 4.0, "PREMIUM", True),
    ("aws:a", "gcp:b", 6.0, "PREMIUM", True),
    ("aws:a", "gcp:b", 50.0, "STANDARD", True),  # ignored: the pair has PREMIUM rows
    ("gcp:b", "aws:a", 3.0, "STANDARD", True),  # only STANDARD rows: used
    ("aws:a", "azure:c", 2.0, "PREMIUM", True),
    ("aws:a", "azure:c", 99.0, "PREMIUM", False),  # failed run: dropped
    ("azure:c", "aws:a", 2.0, "PREMIUM", True),  # same both ways: no bandwidth_gbps_ba
    ("azure:c", "gcp:b", 1.5, "PREMIUM", True),
]  # b->a only: used for the link
LATER = [
    ("aws:a", "gcp:b", 6.0, "PREMIUM", True),
    ("gcp:b", "aws:a", 3.3, "PREMIUM", True),
    ("aws:a", "azure:c", 2.02, "PREMIUM", True),
]
PING = [
    ("aws:a", "gcp:b", "PREMIUM", 79.0, 80.0),
    ("gcp:b", "aws:a", "PREMIUM", 83.0, 84.0),
    ("aws:a", "azure:c", "PREMIUM", 149.0, 150.0),
    ("aws:a", "azure:c", "STANDARD", 9.0, 10.0),  # ignored: PREMIUM exists
    ("azure:c", "gcp:b", "PREMIUM", 190.0, 200.0),
]


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    folder = tmp_path / "wan"
    folder.mkdir()
    _throughput(folder / m.THROUGHPUT, FIRST)
    _throughput(folder / m.THROUGHPUT_LATER, LATER, later=True)
    _write(
        folder / m.LATENCY,
        LATENCY_COLUMNS,
        [
            {
                "src_region": s,
                "dst_region": d,
                "src_tier": t,
                "dst_tier": t,
                "min_rtt": lo,
                "avg_rtt": avg,
            }
            for s, d, t, lo, avg in PING
        ],
    )
    return folder


def test_load_wan_takes_medians_of_successful_premium_runs(grid):
    w = m.load_wan(grid)
    assert w.regions == sorted(REGIONS)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert w.gbps[("gcp:b", "aws:a")] == pytest.approx(3.0)
    assert w.gbps[("aws:a", "azure:c")] == pytest.approx(2.0)
    assert w.gbps_later[("gcp:b", "aws:a")] == pytest.approx(3.3)
    assert w.rtt_ms[("aws:a", "azure:c")] == 150.0 and w.min_rtt_ms[("aws:a", "azure:c")] == 149
    assert w.drift[("aws:a", "gcp:b")] == pytest.approx(0.2)


def test_failed_runs_are_left_out_and_malformed_cells_named(grid, xds_log):
    """A run that moved nothing and a ping of no time are failed runs, not links of zero;
    success written 1/0 counts; files without tiers use every run; a cell that is not a
    number is named by file, row and column."""
    _throughput(grid / m.THROUGHPUT, [*FIRST, ("aws:a", "gcp:b", 0.0, "PREMIUM", True)])
    with xds_log.at_level("WARNING"):
        w = m.load_wan(grid)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert "left out 1 rows whose throughput_received is empty, zero or negative" in xds_log.text
    frame = pd.read_csv(grid / m.THROUGHPUT).drop(columns=["src_tier", "dst_tier"])
    frame["success"] = frame["success"].astype(str).eq("True").astype(int)
    frame.to_csv(grid / m.THROUGHPUT, index=False)
    assert m.load_wan(grid).gbps[("aws:a", "gcp:b")] == pytest.approx(6.0)  # 4, 6, 50: all tiers
    bad = frame.astype({"throughput_received": object})
    bad.loc[2, "throughput_received"] = "fast"
    bad.to_csv(grid / m.THROUGHPUT, index=False)
    with pytest.raises(UserError, match=r"2022-01\.csv: row 4, throughput_received: 'fast'"):
        m.load_wan(grid)
    frame.drop(columns="throughput_received").to_csv(grid / m.THROUGHPUT, index=False)
    with pytest.raises(UserError, match=r"no column throughput_received; a Skyplane CSV has"):
        m.load_wan(grid)


def test_links_per_pair_with_directions_rtt_and_drift(grid):
    doc = m.scenario_from_measurements(REGIONS, grid, nodes_per_domain=4, name="tiny")
    links = {(x["a"], x["b"]): x for x in doc["links"]}
    assert list(links) == [("aws-a", "gcp-b"), ("aws-a", "azure-c"), ("gcp-b", "azure-c")]
    ab = links[("aws-a", "gcp-b")]
    assert (ab["bandwidth_gbps"], ab["bandwidth_gbps_ba"], ab["rtt_ms"]) == (5.0, 3.0, 82.0)
    assert ab["fluctuation"] == pytest.approx(0.2)  # max of 5->6 (20%) and 3->3.3 (10%)
    ac = links[("aws-a", "azure-c")]
    assert ac["bandwidth_gbps"] == 2.0 and "bandwidth_gbps_ba" not in ac
    assert ac["fluctuation"] == m.MIN_FLUCTUATION  # 1% drift, clipped up
    bc = links[("gcp-b", "azure-c")]
    assert bc["bandwidth_gbps"] == 1.5 and "bandwidth_gbps_ba" not in bc  # only c->b measured
    assert bc["rtt_ms"] == 200.0 and bc["fluctuation"] == m.MAX_FLUCTUATION  # no 2022-11 run
    assert all("Skyplane" in x["source"] and "2022-01" in x["source"] for x in links.values())
    assert "Apache-2.0" in doc["description"] and "64 connections" in doc["description"]
    scn = parse_scenario(doc)
    assert scn.name == "tiny" and [d.name for d in scn.domains] == ["aws-a", "gcp-b", "azure-c"]
    assert [d.location.region for d in scn.domains] == REGIONS and scn.domains[0].gpus == 32
    assert scn.job().model == "llama2-70b"


@pytest.mark.parametrize(
    "regions,message",
    [
        (["aws:a"], "at least 2 regions, got 1"),
        (["aws:a", "aws:a"], "regions repeat"),
        (
            ["aws:a", "gcp:bb", "azure:cc"],
            r"'gcp:bb': did you mean gcp:b\?; 'azure:cc': did you "
            r"mean azure:c\?",
        ),
    ],
)
def test_bad_region_lists_are_explained(grid, regions, message):
    with pytest.raises(UserError, match=message):
        m.scenario_from_measurements(regions, grid)


def test_unmeasured_pair_is_named(grid):
    _throughput(grid / m.THROUGHPUT, [r for r in FIRST if r[0] != "azure:c" or r[1] != "gcp:b"])
    with pytest.raises(UserError, match="no throughput measured between gcp:b and azure:c"):
        m.scenario_from_measurements(REGIONS, grid)


def test_missing_file_is_named(grid):
    (grid / m.LATENCY).unlink()
    with pytest.raises(
        UserError,
        match=rf"{m.LATENCY} is missing: the folder must hold the "
        "Skyplane CSVs",
    ):
        m.load_wan(grid)


def test_written_scenario_round_trips_and_is_not_overwritten(grid, tmp_path):
    doc = m.scenario_from_measurements(REGIONS, grid)
    out = tmp_path / "s.yaml"
    m.write_scenario(doc, out)
    text = out.read_text()
    assert text.startswith("# Generated") and "Skyplane" in text.splitlines()[0]
    assert parse_scenario(yaml.safe_load(text)) == parse_scenario(doc)
    with pytest.raises(UserError, match="exists"):
        m.write_scenario({"name": "other"}, out)
    assert out.read_text() == text
    m.write_scenario({**doc, "name": "other"}, out, overwrite=True)
    assert "other" in out.read_text()
    with pytest.raises(UserError, match="domains"):  # never a scenario `xds run` would refuse
        m.write_scenario({"name": "other"}, out, overwrite=True)


def test_data_dir_from_environment(grid, monkeypatch):
    monkeypatch.setenv("XDS_DATA_DIR", str(grid.parent))
    assert m.default_data_dir() == grid
    monkeypatch.setenv("XDS_DATA_DIR", str(grid))  # no wan/ inside
    with pytest.raises(UserError, match="no wan/ folder"):
        m.default_data_dir()


def test_real_measurements():
    try:
        folder = m.default_data_dir()
    except UserError as err:
        pytest.skip(f"Skyplane data (shared/data/wan) not present: {err}")
    scn = parse_scenario(m.scenario_from_measurements(REAL, folder))
    assert [d.location.region for d in scn.domains] == REAL and len(scn.links) == 3
    for link in scn.links:
        for gbps in (link.bandwidth_gbps, link.bandwidth_gbps_ba or link.bandwidth_gbps):
            assert 0.05 <= gbps <= 30
        assert 1 <= link.rtt_ms <= 400 and 0.05 <= link.fluctuation <= 0.3
