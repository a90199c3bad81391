"""Nothing lost: the journal keeps the decision log and job table; a controller killed mid-run
and started again finishes with the same report as a run never interrupted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from xdscheduler.registry import make_policy
from xdscheduler.runtime.journal import DivergedError, Journal
from xdscheduler.runtime.study import run_here
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs

from .conftest import small_scenario

HOURS, SEED = 3.0, 6


def job_table(res) -> list[tuple]:
    return [
        (
            r.spec.name,
            r.start_s,
            r.end_s,
            r.placement and (r.placement.domains, r.placement.gpus, r.placement.plan),
            r.replans,
            r.requeues,
        )
        for r in res.jobs
    ]


def decisions(res) -> list[tuple]:
    return [(d.time_s, d.job, d.action, d.domains, d.plan) for d in res.decisions]


@pytest.fixture(scope="module")
def study():
    scn = small_scenario()
    jobs = study_jobs(scn, HOURS, SEED)
    dyn = study_dynamics(scn, SEED, HOURS)
    whole = run_here(StudyInputs(scn, jobs, dyn, HOURS), make_policy("planner", scn.weights))
    return scn, jobs, dyn, whole


def engine(scn, jobs, dyn):
    return Engine(StudyInputs(scn, jobs, dyn, HOURS), make_policy("planner", scn.weights))


def checkpointed(study, path: Path) -> tuple[Engine, Journal]:
    """The study's engine, its decisions logged to a journal at `path`, run to 5400 s and
    checkpointed there."""
    scn, jobs, dyn, _ = study
    first = engine(scn, jobs, dyn)
    journal = Journal(path, "planner")
    first.recorder.subscribe(journal.record)
    first.run(until_s=5400)
    journal.checkpoint(first)
    return first, journal


def test_a_replayed_engine_finishes_like_one_never_stopped(study, tmp_path):
    scn, jobs, dyn, whole = study
    first, journal = checkpointed(study, tmp_path / "j.sqlite")
    first.run(until_s=7200)  # decisions after the checkpoint, then the crash
    logged = journal.logged
    again = Journal(tmp_path / "j.sqlite", "planner")
    assert again.reached() == 5400
    second = engine(scn, jobs, dyn)
    second.recorder.subscribe(again.record)  # re-made decisions are checked against the log
    second.run(until_s=again.reached())
    res = second.run()
    assert job_table(res) == job_table(whole)
    assert decisions(res) == decisions(whole)
    assert again.logged == len(whole.decisions) > logged
    rows = (
        sqlite3.connect(tmp_path / "j.sqlite")
        .execute("SELECT COUNT(*) FROM decisions")
        .fetchone()[0]
    )
    assert rows == len(whole.decisions)  # nothing written twice


def test_a_log_that_lost_its_last_commits_resumes_like_one_never_stopped(study, tmp_path):
    """A study's log leaves its commits to reach the disk lazily: a machine's crash may lose
    the last ones (in order; a process's crash loses none), and a resume makes them again."""
    scn, jobs, dyn, whole = study
    first, journal = checkpointed(study, tmp_path / "j.sqlite")
    kept = journal.logged
    first.run(until_s=7200)
    journal.checkpoint(first)
    first.run(until_s=9000)
    with sqlite3.connect(tmp_path / "j.sqlite") as db:  # what the crash lost
        db.execute("DELETE FROM decisions WHERE idx >= ?", (kept,))
        db.execute("DELETE FROM jobs WHERE time_s > 5400")
    again = Journal(tmp_path / "j.sqlite", "planner")
    assert (again.reached(), again.logged) == (5400, kept)
    second = engine(scn, jobs, dyn)
    second.recorder.subscribe(again.record)
    second.run(until_s=again.reached())
    res = second.run()
    assert job_table(res) == job_table(whole) and decisions(res) == decisions(whole)
    assert again.logged == len(whole.decisions) > kept


def test_only_logs_a_resume_makes_again_commit_lazily(tmp_path):
    """A study's journal and ledger (remade by a resume) skip the flush to disk; the live
    plane's job book, whose jobs really ran, keeps it."""
    from xdscheduler.live.jobbook import JobBook
    from xdscheduler.runtime.ledger import Ledger

    normal, full = 1, 2  # PRAGMA synchronous
    logs = (Journal(tmp_path / "j.sqlite", "p"), Ledger(tmp_path / "l.sqlite", "p"))
    assert [log.db.execute("PRAGMA synchronous").fetchone()[0] for log in logs] == [normal] * 2
    live = JobBook(tmp_path / "live.sqlite")
    assert live.db.execute("PRAGMA synchronous").fetchone()[0] == full


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE decisions SET record = replace(record, 'place', 'moved') WHERE idx = 0",
        "UPDATE decisions SET record = 'cos\nsystem\n(S''touch pwned''\ntR.' WHERE idx = 0",
        "UPDATE decisions SET record = '{\"truncated' WHERE idx = 0",
    ],
)
def test_a_damaged_or_tampered_log_is_refused_and_nothing_in_it_runs(study, tmp_path, damage):
    scn, jobs, dyn, _ = study
    eng = engine(scn, jobs, dyn)
    journal = Journal(tmp_path / "j.sqlite", "planner")
    eng.recorder.subscribe(journal.record)
    eng.run(until_s=3600)
    journal.db.execute(damage)
    replay = engine(scn, jobs, dyn)
    replay.recorder.subscribe(Journal(tmp_path / "j.sqlite", "planner").record)
    with pytest.raises(DivergedError, match="decision 0"):
        replay.run(until_s=3600)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def run_to_end(ray, controller, t: float):
    """A controller's study from `t` on, an hour at a time, to its results (then it goes)."""
    while not ray.get(controller.advance.remote(t))["finished"]:
        t += 3600
    res = ray.get(controller.results.remote())
    ray.kill(controller)
    return res


def test_killing_the_controller_mid_run_loses_nothing(ray_session, study, tmp_path):
    ray = ray_session
    from xdscheduler.runtime.controller import Controller

    scn, jobs, dyn, whole = study
    path = str(tmp_path / "journal.sqlite")

    def controller():
        return Controller.remote(StudyInputs(scn, jobs, dyn, HOURS), "planner", journal=path)

    first = controller()
    ray.get(first.advance.remote(3600))
    ray.get(first.advance.remote(7200))
    ray.kill(first)  # mid-run: its domain actors die with it
    res = run_to_end(ray, controller(), 7200.0)
    assert job_table(res) == job_table(whole)
    assert decisions(res) == decisions(whole)
    assert len(Journal(path, "planner").decisions()) == len(whole.decisions)
