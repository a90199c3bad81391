from pathlib import Path

import pandas as pd
import pytest
import yaml

from xdscheduler.errors import UserError
from xdscheduler.network import measurements as m
from xdscheduler.scenario import parse_scenario

REGIONS = ["aws:a", "gcp:b", "azure:c"]
REAL = ["aws:us-east-1", "gcp:europe-west1-b", "azure:japaneast"]
FIRST_GRID, LATER_GRID = "skyplane_throughput_2022-01.csv", "skyplane_throughput_2022-11.csv"
PING_GRID = "skyplane_latency_2022-01.csv"
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
    _throughput(folder / FIRST_GRID, FIRST)
    _throughput(folder / LATER_GRID, LATER, later=True)
    _write(
        folder / PING_GRID,
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
    assert w.rtt_ms[("aws:a", "azure:c")] == 150.0
    assert w.drift[("aws:a", "gcp:b")] == pytest.approx(0.2)


def test_failed_runs_are_left_out_and_malformed_cells_named(grid, xds_log):
    """A run that moved nothing and a ping of no time are failed runs, not links of zero;
    success written 1/0 counts; files without tiers use every run; a cell that is not a
    number is named by file, row and column."""
    _throughput(grid / FIRST_GRID, [*FIRST, ("aws:a", "gcp:b", 0.0, "PREMIUM", True)])
    with xds_log.at_level("WARNING"):
        w = m.load_wan(grid)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert "left out 1 rows whose throughput_received is empty, zero or negative" in xds_log.text
    frame = pd.read_csv(grid / FIRST_GRID).drop(columns=["src_tier", "dst_tier"])
    frame["success"] = frame["success"].astype(str).eq("True").astype(int)
    frame.to_csv(grid / FIRST_GRID, index=False)
    assert m.load_wan(grid).gbps[("aws:a", "gcp:b")] == pytest.approx(6.0)  # 4, 6, 50: all tiers
    bad = frame.astype({"throughput_received": object})
    bad.loc[2, "throughput_received"] = "fast"
    bad.to_csv(grid / FIRST_GRID, index=False)
    with pytest.raises(UserError, match=r"2022-01\.csv: row 4, throughput_received: 'fast'"):
        m.load_wan(grid)
    frame.drop(columns="throughput_received").to_csv(grid / FIRST_GRID, index=False)
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
    _throughput(grid / FIRST_GRID, [r for r in FIRST if r[0] != "azure:c" or r[1] != "gcp:b"])
    with pytest.raises(UserError, match="no throughput measured between gcp:b and azure:c"):
        m.scenario_from_measurements(REGIONS, grid)


def test_missing_file_is_named(grid):
    (grid / PING_GRID).unlink()
    with pytest.raises(UserError, match=r"wan has no skyplane_latency_\*\.csv: the Skyplane"):
        m.load_wan(grid)
    with pytest.raises(UserError, match=r"2022-01\.csv is a file, not a folder: the Skyplane"):
        m.load_wan(grid / FIRST_GRID)


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


def test_grids_of_any_date_are_read_in_date_order(grid):
    """Other dates than Skyplane's, sorted by the numbers of the date (2023-9 before 2023-10):
    the earliest grid gives the bandwidth, the newest the drift; with one grid no drift is
    known, and every link takes the bound."""
    (grid / FIRST_GRID).rename(grid / "skyplane_throughput_2023-9.csv")
    (grid / LATER_GRID).rename(grid / "skyplane_throughput_2023-10.csv")
    (grid / PING_GRID).rename(grid / "skyplane_latency_2023-9.csv")
    w = m.load_wan(grid)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert w.drift[("aws:a", "gcp:b")] == pytest.approx(0.2)
    doc = m.scenario_from_measurements(REGIONS, grid)
    assert doc["links"][0]["source"] == (
        "Skyplane iperf3+ping 2023-9 (skyplane_throughput_2023-9.csv, "
        "skyplane_latency_2023-9.csv); 2023-10 drift"
    )
    assert doc["description"].endswith("; throughput 2023-9 and 2023-10, ping RTT 2023-9.")
    (grid / "skyplane_throughput_2023-10.csv").unlink()
    doc = m.scenario_from_measurements(REGIONS, grid)
    assert {x["fluctuation"] for x in doc["links"]} == {m.MAX_FLUCTUATION}
    assert doc["links"][0]["source"].endswith("; no later run: bound")
    assert doc["description"].endswith("; throughput 2023-9, ping RTT 2023-9.")


def test_only_the_columns_used_are_required_and_tiers_match_in_any_case(grid):
    """A ping grid with avg_rtt alone is read; 'premium' is PREMIUM (the STANDARD rows of a
    pair with premium ones are still left out)."""
    ping = pd.read_csv(grid / PING_GRID)
    ping.drop(columns=["min_rtt", "max_rtt", "mdev_rtt"]).to_csv(grid / PING_GRID, index=False)
    for name in (FIRST_GRID, PING_GRID):
        frame = pd.read_csv(grid / name)
        frame[["src_tier", "dst_tier"]] = frame[["src_tier", "dst_tier"]].apply(
            lambda tier: tier.str.lower()
        )
        frame.to_csv(grid / name, index=False)
    w = m.load_wan(grid)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)  # 4, 6; not the STANDARD 50
    assert w.rtt_ms[("aws:a", "azure:c")] == 150.0  # not the STANDARD 10


def test_a_blank_success_is_unrecorded_and_kept(grid):
    """success blank: not recorded, the run counts (a run that moved nothing is still left
    out); a value that is neither yes nor no is named by file, row and column."""
    frame = pd.read_csv(grid / FIRST_GRID)
    frame["success"] = frame["success"].map({True: None, False: "no"})
    frame.to_csv(grid / FIRST_GRID, index=False)
    w = m.load_wan(grid)
    assert w.gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert w.gbps[("aws:a", "azure:c")] == pytest.approx(2.0)  # the failed 99 still dropped
    frame.loc[3, "success"] = "maybe"
    frame.to_csv(grid / FIRST_GRID, index=False)
    with pytest.raises(UserError, match=r"2022-01\.csv: row 5, success: 'maybe' is not a yes"):
        m.load_wan(grid)


@pytest.mark.parametrize(
    "name,column,scale,message",
    [
        (FIRST_GRID, "throughput_received", 1e-9, r"median of 3, implausible in bit/s"),
        (LATER_GRID, "throughput_recieved", 1e-6, r"median of 3300, implausible in bit/s"),
        (PING_GRID, "avg_rtt", 1e-3, r"median of 0.084, implausible in ms"),
    ],
)
def test_a_column_in_another_unit_is_refused_naming_file_and_column(
    grid, name, column, scale, message
):
    """Gbit/s (or Mbit/s) where bit/s is read, seconds where ms: refused before a scenario of
    links of a billionth of their speed is written."""
    frame = pd.read_csv(grid / name)
    frame[column] *= scale
    frame.to_csv(grid / name, index=False)
    column = column.replace("recieved", "received")  # read under its right spelling
    with pytest.raises(UserError, match=rf"{name}: {column} has a {message}"):
        m.load_wan(grid)


def _exported(text: str, variant: str) -> str:
    """A CSV's text as another tool exports it."""
    lines = text.splitlines()
    if variant == "semicolons, BOM, CRLF":
        return "\ufeff" + "\r\n".join(line.replace(",", ";") for line in lines) + "\r\n"
    if variant == "spreadsheet header":  # 'Src Region ', 'AVG_RTT', ... and ', ' between
        header = ", ".join(f"{c.replace('_', ' ').title()} " for c in lines[0].split(","))
        return "\n".join([header.upper() if "rtt" in text else header, *lines[1:]]) + "\n"
    return "\n".join([lines[0], *(line + "," for line in lines[1:])]) + "\n"  # row commas


@pytest.mark.parametrize(
    "variant", ["semicolons, BOM, CRLF", "spreadsheet header", "trailing comma on rows"]
)
def test_a_grid_exported_by_another_tool_reads_as_the_original(grid, variant):
    """Same measurements, other export habits: the same medians, never columns shifted by a
    trailing comma (pandas took the first for an index: bit/s read from the wrong column)."""
    before = m.load_wan(grid)
    for path in grid.iterdir():
        path.write_text(_exported(path.read_text(), variant), newline="")
    after = m.load_wan(grid)
    assert after.gbps.equals(before.gbps) and after.rtt_ms.equals(before.rtt_ms)


@pytest.mark.parametrize("value", ["inf", "-inf"])
def test_an_infinite_or_missing_measurement_is_refused_not_read(grid, value):
    """inf is not a measurement (it made a link of infinite bandwidth); a grid of its header
    alone is not an empty grid (it gave no link at all, without a word)."""
    frame = pd.read_csv(grid / FIRST_GRID).astype({"throughput_received": object})
    frame.loc[2, "throughput_received"] = value
    frame.to_csv(grid / FIRST_GRID, index=False)
    with pytest.raises(UserError, match=rf"row 4, throughput_received: '{value}' is not a finite"):
        m.load_wan(grid)
    frame.head(0).to_csv(grid / FIRST_GRID, index=False)
    with pytest.raises(UserError, match=r"2022-01\.csv: no data rows after the header line"):
        m.load_wan(grid)


def test_the_six_region_scenario_is_what_the_measurements_give(data_dir, tmp_path):
    """The shipped scenario is reproduced byte for byte by the command in its header."""
    regions = "aws:us-east-1,azure:westus,gcp:europe-west4-a,aws:eu-central-1,azure:japaneast"
    regions += ",gcp:asia-southeast1-a"
    doc = m.scenario_from_measurements(
        regions.split(","), data_dir / "wan", name="skyplane_six_regions"
    )
    m.write_scenario(doc, tmp_path / "six.yaml")
    shipped = (Path(__file__).parents[1] / "scenarios" / "skyplane_six_regions.yaml").read_text()
    assert (tmp_path / "six.yaml").read_text() in shipped


def test_grids_exported_under_other_case_are_found_and_twins_refused(grid):
    """A grid saved as Skyplane_Throughput_2022-01.CSV is the same grid; a folder holding it
    both so and in lower case is refused, naming both: either could be the one meant."""
    (grid / FIRST_GRID).rename(grid / FIRST_GRID.upper())
    assert m.load_wan(grid).gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert m.data_file(grid / FIRST_GRID) == grid / FIRST_GRID.upper()
    assert m.data_file(grid / "skyplane_x.csv") == grid / "skyplane_x.csv"  # none: as named
    (grid / FIRST_GRID).write_text((grid / FIRST_GRID.upper()).read_text())
    assert m.data_file(grid / FIRST_GRID) == grid / FIRST_GRID  # a file named: that one
    with pytest.raises(UserError, match=r"SKYPLANE_THROUGHPUT_2022-01\.CSV and .* differ only"):
        m.load_wan(grid)


def test_gzipped_grids_are_read_and_a_grid_both_plain_and_gzipped_is_refused(grid):
    """A Skyplane grid saved as .csv.gz reads as the plain one; a folder holding both is
    refused, naming both."""
    import gzip

    text = (grid / FIRST_GRID).read_bytes()
    (grid / f"{FIRST_GRID}.gz").write_bytes(gzip.compress(text))
    with pytest.raises(UserError, match=r"differ only in case or \.gz"):
        m.load_wan(grid)
    (grid / FIRST_GRID).unlink()
    assert m.load_wan(grid).gbps[("aws:a", "gcp:b")] == pytest.approx(5.0)
    assert m.data_file(grid / FIRST_GRID) == grid / f"{FIRST_GRID}.gz"
    assert m.snapshot_date(grid / f"{FIRST_GRID}.gz") == m.snapshot_date(grid / FIRST_GRID)
    from benchmarks.fit_truth import PAI_JOB  # the PAI jobs' files, gzipped too

    assert PAI_JOB.fullmatch("pai_minibatch_job_3_norm.csv.gz")[1] == "3"
