"""A study's output folder: one study at a time, nothing finished overwritten without --force, an
interrupted study resumed from its journal to the report an uninterrupted run writes."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO, small_scenario
from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.runtime.folder import StudyFolder
from xdscheduler.textfile import write_atomic

LOCAL = ["run", "--local", "--policies", "planner", "--hours", "1"]


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_a_second_study_into_a_folder_in_use_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    with StudyFolder(out):  # a study running there now
        code, err = run(capsys, *LOCAL, "--out", str(out))
    assert code == 2 and "in use by another study" in err
    assert not (out / "report.json").exists()


def test_a_finished_study_is_kept_unless_forced(capsys, tmp_path):
    out = str(tmp_path / "out")
    assert run(capsys, *LOCAL, "--out", out)[0] == 0
    before = (tmp_path / "out" / "report.json").read_text()
    code, err = run(capsys, *LOCAL, "--seed", "2", "--out", out)
    assert code == 2 and "holds a finished study" in err and "--force" in err
    assert (tmp_path / "out" / "report.json").read_text() == before
    assert run(capsys, *LOCAL, "--seed", "2", "--out", out, "--force")[0] == 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["seed"] == 2


def test_files_the_study_did_not_write_are_kept_unless_forced(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("my own report")  # no study there
    (out / "notes.txt").write_text("mine")
    code, err = run(capsys, *LOCAL, "--out", str(out))
    assert code == 2 and f"{out} holds report.html, which the study would write over" in err
    assert (out / "report.html").read_text() == "my own report"
    assert run(capsys, *LOCAL, "--out", str(out), "--force")[0] == 0
    assert (out / "report.json").exists() and (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["--resume", "{out}"], "holds no study to resume"),
        (["--resume", "{out}", "--seed", "3"], "leave out --seed"),
        (["--resume", "{out}", "--hours", "2"], "leave out --hours"),
        (["--resume", "{out}", "--speed", "2"], "leave out --speed"),
    ],
)
def test_resume_needs_a_journal_and_takes_nothing_else(capsys, tmp_path, argv, reason):
    out = tmp_path / "out"
    assert run(capsys, *LOCAL, "--out", str(out))[0] == 0  # --local: no journal
    code, err = run(capsys, "run", *[a.format(out=out) for a in argv])
    assert code == 2 and reason in err


def test_an_unwritable_output_is_refused_before_any_work(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    started = time.monotonic()
    code, err = run(capsys, "run", "--local", "--out", str(tmp_path / "file" / "out"))
    assert code == 2 and "cannot write the output folder" in err
    assert time.monotonic() - started < 120  # a hang, not a speed bound


def test_files_are_written_whole_or_not_at_all(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")

    def full_disk(path):
        path.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(UserError, match="No space left on device"):
        write_atomic(target, full_disk)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_a_damaged_study_record_is_a_clear_error(tmp_path):
    (tmp_path / "journal.sqlite").write_bytes(b"")
    (tmp_path / "study.json").write_text('{"scenario": ')
    with pytest.raises(UserError, match=r"study\.json is damaged"):
        StudyFolder(tmp_path).spec()


@pytest.mark.slow
def test_a_study_killed_mid_way_resumes_to_the_report_of_an_uninterrupted_run(
    capsys, ray_session, tmp_path
):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario().model_dump(mode="json")))
    argv = [
        "run",
        str(scenario),
        "--policies",
        "planner-single-domain,planner",
        "--hours",
        "6",
        "--realtime",
        "--speed",
        "14400",
    ]
    out = tmp_path / "killed"
    # its own driver and local Ray, interrupted as a user would (Ctrl-C)
    proc = subprocess.Popen(
        [sys.executable, "-m", "xdscheduler.cli", *argv, "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while reached(out) < 3 * 3600:
            assert proc.poll() is None, "the study ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]  # one line saying how to go on
    assert err.strip().splitlines()[-1] == f"xds: interrupted; resume with xds run --resume {out}"
    assert "Traceback" not in err
    assert not (out / "report.json").exists()
    assert run(capsys, "run", "--resume", str(out))[0] == 0
    assert run(capsys, *argv, "--out", str(tmp_path / "whole"))[0] == 0
    resumed, whole = (
        json.loads((tmp_path / d / "report.json").read_text()) for d in ("killed", "whole")
    )
    for name in ("planner-single-domain", "planner"):
        a, b = resumed["policies"][name], whole["policies"][name]
        for key in (
            "mean_jct_s",
            "jobs_completed",
            "objective",
            "useful_utilization",
            "cross_domain_gb",
            "mean_queue_s",
        ):
            assert a[key] == pytest.approx(b[key], rel=1e-12), (name, key)


def reached(out) -> float:
    """How far the journal of a running study has come (0 before it exists)."""
    path = out / "journal.sqlite"
    if not path.exists():
        return 0.0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            (t,) = db.execute("SELECT MAX(time_s) FROM jobs").fetchone()
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0.0
    return t or 0.0
