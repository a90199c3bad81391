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
