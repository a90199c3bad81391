"""The slow-WAN giants benchmark's scenario and table (benchmarks/slow_wan_giants.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import slow_wan_giants as swg
from benchmarks._compare import change_cell
from xdscheduler.scenario import load_scenario

SKY = Path(__file__).resolve().parents[1] / "scenarios" / "skyplane_six_regions.yaml"


def test_every_link_is_slower_both_ways_and_nothing_else_moves(tmp_path):
    before, scn = load_scenario(SKY), load_scenario(swg.slower_wan(SKY, 50, tmp_path))
    assert scn.name == "skyplane_six_regions_wan_50x_slower" and scn.domains == before.domains
    assert len(scn.links) == len(before.links)
    for old, new in zip(before.links, scn.links, strict=True):
        assert new.bandwidth_gbps == pytest.approx(old.bandwidth_gbps / 50)
        if old.bandwidth_gbps_ba is not None:
            assert new.bandwidth_gbps_ba == pytest.approx(old.bandwidth_gbps_ba / 50)
        assert (new.rtt_ms, new.fluctuation, new.price_per_gb) == (
            old.rtt_ms,
            old.fluctuation,
            old.price_per_gb,
        )


def test_a_paired_change_reads_as_a_signed_percentage_with_its_interval():
    assert change_cell({"mean": -0.123, "half_width": 0.045, "significant": True}) == (
        "-12.3% ± 4.5%*"
    )
    assert change_cell({"mean": 0.01, "half_width": float("nan"), "significant": False}) == (
        "+1.0% ± 0.0%"
    )
    assert change_cell({"mean": None, "half_width": None, "significant": False}) == "–"


def test_a_file_that_is_not_a_scenario_ends_the_benchmark_with_a_clear_message(tmp_path):
    for path, says in (
        (tmp_path / "missing.yaml", r"missing \(no such file\)"),
        (Path(__file__), "not valid YAML"),
    ):
        with pytest.raises(SystemExit, match=r"error: .*" + says):
            swg.slower_wan(path, 50, tmp_path)
