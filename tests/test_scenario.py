import logging
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
        (
            lambda d: d["domains"][2].update(name="Zhang jiakou"),
            r"domains\[2\]\.name: 'Zhang jiakou' is not accepted: a name takes only letters "
            r"A-Z a-z, digits, '_', '\.' and '-'; e\.g\. 'Zhang-jiakou'",
        ),
        (lambda d: d["domains"][2].update(name="Zhāngjiākǒu"), r"e\.g\. 'Zhangjiakou'$"),
        (lambda d: d["links"][0].update(a="mars"), r"links\[0\] names unknown domain 'mars'"),
        (lambda d: d["links"][0].update(bandwidth_gbps=-1), r"links\[0\]\.bandwidth_gbps"),
        (
            lambda d: d["links"][0].update(fluctuation=1.0),
            r"links\[0\]\.fluctuation: Input should be less than or equal to 0\.9",
        ),
        (lambda d: d["jobs"][0].update(model="gpt5"), r"jobs\[0\].*unknown model 'gpt5'"),
        (lambda d: d["jobs"][0].update(gpus={"min": 64, "max": 8}), r"min 64 is larger than max 8"),
        (lambda d: d["domains"].append(dict(d["domains"][0])), r"repeated: jjj"),
        (lambda d: d["jobs"].append(dict(d["jobs"][0])), r"job names must be unique; repeated"),
        (
            lambda d: d["jobs"][0].update(
                model=None,
                architecture={
                    "layers": 2,
                    "hidden": 100,
                    "ffn_hidden": 400,
                    "heads": 7,
                    "vocab": 64,
                },
            ),
            r"^s\.yaml: jobs\[0\]: model '.*': hidden 100 is not divisible by heads 7$",
        ),
        (
            lambda d: d.update(workload={"load": 0.5, "min_gpus": 100_000}),
            r"^s\.yaml: workload\.min_gpus: 100000 is more than the \d+ accelerators",
        ),
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
    bad.write_text("# nothing but a comment\n")
    with pytest.raises(UserError, match=r"bad\.yaml: the file is empty"):
        load_scenario(bad)


TWO_DOMAINS = {
    "name": "two",
    "domains": [
        {"name": n, "location": {"city": n}, "nodes": [{"accelerator": "H100-SXM", "count": 8}]}
        for n in ("a", "b")
    ],  # 64 accelerators each, not linked
}


@pytest.mark.parametrize(
    "job,why",
    [
        ({"model": "gpt3-350m", "gpus": {"min": 256, "max": 256}}, "at least 256, and 128 are"),
        (
            {"model": "gpt3-350m", "gpus": {"min": 96, "max": 128}},
            r"more than any group of linked domains has free \(64\)",
        ),
        (
            {"model": "llama3.1-405b", "gpus": {"min": 1, "max": 4}},
            r"leanest plan .* needs \d+ GiB an accelerator, more than the 80 GiB",
        ),
        (  # uneven plans searched too: at most 4 replicas × 2 stages
            {
                "architecture": {
                    "layers": 2,
                    "hidden": 64,
                    "ffn_hidden": 256,
                    "heads": 1,
                    "kv_heads": 1,
                    "vocab": 1000,
                },
                "global_batch": 4,
                "gpus": {"min": 16, "max": 16},
            },
            "no parallel plan of 16-16 accelerators splits its global batch of 4",
        ),
    ],
)
def test_a_listed_job_no_plan_can_run_is_refused_before_the_study_saying_why(job, why):
    from xdscheduler.sim.inputs import listed_jobs, study_jobs

    doc = {**TWO_DOMAINS, "jobs": [{"name": "j", "global_batch": 512, "tokens": 1e9, **job}]}
    scn = parse_scenario(doc, "s.yaml")
    for check in (lambda: listed_jobs(scn), lambda: study_jobs(scn, 3, 0)):
        with pytest.raises(UserError, match=rf"^two: jobs\[0\] \(j\): no policy could .*{why}"):
            check()


# 61 layers (prime: no pipeline degree up to 32 divides them) and a batch of 1530 on exactly
# 64 accelerators (no data degree of 8-64 divides 1530): only uneven plans run it.
UNEVEN_ONLY = {
    "name": "prime",
    "architecture": {
        "layers": 61,
        "hidden": 4096,
        "ffn_hidden": 11008,
        "heads": 32,
        "kv_heads": 8,
        "vocab": 32000,
    },
    "global_batch": 1530,
    "tokens": 1e8,
    "gpus": {"min": 64, "max": 64},
}


def test_a_job_only_uneven_plans_run_is_accepted_as_xds_plan_places_it(tmp_path, capsys):
    """The check searched even plans alone and refused the job ("no parallel plan of 64-64
    accelerators divides its global batch"), which `xds plan` places."""
    from xdscheduler.cli import main
    from xdscheduler.planner.search import JobSpec, ideal_tokens_per_s, search
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.sim.inputs import listed_jobs

    path = tmp_path / "prime.yaml"
    path.write_text(yaml.safe_dump({**TWO_DOMAINS, "jobs": [UNEVEN_ONLY]}))
    assert main(["scenario", "check", str(path)]) == 0
    assert "valid; 2 domains, 128 accelerators, 0 links, 1 job listed" in capsys.readouterr().out
    scn = load_scenario(path)
    job, view = JobSpec.of(listed_jobs(scn)[0]), ClusterView.from_scenario(scn)
    planned = search(job, view, scn.weights, pareto=False).best
    assert planned.total_gpus == 64 and ideal_tokens_per_s(job, view) > 0


def test_a_job_that_fits_memory_only_with_tensor_parallelism_wider_than_a_node_says_so():
    """70B on 16 H100 in nodes of 4: only TP 8 fits its memory, and TP stays inside a node;
    the refusal said nothing of why (its memory check counted plans no node can hold)."""
    from xdscheduler.sim.inputs import listed_jobs

    node = {"accelerator": "H100-SXM", "count": 8, "gpus_per_node": 4}
    doc = {
        "name": "fours",
        "domains": [{"name": "a", "location": {"city": "a"}, "nodes": [node]}],
        "jobs": [
            {
                "name": "j",
                "model": "llama3.1-70b",
                "global_batch": 256,
                "tokens": 1e9,
                "gpus": {"min": 16, "max": 16},
            }
        ],
    }
    with pytest.raises(UserError, match=r"tensor parallelism within a node of 4\) needs 8\d GiB"):
        listed_jobs(parse_scenario(doc, "s.yaml"))


def test_a_workload_none_of_whose_jobs_can_run_says_why():
    """V100 has no BF16, and the workload names no precision: every generated job is left
    out, and the study is refused saying so (it said "give a `workload:`", given one)."""
    from xdscheduler.sim.inputs import study_jobs

    doc = {**VOLTA_ONLY, "jobs": [], "workload": {"load": 1.0, "min_gpus": 4}}
    with pytest.raises(UserError, match=r"none of the \d+ generated jobs can run .*BF16.*dtype"):
        study_jobs(parse_scenario(doc, "s.yaml"), 3, 0)


def test_a_listed_job_that_other_tenants_leave_no_room_for_is_refused_before_the_study():
    """Two domains of 64 and a job of at least 128: other tenants hold 8% of each all through
    a study, so it never starts (every policy reported it never run, and said nothing)."""
    from xdscheduler.sim.inputs import listed_jobs

    doc = {
        **VOLTA_ONLY,
        "domains": [
            {"name": n, "location": {"city": n}, "nodes": [{"accelerator": "H100", "count": 8}]}
            for n in ("a", "b")
        ],
        "jobs": [{**VOLTA_ONLY["jobs"][0], "gpus": {"min": 128, "max": 128}}],
    }
    with pytest.raises(UserError, match=r"at the least, leaving 118 of 128; lower its gpus.min"):
        listed_jobs(parse_scenario(doc, "s.yaml"))
    doc["jobs"][0]["gpus"] = {"min": 112, "max": 128}
    assert len(listed_jobs(parse_scenario(doc, "s.yaml"))) == 1


def test_a_study_with_no_job_says_so_before_it_runs():
    from xdscheduler.sim.inputs import study_jobs

    with pytest.raises(UserError, match=r"no job arrives within the study's 3 h"):
        study_jobs(parse_scenario(TWO_DOMAINS, "s.yaml"), 3, 0)


def test_generated_jobs_no_plan_can_run_are_left_out_with_a_warning(xds_log):
    """The generator draws models by size, not by this cluster's memory: 7B jobs of one or
    two 48 GiB accelerators cannot run; the rest of the workload does."""
    from xdscheduler.planner.search import JobSpec, ideal_tokens_per_s
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.sim.inputs import generated_jobs

    doc = {
        "name": "small",
        "domains": [
            {"name": n, "location": {"city": n}, "nodes": [{"accelerator": "L40S", "count": 1}]}
            for n in ("a", "b")
        ],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 10, "rtt_ms": 5}],
        "workload": {"load": 1.0, "min_gpus": 1},
    }
    scn = parse_scenario(doc, "s.yaml")
    with xds_log.at_level("WARNING"):
        jobs = generated_jobs(scn, 6, 0)
    assert jobs and "generated jobs that no plan runs on this cluster" in xds_log.text
    view = ClusterView.from_scenario(scn)
    assert all(ideal_tokens_per_s(JobSpec.of(j), view) > 0 for j in jobs)


VOLTA_ONLY = {
    "name": "volta",
    "domains": [
        {"name": n, "location": {"city": n}, "nodes": [{"accelerator": "V100", "count": 4}]}
        for n in ("a", "b")
    ],
    "links": [{"a": "a", "b": "b", "bandwidth_gbps": 10, "rtt_ms": 5}],
    "jobs": [{"name": "j", "model": "gpt3-350m", "global_batch": 512, "tokens": 1e9}],
}


def test_a_cluster_without_bf16_is_studied_in_the_precision_its_jobs_name():
    """V100 has no BF16: a job that names none is refused before the study, saying how to
    name one; jobs in FP16, listed and generated, are planned in it."""
    from xdscheduler.planner.search import JobSpec, search
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.sim.inputs import generated_jobs, listed_jobs

    with pytest.raises(
        UserError, match=r"rated in BF16; BF16 plans leave out V100.*a job's `dtype`"
    ):
        listed_jobs(parse_scenario(VOLTA_ONLY, "s.yaml"))
    doc = {
        **VOLTA_ONLY,
        "jobs": [{**VOLTA_ONLY["jobs"][0], "dtype": "fp16"}],
        "workload": {"load": 1.0, "min_gpus": 4, "dtype": "fp16"},
    }
    scn = parse_scenario(doc, "s.yaml")
    listed_jobs(scn)
    view = ClusterView.from_scenario(scn)
    jobs = [*scn.jobs, *generated_jobs(scn, 6, 0)]
    assert len(jobs) > 1
    for job in jobs:
        best = search(JobSpec.of(job), view, scn.weights, pareto=False).best
        assert best.plan.dtype == "fp16"


def test_scenario_check_counts_in_words(tmp_path, capsys):
    from xdscheduler.cli import main

    path = tmp_path / "volta.yaml"
    doc = {**VOLTA_ONLY, "jobs": [{**VOLTA_ONLY["jobs"][0], "dtype": "fp16"}]}
    path.write_text(yaml.safe_dump(doc))
    assert main(["scenario", "check", str(path)]) == 0
    assert "valid; 2 domains, 64 accelerators, 1 link, 1 job listed;" in capsys.readouterr().out


def test_a_domain_of_mixed_accelerators_is_planned_as_a_pool_per_type(tmp_path, xds_log, capsys):
    """Each type a pool of its own, joined by the domain's network and linked to the other
    domains as the domain is; said once a file (before, it was planned as its largest group's
    type, 8 H100 as V100)."""
    from xdscheduler.costmodel.plan import Plan
    from xdscheduler.planner.placement import Placement
    from xdscheduler.planner.space import DATA
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import load_scenario

    xds_log.set_level(logging.INFO, logger="xdscheduler")
    path = tmp_path / "mixed.yaml"
    doc = yaml.safe_load(yaml.safe_dump(VOLTA_ONLY))
    doc["domains"][0]["nodes"].append({"accelerator": "H100", "count": 1})
    path.write_text(yaml.safe_dump(doc))
    scn = load_scenario(path)
    load_scenario(path)  # a study reads it again: said once
    pools = {d.name: d for d in scn.domains}
    assert list(pools) == ["a.V100-SXM2-32GB", "a.H100-SXM", "b"]
    assert [(d.gpus, d.accelerator.name) for d in pools.values()][:2] == [
        (32, "V100-SXM2-32GB"),
        (8, "H100-SXM"),
    ]
    assert pools["a.H100-SXM"].storage.capacity_tb == pytest.approx(1000.0 * 8 / 40)
    links = {(x.a, x.b): x for x in scn.links}
    for pool in ("a.V100-SXM2-32GB", "a.H100-SXM"):  # the WAN, as the domain had it
        assert (links[pool, "b"].bandwidth_gbps, links[pool, "b"].rtt_ms) == (10.0, 5.0)
    fabric = links["a.V100-SXM2-32GB", "a.H100-SXM"]
    assert fabric.per_node_pair and fabric.price_per_gb == 0.0 and fabric.rtt_ms < 1.0
    view = ClusterView.from_scenario(scn)  # the planner's: a's own network is not the WAN
    assert view.fabric is not None and view.fabric.tolist() == [
        [False, True, False],
        [True, False, False],
        [False, False, False],
    ]
    assert not view.over_wan((0, 1)) and view.over_wan((1, 2)) and view.over_wan((0, 1, 2))
    # a ring over all three crosses the WAN on its hops to and from b only: those the re-plan
    # triggers watch and the correction learns on (before: a's own network as well)
    ring = Placement("j", DATA, (0, 1, 2), (8, 8, 8), Plan(dp=3))
    assert ring.links == [(0, 1), (1, 2), (2, 0)] and view.wan_links(ring) == [(1, 2), (2, 0)]
    said = [r.getMessage() for r in xds_log.records if "mixes" in r.getMessage()]
    assert said == [f"{path}: {scn.pooled['a']}"]
    assert scn.pooled["a"].startswith("domain a mixes 32 V100-SXM2-32GB, 8 H100-SXM: it is planned")
    assert "2 pools, a.V100-SXM2-32GB, a.H100-SXM" in scn.pooled["a"]
    again = parse_scenario(scn.model_dump(), "again")  # pools read back are domains as they are
    assert [d.name for d in again.domains] == list(pools) and not again.pooled
    from xdscheduler.cli import main

    assert main(["scenario", "check", str(path)]) == 0
    assert "3 domains, 72 accelerators, 3 links, 1 job listed (counting the pools a was" in (
        capsys.readouterr().out
    )


def test_a_mixed_domains_other_accelerators_are_planned_at_their_own_speed():
    """32 V100 and 32 H100 in one domain: the best plan on 32 accelerators takes the H100
    pool; planned as one type, the domain ran every accelerator at the V100's speed."""
    from xdscheduler.planner.search import THROUGHPUT_ONLY, JobSpec, search
    from xdscheduler.planner.view import ClusterView

    doc = yaml.safe_load(yaml.safe_dump(VOLTA_ONLY))
    doc["domains"][0]["nodes"].append({"accelerator": "H100", "count": 4})
    doc["jobs"][0].update(dtype="fp16", gpus={"min": 8, "max": 32})
    scn = parse_scenario(doc, "mixed.yaml")
    view = ClusterView.from_scenario(scn)
    best = search(JobSpec.of(scn.jobs[0]), view, THROUGHPUT_ONLY).best
    assert [view.domains[i].name for i in best.domains] == ["a.H100-SXM"]


def test_a_mixed_domains_pool_may_not_take_another_domains_name():
    doc = yaml.safe_load(yaml.safe_dump(VOLTA_ONLY))
    doc["domains"][0]["nodes"].append({"accelerator": "H100", "count": 1})
    doc["domains"][1]["name"] = "a.H100-SXM"
    doc["links"][0]["b"] = "a.H100-SXM"
    with pytest.raises(UserError, match=r"domain 'a.H100-SXM' is also the name of a mixed"):
        parse_scenario(doc, "clash.yaml")


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
