"""Files and folders as a hostile user gives them (issue 36): outputs never written through a
device, a fifo, a socket or a symlink to one, and a target that cannot be written refused in one
line before the work; inputs read bounded; a study folder naming no code that runs and no
endpoint that gets the token; tampered journals refused naming the file and the decision; a
state file that stops only what `xds up` started; Ctrl-C in one line with exit status 130."""

from __future__ import annotations

import json
import os
import pickle
import resource
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, small_scenario
from xdscheduler.cli import main
from xdscheduler.errors import UserError
from xdscheduler.runtime.folder import StudyFolder, StudySpec
from xdscheduler.runtime.journal import DivergedError, Journal
from xdscheduler.textfile import read_text, write_atomic

PUBLISHED = REPO / "benchmarks" / "published_runs.csv"
SHIPPED_POLICY = REPO / "xdscheduler" / "rl" / "trained" / "study"


def refused(capsys, *argv, says: str = "") -> str:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (argv, err)
    assert lines and lines[-1].startswith("xds: error:") and "Traceback" not in err, err
    assert says in lines[-1], err
    return lines[-1]


def xds(*argv, memory: int | None = 2 << 30, timeout: float = 60, **kw):
    """`xds ARGV` in a process of its own, its address space bounded (an unbounded read fails
    there, not on this machine)."""

    def limit():
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "xdscheduler.cli", *map(str, argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        **kw,
    )


# ---------------------------------------------------------------------------- outputs


def special(kind: str, where: Path) -> tuple[Path, list[Path]]:
    """An output path where something other than a regular file stands, and what to check
    is unchanged after."""
    path = where / f"out-{kind}.csv"
    if kind == "fifo":
        os.mkfifo(path)
        return path, [path]
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        special.sockets.append(s)
        return path, [path]
    if kind in ("device", "device-link"):
        real = path if kind == "device" else where / "null"
        try:  # a copy of /dev/null of our own: replacing it harms nothing
            os.mknod(real, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
        if kind == "device-link":
            path.symlink_to(real)
        return path, [path, real]
    if kind == "fifo-link":
        os.mkfifo(where / "fifo")
        path.symlink_to(where / "fifo")
        return path, [path, where / "fifo"]
    if kind == "dangling":
        path.symlink_to(where / "nowhere" / "x.csv")
        return path, [path]
    if kind == "folder":
        path.mkdir()
        return path, [path]
    raise ValueError(kind)


special.sockets = []
SPECIALS = ["fifo", "socket", "device", "device-link", "fifo-link", "dangling", "folder"]


def identity(paths: list[Path]) -> list:
    return [(stat.S_IFMT(os.lstat(p).st_mode), os.lstat(p).st_ino) for p in paths]


@pytest.mark.parametrize("kind", SPECIALS)
def test_write_atomic_never_replaces_or_writes_through_a_special_file(tmp_path, kind):
    path, watched = special(kind, tmp_path)
    before = identity(watched)
    with pytest.raises(UserError, match="cannot write"):
        write_atomic(path, "a,b\n")
    assert identity(watched) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_write_atomic_writes_a_regular_file_through_its_symlink_and_keeps_its_mode(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    real.chmod(0o600)
    (tmp_path / "link.csv").symlink_to(real)
    write_atomic(tmp_path / "link.csv", "new")
    assert (tmp_path / "link.csv").is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A finished --local study of three tenants (it has a ledger)."""
    out = tmp_path_factory.mktemp("hostile") / "study"
    assert (
        main(
            [
                "run",
                "scenarios/three_tenants.yaml",
                "--hours",
                "0.5",
                "--local",
                "--policies",
                "planner",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.mark.parametrize("kind", SPECIALS)
def test_xds_bill_never_replaces_a_device_or_writes_through_a_fifo(capsys, study, tmp_path, kind):
    path, watched = special(kind, tmp_path)
    before = identity(watched)
    refused(capsys, "bill", study, "--tenant", "big-lab", "--csv", path, says="cannot write")
    assert identity(watched) == before


@pytest.mark.parametrize(
    "target", ["{tmp}/no-such-folder/bill.csv", "/proc/self/bill.csv", "/proc/version"]
)
def test_a_missing_folder_or_a_proc_target_is_one_line(capsys, study, tmp_path, target):
    refused(
        capsys,
        "bill",
        study,
        "--tenant",
        "big-lab",
        "--csv",
        target.format(tmp=tmp_path),
        says="cannot write",
    )


def test_every_writer_refuses_a_fifo_before_its_work(capsys, tmp_path):
    """Each command that writes a file the user names: a fifo there is refused (never opened:
    a writer would wait on it for ever), before the fit, the forecast or the grid."""
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    series = tmp_path / "s.csv"
    series.write_text(
        "time,active\n"
        + "".join(
            f"2020-01-{1 + i // 144:02d} {(i % 144) // 6:02d}:{(i % 6) * 10:02d}:00,{50 + i % 7}\n"
            for i in range(144 * 3)
        )
    )
    for argv in (
        ["calibrate", PUBLISHED, "--stack", "megatron-core", "--out", fifo, "--force"],
        ["forecast", "plot", series, "--out", fifo],
        [
            "scenario",
            "from-measurements",
            "--regions",
            "aws:us-east-1,aws:us-west-2",
            "--out",
            fifo,
            "--force",
        ],
    ):
        refused(capsys, *argv, says="not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(
    "name",
    ["study.json", "report.html", "metrics.parquet", "jct.png", "decisions.jsonl", "ledger.sqlite"],
)
def test_a_special_file_planted_in_the_output_folder_is_refused_before_the_study(
    capsys, tmp_path, name
):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(tmp_path / "fifo")
    (out / name).symlink_to(tmp_path / "fifo")
    refused(
        capsys,
        "run",
        "--local",
        "--policies",
        "planner",
        "--hours",
        "0.25",
        "--out",
        out,
        says=name,
    )
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (out / name).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == sorted([name, ".xds-lock"])  # no work


@pytest.mark.parametrize("link", [False, True], ids=["fifo", "link-to-fifo"])
@pytest.mark.parametrize("name", ["report.json", "study.json", "journal.sqlite"])
def test_force_removes_no_special_file_planted_where_a_study_starts_over(
    capsys, tmp_path, name, link
):
    # --force unlinked these names whatever they were: a fifo (or, as root, a device node)
    # planted as report.json was removed and replaced by the study's report; and a symlink
    # to one was replaced by a regular file
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(tmp_path / "fifo" if link else out / name)
    if link:
        (out / name).symlink_to(tmp_path / "fifo")
    refused(
        capsys,
        "run",
        "--local",
        "--policies",
        "planner",
        "--hours",
        "0.25",
        "--out",
        out,
        "--force",
        says=name,
    )
    assert stat.S_ISFIFO(os.stat(out / name).st_mode) and (out / name).is_symlink() == link


def test_compare_refuses_a_planted_output_before_the_grid(capsys, tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    os.mkfifo(out / "compare.md")
    refused(
        capsys,
        "compare",
        "scenarios/five_domains.yaml",
        "--local",
        "--seeds",
        "1",
        "--loads",
        "0.5",
        "--hours",
        "0.25",
        "--out",
        out,
        says="compare.md",
    )
    assert [p.name for p in out.iterdir()] == ["compare.md"]  # nothing ran


# ---------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "--local", "--readme", "{input}"],
        ["share", "bench", "--readme", "{input}"],
    ],
)
@pytest.mark.parametrize("given", ["/dev/zero", "sparse"])
def test_a_readme_is_read_bounded(tmp_path, command, given):
    if given == "sparse":  # 4 GiB of holes: no disk used, unbounded it takes the memory
        given = tmp_path / "README.md"
        with open(given, "wb") as f:
            f.truncate(4 << 30)
    done = xds(*[str(given) if w == "{input}" else w for w in command], timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("xds: error:") and len(done.stderr.splitlines()) == 1


def test_the_one_reader_refuses_what_is_not_a_regular_file_of_bounded_size(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 2000)
    for path, says in (
        (tmp_path / "fifo", "not a regular file"),
        (Path("/dev/zero"), "not a regular file"),
        (tmp_path, "a folder"),
        (tmp_path / "big", "2,000"),
    ):
        with pytest.raises(UserError, match=says):
            read_text(path, "input", 1000, "CSV")


def test_a_gzipped_input_is_read_unpacked_and_bounded_unpacked(tmp_path):
    """A .gz file reads as its content; one that inflates past the bound (a kilobyte to a
    megabyte of zeros) is refused before it is all in memory, as is a damaged one."""
    import gzip

    (tmp_path / "ok.csv.gz").write_bytes(gzip.compress(b"a,b\n1,2\n"))
    assert read_text(tmp_path / "ok.csv.gz", "input", 1000, "CSV") == "a,b\n1,2\n"
    (tmp_path / "bomb.csv.gz").write_bytes(gzip.compress(b"0" * (1 << 20)))
    assert (tmp_path / "bomb.csv.gz").stat().st_size < 5000
    with pytest.raises(UserError, match="over 5,000 bytes unpacked"):
        read_text(tmp_path / "bomb.csv.gz", "input", 5000, "CSV")
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(b"a,b\n" * 100)[:20])
    (tmp_path / "not.csv.gz").write_text("a,b\n1,2\n")
    for name in ("cut.csv.gz", "not.csv.gz"):
        with pytest.raises(UserError, match=f"cannot read input .*{name}"):
            read_text(tmp_path / name, "input", 1000, "CSV")


# ---------------------------------------------------------------------------- study folders


class Planted:
    """A pickle that, loaded, leaves a marker file: code from a study folder ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def interrupted(tmp_path: Path, **spec) -> Path:
    """A study folder as an interrupted study leaves it (study.json and a journal), its
    record changed by `spec`."""
    out = tmp_path / "study"
    out.mkdir()
    scn = small_scenario().model_dump(mode="json")
    record = StudySpec(scenario=scn, policies=["planner"], hours=0.5, seed=1).model_dump()
    (out / "study.json").write_text(json.dumps({**record, **spec}))
    Journal(out / "journal.sqlite", "planner").close()
    return out


def test_resume_loads_no_pickle_a_study_folder_names(capsys, tmp_path):
    planted = tmp_path / "planted"
    shutil.copytree(SHIPPED_POLICY, planted)
    marker = tmp_path / "ran"
    for pkl in planted.rglob("*.pkl"):
        pkl.write_bytes(pickle.dumps(Planted(marker)))
    out = interrupted(tmp_path, policies=["ppo"], policy_path=str(planted))
    refused(capsys, "run", "--resume", out, says="name it again (--policy-path")
    assert not marker.exists()


def test_a_record_pacing_a_study_that_is_not_live_is_damaged_not_a_flag_never_given(
    capsys, tmp_path
):
    """A study.json with a speed but realtime false was refused as '--speed paces a live
    study: add --realtime', naming a flag the user never typed."""
    out = interrupted(tmp_path, realtime=False, speed=600.0)
    said = refused(capsys, "run", "--resume", out, says="study.json is damaged")
    assert "speed 600 paces a live study" in said


def test_resume_sends_the_token_to_no_endpoint_a_study_folder_names(capsys, tmp_path):
    out = interrupted(tmp_path, policies=["ppo"], serve_url="http://127.0.0.1:9")
    refused(capsys, "run", "--resume", out, says="--serve-url http://127.0.0.1:9")


def test_a_policy_is_trusted_when_named_again_or_unchanged_since_the_start(tmp_path):
    from xdscheduler.runtime.folder import digest, trusted

    policy = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, policy)
    scn = small_scenario().model_dump(mode="json")
    spec = StudySpec(
        scenario=scn,
        policies=["ppo"],
        hours=1,
        seed=1,
        policy_path=str(policy),
        policy_sha256=digest(policy),
    )
    trusted(spec, tmp_path, None, None)  # the folder it began with
    trusted(spec, tmp_path, str(policy), None)  # named again
    (policy / "upper" / "metadata.json").write_text("{}")  # changed since
    with pytest.raises(UserError, match="name it again"):
        trusted(spec, tmp_path, None, None)
    trusted(spec, tmp_path, str(policy), None)  # the user's choice, named on the command line
    with pytest.raises(UserError, match="not the policy"):
        trusted(spec, tmp_path, str(SHIPPED_POLICY), None)


def test_a_study_records_the_digest_of_its_policy(capsys, tmp_path):
    from xdscheduler.runtime.folder import digest

    out = tmp_path / "out"
    assert (
        main(
            [
                "run",
                "--local",
                "--policies",
                "ppo",
                "--hours",
                "0.25",
                "--policy-path",
                str(SHIPPED_POLICY),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    spec = StudyFolder(out).path / "study.json"
    assert json.loads(spec.read_text())["policy_sha256"] == digest(SHIPPED_POLICY)


def study_engine(out: Path):
    """The engine of the study recorded in `out`, at its start."""
    from xdscheduler.registry import make_policy
    from xdscheduler.sim.engine import Engine
    from xdscheduler.sim.inputs import StudyInputs

    spec = StudyFolder(out).spec()
    scn = small_scenario()
    return Engine(
        StudyInputs.drawn(scn, spec.hours, spec.seed), make_policy("planner", scn.weights)
    )


def logged_study(tmp_path: Path) -> Path:
    """An interrupted study folder whose journal holds an hour of the planner's decisions."""
    out = interrupted(tmp_path)
    engine = study_engine(out)
    journal = Journal(out / "journal.sqlite", "planner")
    engine.recorder.subscribe(journal.record)
    engine.run(until_s=3600)
    journal.checkpoint(engine)
    assert journal.logged >= 3
    journal.close()
    return out


def test_a_journal_missing_a_decision_is_refused_naming_the_file_and_the_decision(capsys, tmp_path):
    out = logged_study(tmp_path)
    with sqlite3.connect(out / "journal.sqlite") as db:
        db.execute("DELETE FROM decisions WHERE idx = 1")
    line = refused(capsys, "run", "--resume", out, says="decision 1 is missing")
    assert str(out / "journal.sqlite") in line


def test_a_truncated_journal_is_refused_naming_the_file(capsys, tmp_path):
    out = logged_study(tmp_path)
    data = (out / "journal.sqlite").read_bytes()
    (out / "journal.sqlite").write_bytes(data[: len(data) // 3])
    line = refused(capsys, "run", "--resume", out, says="is damaged")
    assert str(out / "journal.sqlite") in line


def test_a_deleted_decision_met_in_a_replay_is_a_divergence_not_a_type_error(tmp_path):
    from xdscheduler.runtime.journal import check_log

    out = logged_study(tmp_path)
    with sqlite3.connect(out / "journal.sqlite") as db:
        db.execute("DELETE FROM decisions WHERE idx = 0")
    replay = study_engine(out)
    replay.recorder.subscribe(Journal(out / "journal.sqlite", "planner").record)
    with pytest.raises(DivergedError, match="decision 0 differs"):
        replay.run(until_s=3600)
    with pytest.raises(UserError, match="decision 0 is missing"):
        check_log(out / "journal.sqlite", "journal")


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"hours": float("nan")}, "hours"),
        ({"policies": []}, "policies"),
        ({"seed": -1}, "seed"),
        ({"faults": 1e9}, "faults"),
    ],
)
def test_an_edited_study_record_is_refused_naming_the_field(capsys, tmp_path, edit, says):
    out = interrupted(tmp_path)
    spec = json.loads((out / "study.json").read_text())
    (out / "study.json").write_text(json.dumps({**spec, **edit}))
    refused(capsys, "run", "--resume", out, says=says)


def test_a_state_file_stops_no_process_up_did_not_start(capsys, tmp_path):
    canary = subprocess.Popen(["sleep", "60"])
    try:
        state = tmp_path / "state.json"
        state.write_text(
            json.dumps(
                {
                    "scenario": str(REPO / "scenarios" / "local_three_domains.yaml"),
                    "address": "127.0.0.1:1",
                    "processes": [{"pid": canary.pid, "role": "head"}],
                }
            )
        )
        assert main(["down", "--state", str(state)]) == 0
        assert "left alone" in capsys.readouterr().out
        assert canary.poll() is None
    finally:
        canary.kill()
        canary.wait()


# ---------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_on_a_study_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xdscheduler.cli",
            "run",
            "--local",
            "--policies",
            "planner",
            "--hours",
            "24",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / "study.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)  # into the study
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the process group
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = [x for x in err.splitlines() if x.strip() and "xdscheduler.runtime.study" not in x]
    assert proc.returncode == 130, err
    assert lines == [
        "xds: interrupted; a study run with --local keeps no journal to resume: run it again "
        "with --force"
    ], err


def test_an_interrupt_message_names_the_resume_command_where_a_journal_is_kept(tmp_path):
    from xdscheduler.cli import _interrupted

    (tmp_path / "journal.sqlite").write_bytes(b"")
    assert _interrupted(tmp_path) == f"interrupted; resume with xds run --resume {tmp_path}"
