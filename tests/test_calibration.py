"""`xds calibrate`: constants fitted to measured runs, held-out runs named before fitting, and
the profile the planner then uses."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import run
from xdscheduler.costmodel.calibration import (
    FITTED,
    Profile,
    calibrate,
    every_other,
    fit,
    load_runs,
    median_error,
    predict,
)
from xdscheduler.costmodel.constants import DEFAULT

PUBLISHED = REPO / "benchmarks" / "published_runs.csv"
# constants unlike the shipped ones, within their physical ranges
TRUE = replace(
    DEFAULT,
    gemm_efficiency=0.62,
    fp8_gemm_efficiency=0.55,
    attention_efficiency=0.45,
    memory_passes=2.4,
    kernel_overhead_s=2e-5,
)


def test_fitting_recovers_the_constants_that_made_the_measurements():
    """Runs whose 'measurements' are the model's own under other constants: fitted on half,
    the constants come back and the held-out half is predicted exactly."""
    runs, _ = load_runs(PUBLISHED)
    runs = [r for r in runs if r.stack == "megatron-core"]
    made = [replace(r, value=predict(r, TRUE)) for r in runs]
    train = [r for r, f in zip(made, every_other(made), strict=True) if f]
    fitted = fit(train, prior_weight=0.0)
    for k in FITTED:
        assert getattr(fitted, k) == pytest.approx(getattr(TRUE, k), rel=2e-3), k
    # with the prior toward the shipped constants (far from these), a little off
    profile = calibrate(made, [not f for f in every_other(made)])
    assert median_error(profile.held_out) < 0.01
    assert max(abs(r.error) for r in profile.held_out) < 0.05


def test_a_constant_the_runs_say_nothing_of_stays_where_it_was():
    """No FP8 run among the BF16 ones: the FP8 efficiency keeps its shipped value."""
    runs, _ = load_runs(PUBLISHED)
    bf16 = [r for r in runs if r.stack == "fsdp"]
    assert bf16 and all(r.plan.dtype == "bf16" for r in bf16)
    assert fit(bf16).fp8_gemm_efficiency == pytest.approx(DEFAULT.fp8_gemm_efficiency)


def test_calibrate_writes_a_profile_and_reports_held_out_error(capsys, tmp_path):
    out = tmp_path / "fsdp.yaml"
    code, text, err = run(
        capsys, "calibrate", str(PUBLISHED), "--stack", "fsdp", "--out", str(out), "--json"
    )
    assert code == 0, err
    summary = json.loads(text)
    profile = Profile.load(out)
    assert profile.stack == "fsdp" and set(profile.constants) == set(FITTED)
    assert summary["held_out"] == len(profile.held_out) > 0
    assert summary["median_abs_error_held_out"] == pytest.approx(
        sorted(abs(r.error) for r in profile.held_out)[len(profile.held_out) // 2], abs=0.05
    )
    code, _, err = run(capsys, "calibrate", str(PUBLISHED), "--stack", "fsdp", "--out", str(out))
    assert code == 2 and "--force" in err  # a profile is not replaced by accident


def test_calibrate_names_the_rows_it_leaves_out_and_why(capsys, tmp_path):
    """A row of a configuration the model lacks (here a recomputation it does not know) is
    left out, not fitted: the summary names it and its reason, in text and in JSON."""
    with open(PUBLISHED, newline="") as f:
        rows = list(csv.DictReader(f))
    nemo = [r for r in rows if "nemo" in r["source"].lower() and r["layers"]][:6]
    odd = {**nemo[0], "model": "GPT3-odd", "recompute": "sometimes"}
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, list(rows[0]))
        out.writeheader()
        out.writerows([*nemo, odd])
    argv = ("calibrate", str(path), "--stack", "megatron-core", "--force")
    code, text, err = run(capsys, *argv, "--out", str(tmp_path / "p.yaml"), "--json")
    assert code == 0, err
    (left,) = json.loads(text)["left_out"]
    assert left["model"] == "GPT3-odd" and "recompute 'sometimes'" in left["reason"]
    code, text, err = run(capsys, *argv, "--out", str(tmp_path / "p.yaml"))
    assert code == 0, err
    assert "left out, not modelled: 1 row\n" in text and "GPT3-odd on H100" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--stack", "tensorflow"], "unknown stack 'tensorflow'"),
        (["--stack", "fsdp", "--hold-out", "("], "is not a regular expression"),
        (["--stack", "fsdp", "--hold-out", "no-such-model"], "matches none"),
    ],
)
def test_calibrate_refuses_bad_input_in_one_line(capsys, tmp_path, argv, message):
    code, _, err = run(
        capsys, "calibrate", str(PUBLISHED), *argv, "--out", str(tmp_path / "p.yaml")
    )
    assert code == 2 and message in err and "Traceback" not in err


def test_a_csv_without_runs_of_the_stack_is_refused(capsys, tmp_path):
    empty = tmp_path / "runs.csv"
    empty.write_text(PUBLISHED.read_text().splitlines()[0] + "\n")
    code, _, err = run(
        capsys, "calibrate", str(empty), "--stack", "fsdp", "--out", str(tmp_path / "p.yaml")
    )
    assert code == 2 and "no modelled runs of stack 'fsdp'" in err


def test_the_planner_plans_with_a_profile(capsys, tmp_path, default_scenario_path):
    """A profile of slower kernels gives slower plans, and the plan says which profile."""
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        yaml.safe_dump(
            {
                "stack": "megatron-core",
                "constants": {"gemm_efficiency": 0.4, "attention_efficiency": 0.2},
            }
        )
    )
    steps = []
    for extra in ([], ["--profile", str(slow)]):
        code, out, err = run(capsys, "plan", str(default_scenario_path), "--json", *extra)
        assert code == 0, err
        steps.append(json.loads(out)["predicted_step_time_s"])
    assert steps[1] > 1.3 * steps[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text("stack: megatron-core\nconstants: {warp_speed: 9.0}\n")
    code, _, err = run(capsys, "plan", str(default_scenario_path), "--profile", str(bad))
    assert code == 2 and "warp_speed" in err


def test_every_row_of_the_published_runs_names_its_source():
    runs, skipped = load_runs(PUBLISHED)
    assert len(runs) >= 50 and all(r.ref for r in runs)
    assert all(reason for _, reason in skipped)
    assert Path(PUBLISHED).stat().st_size < 1 << 20


@pytest.mark.parametrize("column", ["heads", "seq"])
def test_a_row_without_a_figure_the_model_needs_is_left_out_saying_which(tmp_path, column):
    """Heads and sequence length are optional columns the model cannot do without: such a
    row is left out naming the column (it said `int() argument ... not 'NoneType'`)."""
    lines = PUBLISHED.read_text().splitlines()
    header = lines[0].split(",")
    first = next(csv.DictReader(lines))
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerow({**first, column: ""})
    runs, skipped = load_runs(path)
    assert runs == [] and [reason for _, reason in skipped] == [f"the source gives no {column}"]


def test_estimate_takes_a_profile(capsys, tmp_path):
    fsdp2 = tmp_path / "fsdp2.yaml"
    fsdp2.write_text(yaml.safe_dump({"stack": "fsdp2", "constants": {"gemm_efficiency": 0.5}}))
    argv = [
        "estimate",
        "--gpu",
        "H100-SXM",
        "--model",
        "llama2-7b",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--zero",
        "3",
        "--json",
    ]
    code, out, _ = run(capsys, *argv)
    shipped = json.loads(out)
    code, out, _ = run(capsys, *argv, "--profile", str(fsdp2))
    profiled = json.loads(out)
    assert code == 0 and profiled["stack"] == "fsdp2"
    assert profiled["step_time_s"] > shipped["step_time_s"]


@pytest.mark.parametrize("stack", ["megatron-core", "fsdp", "fsdp2", "fsdp2-eager"])
def test_the_shipped_profiles_are_what_calibrate_computes(capsys, tmp_path, stack):
    shipped = Profile.load(stack)
    out = tmp_path / f"{stack}.yaml"
    code, _, err = run(capsys, "calibrate", str(PUBLISHED), "--stack", stack, "--out", str(out))
    assert code == 0, err
    again = Profile.load(out)
    assert again.constants == pytest.approx(shipped.constants, rel=1e-6)
    assert [r.configuration for r in again.held_out] == [r.configuration for r in shipped.held_out]


def test_a_sharded_stack_plans_with_zero_3(capsys, default_scenario_path):
    code, out, err = run(capsys, "plan", str(default_scenario_path), "--profile", "fsdp2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert {data["plan"]["zero"], *(a["plan"]["zero"] for a in data["alternatives"])} == {3}


def test_the_readme_table_of_profiles_says_what_they_hold():
    from xdscheduler.costmodel.calibration import SHIPPED

    text = (REPO / "docs" / "model-reference.md").read_text()
    for path in SHIPPED.glob("*.yaml"):
        p = Profile.load(path)
        row = next(line for line in text.splitlines() if line.startswith(f"| `{path.stem}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:] == [
            str(len(p.fitted)),
            str(len(p.held_out)),
            f"{median_error(p.fitted):.1%}",
            f"{median_error(p.held_out):.1%}",
        ]


def test_torchtitans_h100_runs_are_on_the_h100_they_ran_on():
    """TorchTitan's H100 benchmarks ran on Grand Teton H100s (96GB HBM2e at 2.4 TB/s, 500 W,
    peak between the SXM and NVL figures): every such run names that entry, whose peak lies
    within those bounds, and the fsdp2 profile fitted on them holds out under 8%."""
    from xdscheduler import catalog

    runs, _ = load_runs(PUBLISHED)
    h100 = {
        r.gpu.name
        for r in runs
        if "torchtitan" in r.source.lower() and r.gpu.name.startswith("H100")
    }
    assert h100 == {"H100-SXM-HBM2e"}
    variant, sxm = catalog.accelerator("H100-SXM-HBM2e"), catalog.accelerator("H100-SXM")
    assert (variant.memory_gbs, variant.power_w) == (2400, 500)
    assert 835.5 < variant.bf16_tflops < sxm.bf16_tflops
    assert median_error(Profile.load("fsdp2").held_out) < 0.08
