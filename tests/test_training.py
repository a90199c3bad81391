"""`xds train`: a smoke training under Tune whose modules restore for inference, and its errors."""

from __future__ import annotations

import json

import pytest
import yaml

from xdscheduler.cli import main
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import Agents
from xdscheduler.rl.train import DEFAULT_CONFIG
from xdscheduler.scenario import default_scenario_path, load_scenario


def tiny_config(tmp_path):
    cfg = yaml.safe_load(DEFAULT_CONFIG.read_text())
    cfg["env"].update(hours=1.0, warmup_hours=0.5, window_hours=0.5, max_decisions=3)
    cfg["ppo"].update(train_batch_size_per_learner=32, minibatch_size=16, num_epochs=1)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_smoke_training_writes_modules_that_restore(ray_session, tmp_path, capsys):
    out = tmp_path / "train"
    code = main(
        [
            "train",
            "--config",
            str(tiny_config(tmp_path)),
            "--iterations",
            "1",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    (trial,) = summary["trials"]
    assert trial["iterations"] == 1
    scn = load_scenario(default_scenario_path())
    agents = Agents(scn.weights, trial["module"])
    verdict = agents.decide(JobSpec.of(scn.jobs[1]), ClusterView.from_scenario(scn))
    assert verdict is not None and verdict.explanation["summary"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--config", "/nonexistent.yaml"], "no such file"),
        (["train", "--samples", "0"], "--samples: 0 is outside [1, 1,000]"),
        (["train", "--samples", "99"], "sweep lists"),
        (
            ["run", "--local", "--hours", "0.1", "--policies", "ppo", "--policy-path", "/nowhere"],
            "not a trained policy",
        ),
        (["run", "--local", "--policies", "ppo", "--serve-url", "ftp://x"], "http://HOST:PORT"),
    ],
)
def test_bad_training_and_policy_input_is_one_clear_line(argv, message, capsys, tmp_path):
    if argv[0] == "run":
        argv = [*argv, "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_config_with_unknown_section_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: {}\noptimiser: {lr: 1}\n")
    assert main(["train", "--config", str(bad)]) == 2
    assert "unknown sections ['optimiser']" in capsys.readouterr().err
