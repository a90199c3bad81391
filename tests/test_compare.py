"""`xds compare`: confidence intervals and paired changes worked by hand, cells at their exact
offered load, a tiny grid in process and on Ray, replayed arrivals, and bad input."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.report.compare import (
    headline,
    mean_ci,
    paired,
    paired_change,
    summary,
)
from xdscheduler.report.readme import splice_readme
from xdscheduler.runtime.cli import parse_seeds, provenance
from xdscheduler.scenario import default_scenario_path, load_scenario, parse_scenario
from xdscheduler.sim.arrivals import Replay, arrival_times_s, load_replay, window
from xdscheduler.sim.cell import cell_workload
from xdscheduler.sim.inputs import generated_jobs, study_dynamics
from xdscheduler.sim.metrics import free_share, is_giant, offered_load

from .conftest import small_scenario, with_flags

TINY = [
    "--policies",
    "fifo-single-domain,planner-single-domain",
    "--seeds",
    "2",
    "--loads",
    "0.8",
    "--hours",
    "1",
    "--json",
]


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scn") / "small.yaml"
    path.write_text(yaml.safe_dump(small_scenario().model_dump(mode="json", exclude_defaults=True)))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_confidence_interval_by_hand():
    # 1, 2, 3, 4: mean 2.5, s² = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3, s/√4 = 0.645497;
    # t(0.975, 3 dof) = 3.182446, so the half-width is 2.054260.
    est = mean_ci([1, 2, 3, 4])
    assert (est.mean, est.n) == (2.5, 4) and est.half_width == pytest.approx(2.054260, abs=1e-6)
    assert est.significant  # 2.5 > 2.05: the interval leaves out 0
    one = mean_ci([3.0, float("nan")])  # missing figures are left out; one seed: no interval
    assert one.mean == 3.0 and one.n == 1 and math.isnan(one.half_width) and not one.significant


def test_paired_change_by_hand():
    # Seeds 7, 8, 9: policy 2, 3, 5 against baseline 1, 2, 4 -> relative changes 1, 0.5, 0.25:
    # mean 0.583333, s = 0.381881, s/√3 = 0.220479, t(0.975, 2 dof) = 4.302653 -> ± 0.948645.
    policy = pd.Series([5.0, 2.0, 3.0], index=[9, 7, 8])  # paired by seed, not by position
    base = pd.Series([1.0, 2.0, 4.0], index=[7, 8, 9])
    est = paired_change(policy, base)
    assert est.n == 3 and est.mean == pytest.approx(0.583333, abs=1e-6)
    assert est.half_width == pytest.approx(0.948645, abs=1e-6) and not est.significant
    est = paired_change(policy, base, "difference")  # differences 1, 1, 1: no spread
    assert (est.mean, est.half_width) == (1.0, 0.0) and est.significant


def test_paired_table_names_every_policy_against_the_baseline():
    rows = [
        {
            "scenario": "s",
            "load": 1.0,
            "seed": seed,
            "policy": p,
            "single_domain": True,
            **{
                f: v * (1.1 if p == "b" else 1.0)
                for f, v in {
                    "mean_jct_s": 3600.0 + seed,
                    "mean_slowdown": 2.0,
                    "useful_utilization": 0.5,
                    "objective_work": 1.0 + 0.01 * seed,
                    "cross_domain_cost_usd": 0.0,
                    "jobs_completed": 10.0,
                }.items()
            },
        }
        for seed in range(3)
        for p in ("a", "b")
    ]
    cells = pd.DataFrame(rows)
    changes = paired(cells, "a")
    r = changes[changes["figure"] == "objective_work"].iloc[0]
    assert set(changes["policy"]) == {"b"} and r["kind"] == "relative"
    assert r["mean"] == pytest.approx(0.1) and r["significant"]
    wan = changes[changes["figure"] == "cross_domain_cost_usd"].iloc[0]
    assert wan["kind"] == "difference" and wan["mean"] == 0  # a zero baseline: differences
    line = headline(cells, summary(cells), changes, "a")
    assert line.startswith("**b**") and "beats **a**" in line and "+10.0%" in line
    assert "3 seeds" in line and "significantly higher at 1 and lower at 0 of 1" in line


def test_a_cell_offers_exactly_its_target_load():
    scn = small_scenario()
    view = ClusterView.from_scenario(scn)
    for load in (0.6, 1.2):
        cell = cell_workload(scn, 2, seed=4, load=load)
        drawn = generated_jobs(scn, 2, 4, load)
        assert offered_load([JobSpec.of(j) for j in cell.jobs], view, 2 * 3600) == pytest.approx(
            load, rel=1e-12
        )
        assert cell.offered_load == pytest.approx(load, rel=1e-12)
        # the listed job is in, first, and every job's work scaled by one factor; sizes and
        # arrival times kept
        assert cell.listed == 1 and cell.jobs[0].name == "big"
        assert [
            j.tokens / d.tokens for j, d in zip(cell.jobs, [*scn.jobs, *drawn], strict=True)
        ] == pytest.approx([cell.work_scale] * (len(drawn) + 1))
        assert [(j.arrival_s, j.gpus) for j in cell.jobs] == [
            (d.arrival_s, d.gpus) for d in [*scn.jobs, *drawn]
        ]
        alone = cell_workload(scn, 2, 4, load, listed=False)  # --generated-only
        assert alone.listed == 0 and [j.name for j in alone.jobs] == [d.name for d in drawn]
        assert alone.offered_load == pytest.approx(load, rel=1e-12)
    assert cell_workload(scn, 2, 4, 1.2).jobs == cell.jobs  # a seed gives the same jobs


def test_a_cell_of_listed_jobs_alone_is_a_workload():
    scn = small_scenario()  # its listed job arrives at 0; the generator draws none in 0.1 h
    assert not generated_jobs(scn, 0.1, 0, 0.1)
    cell = cell_workload(scn, 0.1, 0, 0.1)
    assert [j.name for j in cell.jobs] == ["big"] and cell.offered_load == pytest.approx(0.1)
    with pytest.raises(UserError, match=r"no job arrives in 0\.1 h"):
        cell_workload(scn, 0.1, 0, 0.1, listed=False)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.2, 0.4])
def test_a_cell_can_fix_the_share_of_the_load_in_giants(share):
    scn = load_scenario(default_scenario_path())  # five_domains: few giants a draw
    view, hours = ClusterView.from_scenario(scn), 6
    above = free_share(study_dynamics(scn, 3, hours), view, hours * 3600)
    cell = cell_workload(scn, hours, 3, 0.9, giant_share=share)
    specs = [JobSpec.of(j) for j in cell.jobs]
    giants = [s for s in specs if is_giant(s, above)]
    assert cell.offered_load == pytest.approx(0.9, rel=1e-12) and cell.listed == 0
    assert sum(s.gpus_max > 512 * 0.8 for s in specs) == len(giants)  # asks beyond a domain
    if share == 0:
        assert not giants and cell.giant_scale is None
    else:
        assert offered_load(giants, view, hours * 3600) == pytest.approx(0.9 * share)
    fits = [j for j in cell.jobs if not is_giant(JobSpec.of(j), above)]
    drawn = {j.name: j for j in generated_jobs(scn, hours, 3, 0.9)}
    assert all(j.name in drawn for j in fits)  # the draw's own jobs that fit, scaled
    assert fits and [j.tokens / drawn[j.name].tokens for j in fits] == pytest.approx(
        [cell.work_scale] * len(fits)
    )
    assert cell_workload(scn, hours, 3, 0.9, giant_share=share).jobs == cell.jobs  # seeded


def test_giant_shares_need_giants_the_generator_can_draw():
    doc = small_scenario().model_dump(mode="json", exclude_defaults=True)
    for d in doc["domains"]:  # 200 + 8 + 8: the generator asks for 128 at most, under ~180
        d["nodes"][0]["count"] = 25 if d["name"] == "east" else 1
    with pytest.raises(UserError, match="draws no job asking for more than"):
        cell_workload(parse_scenario(doc), 2, 0, 0.8, giant_share=0.2)
    with pytest.raises(UserError, match=r"in \[0, 1\)"):
        cell_workload(small_scenario(), 2, 0, 0.8, giant_share=1.0)


@pytest.fixture(scope="module")
def local_grid(small_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    readme = out / "README.md"
    readme.write_text("# x\n<!-- compare:begin -->\nSTALE\n<!-- compare:end -->\ntail\n")
    code = main(
        ["compare", str(small_file), *TINY, "--local", "--out", str(out), "--readme", str(readme)]
    )
    return code, out, readme


def test_tiny_grid_in_process(local_grid):
    code, out, readme = local_grid
    doc = json.loads((out / "compare.json").read_text())
    assert code == 0 and doc["runtime"] == "local" and len(doc["cells"]) == 4
    assert [c["offered_load"] for c in doc["cells"]] == pytest.approx([0.8] * 4)
    assert doc["listed_jobs"] == {"three_domains": 1}  # in by default
    assert all(c["listed_jobs"] == 1 for c in doc["cells"])
    for cls in ("fit", "giant"):  # the split, in every cell
        assert all(c[f"{cls}_jobs"] >= 0 and c[f"{cls}_never_started"] >= 0 for c in doc["cells"])
    assert all(c["fit_jobs"] + c["giant_jobs"] == c["jobs"] for c in doc["cells"])
    jct = [s for s in doc["summary"] if s["figure"] == "mean_jct_s"]
    assert len(jct) == 2 and all(s["n"] == 2 and s["half_width"] >= 0 for s in jct)
    assert {p["policy"] for p in doc["paired"]} == {"fifo-single-domain"}
    for name in (
        "compare.json",
        "compare.parquet",
        "compare.md",
        "compare_jct.png",
        "compare_useful.png",
    ):
        assert (out / name).stat().st_size > 0
    assert len(pd.read_parquet(out / "compare.parquet")) == 4
    md = (out / "compare.md").read_text()
    assert md.startswith("**") and "planner-single-domain" in md.splitlines()[0] and "±" in md
    text = readme.read_text()
    assert "STALE" not in text and text.endswith("<!-- compare:end -->\ntail\n")
    assert "Generated by `xds compare" in text and "2 seeds" in text and "--local" not in text


def test_an_earlier_comparison_is_replaced_only_with_force(
    local_grid, small_file, tmp_path, capsys
):
    earlier = tmp_path / "earlier"
    shutil.copytree(local_grid[1], earlier)
    saved = (earlier / "compare.parquet").read_bytes()
    argv = ["compare", small_file, *TINY, "--local", "--out", earlier]
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"{earlier} holds an earlier comparison: --force to replace it" in err
    assert (earlier / "compare.parquet").read_bytes() == saved
    assert run(capsys, *argv, "--force")[0] == 0


def test_a_users_own_file_of_a_comparisons_name_is_not_written_over(small_file, tmp_path, capsys):
    (tmp_path / "compare.md").write_text("my notes")  # no comparison there
    code, _, err = run(capsys, "compare", small_file, *TINY, "--local", "--out", tmp_path)
    assert code == 2 and f"{tmp_path} holds compare.md, which the comparison would" in err
    assert (tmp_path / "compare.md").read_text() == "my notes"


def test_a_saved_comparison_is_written_again_against_another_baseline(local_grid, tmp_path, capsys):
    _, out, _ = local_grid
    saved = tmp_path / "saved"
    shutil.copytree(out, saved)
    code, text, _ = run(capsys, "compare", "--from", saved, "--baseline", "fifo-single-domain")
    doc = json.loads((saved / "compare.json").read_text())
    assert code == 0 and doc["grid"]["baseline"] == "fifo-single-domain"
    assert {p["policy"] for p in doc["paired"]} == {"planner-single-domain"}
    assert doc["cells"] == json.loads((out / "compare.json").read_text())["cells"]
    assert "pred. error (%)" in text  # every study's prediction error, per policy
    code, _, err = run(capsys, "compare", "--from", saved, "--baseline", "planner")
    assert code == 2 and "'planner' is not among the policies saved" in err
    code, _, err = run(capsys, "compare", "--from", tmp_path / "nothing")
    assert code == 2 and "holds no saved comparison" in err


def test_a_policy_run_later_joins_a_saved_comparison(local_grid, small_file, tmp_path, capsys):
    _, first, _ = local_grid
    later = tmp_path / "later"
    alone = [*TINY[2:], "--policies", "greedy-cross-domain", "--baseline", "greedy-cross-domain"]
    assert run(capsys, "compare", small_file, *alone, "--local", "--out", later)[0] == 0
    joined = tmp_path / "joined"
    code, text, _ = run(capsys, "compare", "--from", f"{later},{first}", "--out", joined, "--json")
    doc = json.loads(text)
    assert code == 0 and doc["grid"]["policies"] == [  # the registry's order
        "fifo-single-domain",
        "planner-single-domain",
        "greedy-cross-domain",
    ]
    assert doc["grid"]["baseline"] == "greedy-cross-domain"  # the first's
    assert doc["cells_run"] == 6 and "--policies fifo-single-domain," in doc["command"]
    assert provenance(doc).endswith("in 2 runs joined (--from).")
    again = json.loads(run(capsys, "compare", "--from", joined, "--json")[1])
    assert again["runs"] == 2 and again["cells"] == doc["cells"]  # written again, still joined
    # in a run's order, the tables' (seed by seed, each seed's policies in the grid's order)
    assert [c["policy"] for c in doc["cells"]] == doc["grid"]["policies"] * 2
    earlier = json.loads((first / "compare.json").read_text())["cells"]
    assert [c for c in doc["cells"] if c["policy"] != "greedy-cross-domain"] == earlier
    assert {p["policy"] for p in doc["paired"]} == {"fifo-single-domain", "planner-single-domain"}
    # the same policy twice, or another grid, is refused; nothing is written over
    code, _, err = run(capsys, "compare", "--from", f"{first},{first}", "--out", tmp_path / "x")
    assert code == 2 and "fifo-single-domain, planner-single-domain ran in comparison 2" in err
    other = tmp_path / "other"
    one_seed = [alone[0], "1", *alone[2:]]  # --seeds 1
    assert run(capsys, "compare", small_file, *one_seed, "--local", "--out", other)[0] == 0
    code, _, err = run(capsys, "compare", "--from", f"{first},{other}", "--out", tmp_path / "y")
    assert code == 2 and "comparison 2 ran another grid than the first (seeds differ)" in err
    code, _, err = run(capsys, "compare", "--from", f"{later},{first}", "--out", joined)
    assert code == 2 and "holds an earlier comparison" in err
    edited = tmp_path / "edited"  # its scenario file listed other jobs when it ran
    shutil.copytree(later, edited)
    meta = json.loads((edited / "compare.json").read_text())
    meta["listed_jobs"] = {s: n + 1 for s, n in meta["listed_jobs"].items()} or {"small": 1}
    (edited / "compare.json").write_text(json.dumps(meta))
    code, _, err = run(capsys, "compare", "--from", f"{edited},{first}", "--out", tmp_path / "z")
    assert code == 2 and "(listed jobs differ)" in err


def test_tiny_grid_on_ray_matches_the_local_run(
    ray_session, local_grid, small_file, tmp_path, capsys
):
    capsys.readouterr()
    code, out, _ = run(capsys, "compare", small_file, *TINY, "--out", tmp_path)
    doc = json.loads(out)
    local = json.loads((local_grid[1] / "compare.json").read_text())
    assert code == 0 and doc["runtime"] == "ray"

    def figures(d):  # all but the wall-clock timings
        return [
            {k: v for k, v in c.items() if k != "wall_s" and "_ms_" not in k} for c in d["cells"]
        ]

    assert figures(doc) == figures(local)  # the same seed: the same study, wherever it runs


def test_replayed_arrivals_keep_the_load_and_the_count(data_dir):
    scn = small_scenario()
    poisson = cell_workload(scn, 6, 1, 0.8)
    for kind in ("helios", "philly"):
        cell = cell_workload(scn, 6, 1, 0.8, load_replay(kind, root=data_dir))
        times = np.array([j.arrival_s for j in cell.jobs])
        assert len(cell.jobs) == len(poisson.jobs) and cell.offered_load == pytest.approx(0.8)
        assert (np.diff(times) >= 0).all() and times[0] >= 0 and times[-1] < 6 * 3600
        assert kind in cell.arrivals and list(times) != [j.arrival_s for j in poisson.jobs]
    acme = load_replay("acme", "kalos", root=data_dir)
    assert acme.gpu_s_per_job == pytest.approx(5_333_180_061 / 19_907)  # Kalos row, by hand
    assert cell_workload(scn, 6, 1, 0.8, acme).offered_load == pytest.approx(0.8)


def test_acme_arrivals_take_a_held_out_clusters_sizes_and_intensity(tmp_path, monkeypatch):
    """A summary of a cluster the project does not ship: the scenario names it, the generator
    draws its sizes and run times from its row, the arrivals its accelerator-seconds a job."""
    summary = tmp_path / "workload" / "acme_cluster_summary.csv"
    summary.parent.mkdir()
    summary.write_text(
        "id,gpu_job_num,avg_gpu_num,med_gpu_num,avg_run_time_gpu,med_run_time_gpu,max_gpu,"
        "complete_gpu_time,cancel_gpu_time,fail_gpu_time\n"
        "Orion,1000,20.0,4.0,5000.0,600.0,32,4.0e7,1.0e7,1.0e7\n"
    )
    monkeypatch.setenv("XDS_DATA_DIR", str(tmp_path))
    doc = yaml.safe_load(small_scenario().model_dump_json())
    scn = parse_scenario({**doc, "workload": {**doc["workload"], "cluster": "Orion"}})
    cell = cell_workload(scn, 6, 1, 0.8, load_replay("acme", "Orion", root=tmp_path))
    assert cell.arrivals == "acme: Poisson, 60,000 GPU-s a job"
    assert cell.offered_load == pytest.approx(0.8)
    sizes = {j.gpus.max for j in cell.jobs[cell.listed :]}  # the generated ones
    assert sizes and sizes <= {8, 16, 32}


def test_a_replay_window_is_cut_from_a_full_record_or_stretched():
    # Three hours a minute: the first hour has a gap, the second no arrival, the third some.
    rate = np.r_[np.full(60, np.nan), np.zeros(60), np.ones(60)]
    replay = Replay("t", "test", rate, pd.Timestamp("2020-05-01"))
    rng = np.random.default_rng(0)
    win = window(replay, 1, rng)
    assert "02:00" in win.label and win.rate.sum() == 60  # the only full hour with arrivals
    whole = window(replay, 6, rng)  # longer than the trace: all of it, twice as slow
    assert whole.step_s == 120 and "stretched" in whole.label and len(whole.rate) == 180
    times = arrival_times_s(whole, 50, rng)
    assert (times >= 240 * 60).all() and (times < 6 * 3600).all()  # only where it had arrivals
    with pytest.raises(UserError, match="no 1-hour window"):  # a gap, then no arrival
        window(Replay("t", "test", rate[:150], pd.Timestamp("2020-05-01")), 1, rng)


def test_replay_without_the_data_folder_says_so(small_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDS_DATA_DIR", str(tmp_path))
    code, out, err = run(
        capsys,
        "compare",
        small_file,
        *TINY,
        "--local",
        "--arrivals",
        "helios",
        "--out",
        tmp_path / "o",
    )
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no demand/ folder" in err


@pytest.mark.parametrize(
    "change,message",
    [
        (["--policies", "fifo-single-domain,nope"], "unknown policies nope"),
        (["--loads", "0,0.8"], "0 is outside (0, 3]"),
        (["--seeds", "0"], "--seeds: a count from 1 to 1000"),
        (["--seeds", "a,b"], "--seeds takes a count"),
        (
            ["--baseline", "planner"],
            "baseline 'planner' is not among the policies compared "
            "(fifo-single-domain, planner-single-domain): add it to --policies",
        ),
        (["--arrivals", "weekly"], "unknown arrivals 'weekly'"),
        (["--address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
        (["--readme", "no-such-README.md"], "cannot read --readme no-such-README.md"),
        (["--hours", "0"], "argument --hours: 0 is outside (0, 720]"),
    ],
)
def test_bad_input_exits_2_with_one_line(small_file, tmp_path, capsys, change, message):
    code, out, err = run(
        capsys, "compare", small_file, *with_flags(TINY, change), "--out", tmp_path
    )
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_unknown_scenario_exits_2(tmp_path, capsys):
    code, _, err = run(capsys, "compare", tmp_path / "missing.yaml", *TINY, "--local")
    assert code == 2 and "cannot read scenario" in err


def test_seeds_are_a_count_or_a_list():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("4,7") == [4, 7]
    assert parse_seeds("5,") == [5]


def test_readme_needs_its_markers(tmp_path):
    path = tmp_path / "R.md"
    path.write_text("no markers\n")
    with pytest.raises(UserError, match="compare:begin"):
        splice_readme(path, "compare", "table", "made by")


def test_the_crossing_headroom_fluid_by_hand():
    """SRPT on fluid pools: worked by hand for two jobs."""
    import numpy as np

    from benchmarks.crossing_headroom import fluid

    arrival, work = np.array([0.0, 0.0]), np.array([10.0, 30.0])
    # one pool of 2/s, each job at most 2/s: the short one first (5 s), then the long (+15 s)
    np.testing.assert_allclose(
        fluid(arrival, work, np.full((2, 1), 2.0), np.array([2.0])), [5.0, 20.0]
    )
    # capped at 1/s each, both run at once on the pool of 2/s
    np.testing.assert_allclose(
        fluid(arrival, work, np.full((2, 1), 1.0), np.array([2.0])), [10.0, 30.0]
    )
    # two pools of 1/s: the second job goes where it finishes first, the empty one
    np.testing.assert_allclose(
        fluid(arrival, work, np.ones((2, 2)), np.array([1.0, 1.0])), [10.0, 30.0]
    )
    # a job that fits only pool 1 waits there behind the shorter one
    cap = np.array([[0.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(fluid(arrival, work, cap, np.array([1.0, 1.0])), [10.0, 40.0])


def test_the_crossing_headroom_reads_the_baseline_and_the_planner_from_a_compare_run(tmp_path):
    """Per seed: the baseline's JCT in hours, the share of it queued, planner's change."""
    import pandas as pd

    from benchmarks.crossing_headroom import measured

    key = {"scenario": "s", "load": 1.0, "seed": 0}
    pd.DataFrame(
        [
            {
                **key,
                "policy": "planner-single-domain",
                "mean_jct_s": 7200.0,
                "mean_queue_s": 1800.0,
            },
            {**key, "policy": "planner", "mean_jct_s": 5400.0, "mean_queue_s": 0.0},
        ]
    ).to_parquet(tmp_path / "compare.parquet")
    row = measured(str(tmp_path)).iloc[0]
    assert (row.baseline_jct_h, row.baseline_queued, row.measured) == (2.0, 0.25, -0.25)
    pd.DataFrame([{**key, "policy": "planner", "mean_jct_s": 1.0, "mean_queue_s": 0.0}]).to_parquet(
        tmp_path / "compare.parquet"
    )
    with pytest.raises(UserError, match="needs planner and planner-single-domain"):
        measured(str(tmp_path))


def test_crossing_speedup_compares_each_jobs_fastest_plan_inside_one_domain_and_across():
    """A job one domain holds gets no faster across; GPT-3 175B, which asks for two domains,
    does (more accelerators than one domain has)."""
    from benchmarks.crossing_speedup import fastest
    from tests.conftest import SCENARIOS
    from xdscheduler.scenario import load_scenario

    scn = load_scenario(SCENARIOS / "five_domains.yaml")
    view = ClusterView.from_scenario(scn).empty()
    jobs = {j.name: JobSpec.of(j) for j in scn.jobs}
    giant = fastest(jobs["gpt3-175b"], view)
    assert giant[True][1] > 512 >= giant[False][1] > 0
    assert giant[True][0] > giant[False][0]
    small = fastest(jobs["llama3-8b-continual"], view)
    assert small[False][0] > 0 and small[True][0] <= small[False][0]


def test_a_progress_line_is_written_once(capsys):
    """`xds` logs on standard error already: the grid's own progress handler would write each
    line a second time."""
    import logging

    from xdscheduler.cli import _logging
    from xdscheduler.runtime.cli import _progress_to_stderr

    _logging()
    with _progress_to_stderr():
        logging.getLogger("xdscheduler.runtime.compare").info("compare: 1/2 studies")
    assert capsys.readouterr().err.count("compare: 1/2 studies") == 1


def test_an_arrival_trace_of_another_make_replays_or_is_refused_by_row(tmp_path):
    """A trace of 5-minute rows replays at its own step; a cell that is not a number, a time
    that is not a time and a trace that never rises are named; Acme's figures must be
    there and not negative."""
    from xdscheduler.sim.arrivals import load_replay

    folder = tmp_path / "demand" / "helios_earth"
    folder.mkdir(parents=True)
    times = pd.date_range("2020-05-01", periods=600, freq="5min")
    jobs = np.cumsum(np.random.default_rng(0).poisson(2, len(times)))
    trace = pd.DataFrame({"time": times.strftime("%Y-%m-%d %H:%M:%S"), "total_job_num": jobs})
    trace.to_csv(folder / "vcOther.csv", index=False)  # no vc6YE: the folder's first is taken
    replay = load_replay("helios", root=tmp_path)
    assert replay.step_s == 300 and "vcOther" in replay.source and len(replay.rate) == 599
    for column, value, message in (
        ("total_job_num", "many", r"row 3, column 'total_job_num': 'many' is not a finite"),
        ("time", "not a time", r"row 3, column 'time': 'not a time' is not a date and time"),
    ):
        bad = trace.astype(str)
        bad.loc[2, column] = value
        bad.to_csv(folder / "vcOther.csv", index=False)
        with pytest.raises(UserError, match=message):
            load_replay("helios", root=tmp_path)
    trace.assign(total_job_num=7).to_csv(folder / "vcOther.csv", index=False)
    with pytest.raises(UserError, match="never rises: the trace holds no arrival"):
        load_replay("helios", root=tmp_path)
    acme = tmp_path / "workload" / "acme_cluster_summary.csv"
    acme.parent.mkdir()
    row = {"id": "Kalos", "gpu_job_num": 10, "cancel_gpu_time": 0.0, "fail_gpu_time": 0.0}
    pd.DataFrame([{**row, "complete_gpu_time": 3600.0}]).to_csv(acme, index=False)
    assert load_replay("acme", root=tmp_path).gpu_s_per_job == 360.0
    pd.DataFrame([{**row, "complete_gpu_time": -3600.0}]).to_csv(acme, index=False)
    with pytest.raises(UserError, match="none missing or negative"):
        load_replay("acme", root=tmp_path)


def _replay_of(folder, times, jobs) -> Replay:
    """The Helios replay of a trace of `times` (as written) and `jobs` (total_job_num)."""
    pd.DataFrame({"time": times, "total_job_num": jobs}).to_csv(folder / "vc6YE.csv", index=False)
    replay = load_replay("helios", root=folder.parent.parent)
    assert replay.rate is not None
    return replay


# Two days a minute across the US spring DST change (12 March 2023), in UTC.
DST_DAYS = pd.date_range("2023-03-11", periods=2880, freq="min")
WRITTEN = {
    "offsets that change at DST": lambda t: [
        s.isoformat() for s in t.tz_localize("UTC").tz_convert("US/Eastern")
    ],
    "dd/mm/yyyy": lambda t: t.strftime("%d/%m/%Y %H:%M"),
    "a clock seconds off": lambda t: (
        t + pd.to_timedelta(np.random.default_rng(1).integers(0, 10, len(t)), "s")
    ).strftime("%Y-%m-%d %H:%M:%S"),
}


@pytest.mark.parametrize("written", WRITTEN)
def test_an_arrival_trace_reads_times_as_the_forecast_reader_does(tmp_path, written):
    """Times with a UTC offset, written day first, or a few seconds off the minute replay as
    the same trace written plainly does: one rate a minute from the same start, no gap."""
    folder = tmp_path / "demand" / "helios_earth"
    folder.mkdir(parents=True)
    jobs = np.cumsum(np.random.default_rng(0).poisson(0.3, len(DST_DAYS)))
    plain = _replay_of(folder, DST_DAYS.strftime("%Y-%m-%d %H:%M:%S"), jobs)
    replay = _replay_of(folder, WRITTEN[written](DST_DAYS), jobs)
    assert replay.start == plain.start == DST_DAYS[0] and replay.step_s == 60
    assert np.array_equal(replay.rate, plain.rate) and not np.isnan(replay.rate).any()
    assert window(replay, 24, np.random.default_rng(0)).rate.sum() > 0


def test_an_arrival_trace_averages_rows_of_one_time_and_refuses_empty_cells(tmp_path):
    """As the forecast reader does: rows of one time averaged; an empty cell, or times in
    epoch seconds, refused by row and column."""
    folder = tmp_path / "demand" / "helios_earth"
    folder.mkdir(parents=True)
    times = pd.Series(DST_DAYS[:600].strftime("%Y-%m-%d %H:%M:%S"))
    jobs = pd.Series(np.cumsum(np.random.default_rng(0).poisson(0.3, 600)))
    plain = _replay_of(folder, times, jobs)
    twice = _replay_of(
        folder, pd.concat([times, times[100:101]]), pd.concat([jobs, jobs[100:101] + 2])
    )
    assert twice.rate is not None and plain.rate is not None
    assert twice.rate[99] == plain.rate[99] + 1 and len(twice.rate) == len(plain.rate)
    for when, what, message in (
        (
            times,
            jobs.astype(str).mask(jobs.index == 2, ""),
            r"row 3, column 'total_job_num': an empty cell",
        ),
        (
            (DST_DAYS[:600] - pd.Timestamp(0)) // pd.Timedelta("1s"),
            jobs,
            r"row 1, column 'time': '1678492800' is not a date and time",
        ),
    ):
        with pytest.raises(UserError, match=message):
            _replay_of(folder, when, what)


def test_traces_saved_under_another_case_are_replayed_not_swapped(tmp_path):
    """VC6YE.csv is Helios's vc6YE, never passed over for the folder's first cluster;
    Philly_Node_Sequence.csv is Philly's trace."""
    from xdscheduler.sim.arrivals import load_replay

    folder = tmp_path / "demand" / "helios_earth"
    folder.mkdir(parents=True)
    times = pd.date_range("2020-05-01", periods=60, freq="1min").strftime("%Y-%m-%d %H:%M:%S")
    trace = pd.DataFrame({"time": times, "total_job_num": np.arange(60)})
    for name in ("VC6YE.csv", "vc3sl.csv"):
        trace.to_csv(folder / name, index=False)
    assert "Helios Earth VC6YE" in load_replay("helios", root=tmp_path).source
    philly = trace.rename(columns={"total_job_num": "active"})
    philly.to_csv(tmp_path / "demand" / "Philly_Node_Sequence.csv", index=False)
    assert load_replay("philly", root=tmp_path).rate.sum() == 59
