"""Whose waits cost what (benchmarks/who_waited.py): the table's sums, and one cell run."""

from __future__ import annotations

import pytest

from benchmarks import who_waited as ww
from xdscheduler.scenario import load_scenario


def test_the_table_sums_each_class_by_whether_it_waited():
    h = 3600.0
    jobs = [
        ww.Outcome(giant=False, waited=True, late=False, jct_s=2 * h, waiting_jct_s=1 * h),
        ww.Outcome(giant=False, waited=True, late=True, jct_s=1 * h, waiting_jct_s=2 * h),
        ww.Outcome(giant=False, waited=False, late=False, jct_s=1 * h, waiting_jct_s=1 * h),
        ww.Outcome(giant=True, waited=True, late=True, jct_s=4 * h, waiting_jct_s=5 * h),
    ]
    assert ww.rows_of(jobs) == [
        ["fits", "waited", 2, 3.0, 3.0, "+0.0%"],
        ["fits", "  of which started late", 1, 1.0, 2.0, "+100.0%"],
        ["fits", "never waited", 1, 1.0, 1.0, "+0.0%"],
        ["giants", "waited", 1, 4.0, 5.0, "+25.0%"],
        ["giants", "  of which started late", 1, 4.0, 5.0, "+25.0%"],
        ["giants", "never waited", 0, 0.0, 0.0, "–"],
    ]


@pytest.mark.parametrize("unbounded", [False, True])
def test_a_cell_pairs_every_job_finished_under_both(unbounded):
    scn = load_scenario("scenarios/three_domains.yaml")
    jobs = ww.outcomes(scn, 1, 0.9, 1.0, unbounded, 600.0)
    assert jobs and all(o.jct_s > 0 and o.waiting_jct_s > 0 for o in jobs)
    assert all(o.waited for o in jobs if o.late)  # only a job that waited can start late


def test_a_scenario_that_is_not_one_is_a_clear_exit(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("domains: 3\n")
    monkeypatch.setattr("sys.argv", ["who_waited", "--scenarios", str(bad), "--seeds", "1"])
    with pytest.raises(SystemExit, match=r"error: .*bad\.yaml"):
        ww.main()
