import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xdscheduler.errors import UserError
from xdscheduler.network.geography import fibre_rtt_ms
from xdscheduler.scenario import load_scenario, parse_scenario
from xdscheduler.yamlfile import read_yaml

from .conftest import SCENARIOS


def _doc(default_scenario_path: Path) -> dict:
    return read_yaml(default_scenario_path)


def test_default_scenario_has_five_hubs_and_sane_links(default_scenario_path):
    scn = load_scenario(default_scenario_path)
    assert len(scn.domains) == 5 and len(scn.jobs) >= 5
    assert all(1 <= link.bandwidth_gbps <= 10 for link in scn.links)
    assert all(100 <= d.intra_domain_gbps <= 400 for d in scn.domains)


def test_default_rtts_follow_fibre_distance(default_scenario_path):
    scn = load_scenario(default_scenario_path)
    where = {d.name: d.location for d in scn.domains}
    for link in scn.links:
        a, b = where[link.a], where[link.b]
        assert link.rtt_ms == pytest.approx(fibre_rtt_ms(a.lat, a.lon, b.lat, b.lon), rel=0.05)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_is_valid(path):
    assert load_scenario(path).domains


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.update(colour="blue"), r"colour: unknown field"),
        (
            lambda d: d["domains"][1]["nodes"][0].update(accelerator="H1000"),
            r"domains\[1\]\.nodes\[0\]\.accelerator: unknown accelerator 'H1000'",
        ),
        (lambda d: d["links"][0].update(a="mars"), r"links\[0\] names unknown domain 'mars'"),
        (lambda d: d["links"][0].update(bandwidth_gbps=-1), r"links\[0\]\.bandwidth_gbps"),
        (lambda d: d["links"][0].update(fluctuation=0.5), r"links\[0\]\.fluctuation"),
        (lambda d: d["jobs"][0].update(model="gpt5"), r"jobs\[0\].*unknown model 'gpt5'"),
        (lambda d: d["jobs"][0].update(gpus={"min": 64, "max": 8}), r"min 64 is larger than max 8"),
        (lambda d: d["domains"].append(dict(d["domains"][0])), r"repeated: jjj"),
    ],
)
def test_bad_scenarios_name_the_field(default_scenario_path, mutate, message):
    doc = _doc(default_scenario_path)
    mutate(doc)
    with pytest.raises(UserError, match=message):
        parse_scenario(doc, "s.yaml")


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(UserError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("domains: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_scenario(bad)


def test_cli_reports_a_bad_file_with_status_2_and_no_traceback(tmp_path, default_scenario_path):
    doc = _doc(default_scenario_path)
    doc["domains"][0]["nodes"][0]["count"] = 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    run = subprocess.run(
        [sys.executable, "-m", "xdscheduler.cli", "plan", str(bad)], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "domains[0].nodes[0].count" in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_sailor_scenario_is_sailors_geo_setup_with_opt_350m():
    scn = load_scenario(SCENARIOS / "sailor_five_zones.yaml")
    zones = ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-west1-b"]
    assert [d.name for d in scn.domains] == [f"gcp-{z}" for z in zones]
    assert all(d.gpus == 32 and d.accelerator.name == "A100-40GB" for d in scn.domains)
    assert len(scn.links) == 10
    for link in scn.links:  # Sailor's profile: ~50 Gbit/s inside Iowa, < 10 to Oregon
        to_oregon = "gcp-us-west1-b" in (link.a, link.b)
        assert (link.bandwidth_gbps < 10) == to_oregon and (link.rtt_ms > 30) == to_oregon
    job = scn.job("opt-350m-sailor")
    assert (job.global_batch, job.gpus.min, job.gpus.max) == (1024, 8, 160)
    arch = job.arch
    assert arch.name == "opt-350m" and not arch.gated_mlp and arch.tied_embeddings
    assert (arch.layers, arch.hidden, arch.heads, arch.ffn_hidden, arch.vocab, arch.seq_len) == (
        24,
        1024,
        16,
        4096,
        50272,
        2048,
    )
    assert arch.params / 1e6 == pytest.approx(354, rel=0.01)
