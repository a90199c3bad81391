"""Training-phase recognition on generated loss curves it was not tuned on."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.forecast import phases

HELD_OUT = range(5000, 5012)  # development used seeds 0–99; these were never looked at


def test_generated_curves_have_all_phases_in_order():
    loss, truth = phases.generate(7, steps=4000)
    assert len(loss) == 4000 and np.all(np.diff(truth) >= 0)
    assert set(truth) == {0, 1, 2}
    assert loss[: int(np.sum(truth == 0))].mean() > loss[-500:].mean()


def test_stable_start_matches_the_rate_rule():
    t = np.arange(5000.0)
    w, alpha, tau0 = 200.0, 0.5, 10.0
    s = phases.stable_start(5000, w, alpha, tau0)
    rate = -np.gradient(phases.shape(t, 2.0, 8.0, alpha, tau0, w))
    assert rate[s] <= phases.STABLE_RATE * rate[int(w)] * 1.02
    assert rate[s - 2] > phases.STABLE_RATE * rate[int(w)]


def test_recognition_accuracy_on_held_out_curves():
    assert phases.accuracy(HELD_OUT) >= 0.95


def test_phases_cli(tmp_path, capsys):
    loss, _ = phases.generate(5100)
    path = tmp_path / "loss.csv"
    pd.DataFrame({"step": np.arange(len(loss)) * 10, "loss": loss}).to_csv(path, index=False)
    assert main(["phases", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["phase"] for s in out["segments"]] == list(phases.PHASES)
    assert out["segments"][0]["start"] == 0 and out["segments"][-1]["end"] == 10 * (len(loss) - 1)
    assert len(out["phase"]) == len(loss)


def test_phases_bad_input(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"step": [1, 2], "value": [1.0, 2.0]}).to_csv(path, index=False)
    assert main(["phases", str(path)]) == 2
    assert "needs a 'loss' column" in capsys.readouterr().err
    with pytest.raises(UserError):
        phases.recognise(np.array([1.0, -1.0] * 40))


def _no_warmup_curves():
    """Curves that fall fastest from their first step, with the step where their descent rate
    has fallen to STABLE_RATE of its start."""
    rng, t = np.random.default_rng(11), np.arange(5000.0)
    power = phases.shape(t, 2.0, 8.0, 0.5, 10.0, 0.0)
    noisy = power * np.exp(rng.normal(0, 0.02, len(t)))
    spiked = noisy * np.exp(np.where(t >= 2000, 0.4 * np.exp(-(t - 2000) / 30), 0.0))
    decay = (2.0 + 5.0 * np.exp(-t / 800)) * np.exp(rng.normal(0, 0.01, len(t)))
    power_stable = phases.stable_start(len(t), 0.0, 0.5, 10.0)
    return {
        "power law": (power, power_stable),
        "noisy power law": (noisy, power_stable),
        "loss spike": (spiked, power_stable),
        "constant-rate exponential decay": (decay, 800 * np.log(1 / phases.STABLE_RATE)),
    }


@pytest.mark.parametrize("name", list(_no_warmup_curves()))
def test_curve_without_warmup_has_none(name):
    loss, stable = _no_warmup_curves()[name]
    labels = phases.recognise(loss)
    assert labels[0] == 1 and 0 not in labels
    assert abs(np.argmax(labels == 2) - stable) <= 0.1 * stable


def test_real_warmup_is_kept():
    t = np.arange(5000.0)
    noise = np.random.default_rng(12).normal(0, 0.02, len(t))
    labels = phases.recognise(phases.shape(t, 2.0, 8.0, 0.5, 10.0, 200.0) * np.exp(noise))
    assert abs(np.sum(labels == 0) - 200) <= 20


def test_curve_logged_mid_run_is_one_regime(tmp_path, capsys):
    # steps 50,000 on of a slow power law: falling from the first row, at a nearly steady rate
    steps = np.arange(50_000, 55_000)
    noise = np.random.default_rng(13).normal(0, 0.003, len(steps))
    loss = (2.0 + 8.0 * (1 + steps / 20_000) ** -0.7) * np.exp(noise)
    path = tmp_path / "resumed.csv"
    pd.DataFrame({"step": steps, "loss": loss}).to_csv(path, index=False)
    assert main(["phases", str(path), "--json"]) == 0
    segments = json.loads(capsys.readouterr().out)["segments"]
    assert segments == [{"phase": "fast convergence", "start": 50_000, "end": 54_999}]
