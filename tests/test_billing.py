"""Metering and billing: the ledger's records sum to the report's usage to the cent, windows
add up, and a controller killed mid-run leaves a ledger (and bills) equal to an uninterrupted
run's."""

from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest

from tests.test_cli import run
from tests.test_journal import run_to_end
from xdscheduler.registry import make_policy
from xdscheduler.report.bill import bill
from xdscheduler.runtime.ledger import Ledger, read_ledger
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import load_scenario
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.metering import Usage

SCENARIO = "scenarios/three_tenants.yaml"
HOURS, SEED = 2.0, 5
TENANTS = ("big-lab", "small-lab", "production")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("billed") / "study"
    from xdscheduler.cli import main

    assert (
        main(
            [
                "run",
                SCENARIO,
                "--hours",
                "3",
                "--local",
                "--policies",
                "planner,gang-single-domain",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_bills_reconcile_with_the_report_to_the_cent(study, capsys):
    report = json.loads((study / "report.json").read_text())
    for policy in ("planner", "gang-single-domain"):
        for tenant in TENANTS:
            code, out, err = run(
                capsys, "bill", str(study), "--tenant", tenant, "--policy", policy, "--json"
            )
            assert code == 0, err
            billed = json.loads(out)
            expected = report["policies"][policy]["tenants"][tenant]
            assert round(billed["total_usd"], 2) == round(expected["bill_usd"], 2)
            gpu_h = sum(t["quantity"] for t in billed["totals"] if t["kind"] == "accelerators")
            assert gpu_h == pytest.approx(expected["use_gpu_h"], rel=1e-9)
            items = pd.read_csv(billed["csv"])
            assert items["usd"].iloc[-1] == pytest.approx(billed["total_usd"])
            assert items["usd"].iloc[:-1].sum() == pytest.approx(billed["total_usd"])


def test_windows_add_up_to_the_whole(study):
    records = read_ledger(study)
    whole = bill(records, "small-lab", "planner").total_usd
    parts = [
        bill(records, "small-lab", "planner", a * 3600, b * 3600).total_usd
        for a, b in ((0, 1), (1, 2.5), (2.5, 1000))
    ]
    assert sum(parts) == pytest.approx(whole, rel=1e-9) and all(p > 0 for p in parts[:2])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tenant", "nobody"], "no tenant 'nobody'"),
        (["--tenant", "small-lab", "--policy", "fifo"], "no policy 'fifo'"),
        (["--tenant", "small-lab", "--from", "2", "--to", "1"], "must be after --from"),
        (["--tenant", "small-lab", "--from", "-1"], "outside"),
    ],
)
def test_bad_bill_requests_are_named(study, capsys, argv, message):
    code, _, err = run(capsys, "bill", str(study), *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_folder_without_a_ledger_is_named(tmp_path, capsys):
    code, _, err = run(capsys, "bill", str(tmp_path), "--tenant", "x")
    assert code == 2 and "holds no ledger" in err


def test_tenants_command_shows_every_tenant(study, capsys):
    code, out, _ = run(capsys, "tenants", str(study), "--policy", "planner")
    assert code == 0
    lines = out.splitlines()
    assert "borrowed" in lines[0] and "lent" in lines[0]
    assert {line.split()[1] for line in lines[1:]} == set(TENANTS)


def test_a_replayed_ledger_keeps_each_record_once(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite", "p")
    first = [
        Usage(i, "accelerators", i, i + 1, "j", "t", "d", "H100-SXM", 10.0, 1.0) for i in range(3)
    ]
    ledger.record(first[:2])
    ledger.record(first[2:])
    again = Ledger(tmp_path / "l.sqlite", "p")  # a controller after a crash: replays, goes on
    again.record(first[:2])
    again.record([first[2], Usage(3, "wan", 3, 4, "j", "t", "", "", 2.0, 0.5)])
    rows = sqlite3.connect(tmp_path / "l.sqlite").execute("SELECT COUNT(*) FROM usage")
    assert rows.fetchone()[0] == 4


def test_killing_the_controller_mid_run_leaves_the_bills_of_an_uninterrupted_run(
    ray_session, tmp_path
):
    ray = ray_session
    from xdscheduler.runtime.controller import Controller

    scn = load_scenario(SCENARIO)
    jobs = study_jobs(scn, HOURS, SEED)
    dyn = study_dynamics(scn, SEED, HOURS)
    whole = run_here(
        StudyInputs(scn, jobs, dyn, HOURS),
        make_policy("planner", scn.weights),
        ledger=str(tmp_path / "whole" / "ledger.sqlite"),
    )
    journal, ledger = str(tmp_path / "journal.sqlite"), str(tmp_path / "ledger.sqlite")

    def controller():
        return Controller.remote(
            StudyInputs(scn, jobs, dyn, HOURS), "planner", journal=journal, ledger=ledger
        )

    first = controller()
    ray.get(first.advance.remote(1800))
    ray.get(first.advance.remote(3600))
    ray.kill(first)
    res = run_to_end(ray, controller(), 3600.0)
    killed, uninterrupted = read_ledger(tmp_path), read_ledger(tmp_path / "whole")
    # a job's usage starts when it starts, not when it arrived
    first = uninterrupted.groupby("job")["t0_s"].min()
    starts = {r.name: r.start_s for r in whole.jobs if r.start_s is not None}
    assert first.to_dict() == pytest.approx(starts)
    assert len(killed) == len(uninterrupted)  # nothing written twice, nothing missing
    for tenant in TENANTS:
        a = bill(killed, tenant, "planner").total_usd
        assert round(a, 2) == round(bill(uninterrupted, tenant, "planner").total_usd, 2)
        assert round(a, 2) == round(res.tenants[tenant]["bill_usd"], 2)
        assert round(a, 2) == round(whole.tenants[tenant]["bill_usd"], 2)
